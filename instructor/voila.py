"""Voila's settings for the instructor view (`make present`; read through JUPYTER_CONFIG_PATH=instructor).

Voila executes the notebook in its own process, through nbclient like the book build, so it gets the same two
guards against the intermittent stall of issue 8 (see mic_tools.notebook_client): a reply whose wake-up was lost
is picked up within half a second, and a cell that still hangs ends with Voila's "Cell execution timed out"
message after the book build's per-cell limit (book/_config.yml: 300 s) instead of a page that never finishes
loading.
"""
from pathlib import Path

import yaml

from mic_tools.editions import write_notebook_stylesheet
from mic_tools.notebook_client import wake_up_lost_messages

wake_up_lost_messages()

# The editions' fonts, served by the room template itself (static/editions/editions.css, fonts beside it): a
# projector's machine need not have a Devanagari or Nastaliq font, and the page asks nothing from the internet.
# The same stylesheet runs an Urdu notebook right to left (mic_tools.editions.NOTEBOOK_RTL_CSS).
write_notebook_stylesheet(Path(__file__).resolve().parent / "voila" / "templates" / "room" / "static" / "editions",
                          "editions.css")

c = get_config()  # noqa: F821  (traitlets provides get_config and __file__ to configuration files)
BOOK_CONFIG = Path(__file__).resolve().parents[1] / "book" / "_config.yml"
c.VoilaExecutor.timeout = yaml.safe_load(BOOK_CONFIG.read_text())["execute"]["timeout"]
# JupyterLab extensions the page loads: not jupytext's. Its plugin needs JupyterLab's document manager, which
# Voila's page does not have, and every load logged "The getter for the shared module is not a function
# (#RUNTIME-012), shareKey @jupyterlab/docmanager" in the browser's console. The load in which the stream demo
# showed "Error displaying widget: model not found" had that error next to three "widget model not found" ones.
# Without jupytext the console shows no error. Nor jupyterlab-myst's: it renders Markdown cells in JupyterLab,
# needs JupyterLab's Markdown viewer ("Shared module @jupyterlab/markdownviewer doesn't exist in shared scope"
# on every load here), and Voila renders Markdown on the server anyway (the room template draws the exercises).
# Nor nbgrader's (the grading extra, issue 40), which needs JupyterLab's file browser and document registry
# ("Shared module @jupyterlab/filebrowser doesn't exist in shared scope", on every load), nor that of the Notebook 7
# that nbgrader brings along: both are for JupyterLab, not for a page that presents a notebook.
c.VoilaConfiguration.extension_denylist = ["jupyterlab-jupytext", "jupyterlab-myst", "@jupyter/nbgrader",
                                           "@jupyter-notebook/lab-extension"]
