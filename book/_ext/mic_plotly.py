"""Sphinx extension: serve one local copy of plotly.js at the site root.

Figures in the notebooks are emitted by helpers.plotting's renderer as a <div>
plus a loader that fetches ``plotly.min.js`` from the site root (found through
the page's ``data-content_root``). This copies the file from the installed
plotly package, so the site works offline and each page stays small.
"""
import shutil
from pathlib import Path


def _copy_plotly(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    from helpers.plotting import PLOTLY_JS_NAME, plotly_js_path
    shutil.copyfile(plotly_js_path(), Path(app.outdir) / PLOTLY_JS_NAME)


def setup(app):
    app.connect("build-finished", _copy_plotly)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
