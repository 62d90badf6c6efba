"""Sphinx extension for the chapter's static site.

* Serves one local copy of plotly.js at the site root. Figures are emitted by
  helpers.infra.plotting's renderer as a <div> plus a loader that fetches
  ``plotly.min.js`` from the site root (found through the page's
  ``data-content_root``), so the site works offline and pages stay small.
* Serves MathJax 3 from the site too (the files come from the PyPI package
  ``django-static-mathjax``): Sphinx's default loads it from a CDN, which leaves
  every formula as raw TeX offline. ``mathjax_path`` is set here accordingly.
* Builds in static mode: sets ``MIC_STATIC=1`` before any notebook kernel starts, so
  ``jupyter-book build book`` alone gives the same site as ``make book`` (live ipywidgets
  controls show nothing, progress bars are plain text on stderr, which the page drops).
* Executes reliably: patches the notebook client in this process so that a reply whose
  ZeroMQ wake-up was lost is picked up within half a second, instead of stalling the build
  until the cell timeout (``mic_tools.notebook_client``; issue 8).
* Drops sphinx-thebe's scripts: the chapter has no live-kernel launch on the
  static site, and Jupyter Book 1 injects thebe's inline config twice, which
  throws a JavaScript error on every page and asks unpkg.com for thebe.
"""
import os
import shutil
from pathlib import Path

# Kernels started by this build inherit the environment of the Sphinx process.
os.environ["MIC_STATIC"] = "1"

# myst-nb executes the notebooks with nbclient in this process.
from mic_tools.notebook_client import wake_up_lost_messages  # noqa: E402

wake_up_lost_messages()


def _copy_plotly(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    from helpers.infra.plotting import PLOTLY_JS_NAME, plotly_js_path
    shutil.copyfile(plotly_js_path(), Path(app.outdir) / PLOTLY_JS_NAME)


MATHJAX_DIR = "mathjax"


def _mathjax_es5() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("mathjax")
    for root in (spec.submodule_search_locations or []) if spec else []:
        es5 = Path(root) / "static" / "mathjax" / "es5"
        if (es5 / "tex-mml-chtml.js").is_file():
            return es5
    raise RuntimeError("MathJax files are missing: pip install django-static-mathjax==3.2.2.1 (the 'book' extra in pyproject.toml).")


def _use_local_mathjax(app, config):
    _mathjax_es5()  # fail early, with the fix, if the files are missing
    config.mathjax_path = f"{MATHJAX_DIR}/tex-mml-chtml.js"   # relative to _static/


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / MATHJAX_DIR
    if target.exists():
        shutil.rmtree(target)
    # the speech-rule engine and the 'full' bundles are large and unused
    shutil.copytree(_mathjax_es5(), target, ignore=shutil.ignore_patterns("sre", "*-full*", "node-main.js"))


def _is_thebe(script) -> bool:
    text = f"{getattr(script, 'filename', script)} {getattr(script, 'attributes', {}).get('body', '')}"
    return "thebe" in text.lower()


def _drop_thebe(app, pagename, templatename, context, doctree):
    if "script_files" in context:
        context["script_files"] = [s for s in context["script_files"] if not _is_thebe(s)]


def setup(app):
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_plotly)
    app.connect("build-finished", _copy_mathjax)
    app.connect("html-page-context", _drop_thebe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
