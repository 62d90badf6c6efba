"""Sphinx extension for the chapter's static site.

* Serves one local copy of plotly.js at the site root. Figures are emitted by
  helpers.plotting's renderer as a <div> plus a loader that fetches
  ``plotly.min.js`` from the site root (found through the page's
  ``data-content_root``), so the site works offline and pages stay small.
* Drops sphinx-thebe's scripts: the chapter has no live-kernel launch on the
  static site, and Jupyter Book 1 injects thebe's inline config twice, which
  throws a JavaScript error on every page and asks unpkg.com for thebe.
"""
import shutil
from pathlib import Path


def _copy_plotly(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    from helpers.plotting import PLOTLY_JS_NAME, plotly_js_path
    shutil.copyfile(plotly_js_path(), Path(app.outdir) / PLOTLY_JS_NAME)


def _is_thebe(script) -> bool:
    text = f"{getattr(script, 'filename', script)} {getattr(script, 'attributes', {}).get('body', '')}"
    return "thebe" in text.lower()


def _drop_thebe(app, pagename, templatename, context, doctree):
    if "script_files" in context:
        context["script_files"] = [s for s in context["script_files"] if not _is_thebe(s)]


def setup(app):
    app.connect("build-finished", _copy_plotly)
    app.connect("html-page-context", _drop_thebe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
