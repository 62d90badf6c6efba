"""Voila's settings for the instructor view (`make present`; read through JUPYTER_CONFIG_PATH=instructor).

Voila executes the notebook in its own process, through nbclient like the book build, so it gets the same two
guards against the intermittent stall of issue 8 (see helpers.notebook_client): a reply whose wake-up was lost
is picked up within half a second, and a cell that still hangs ends with Voila's "Cell execution timed out"
message after 300 s (the book build's per-cell limit) instead of a page that never finishes loading.
"""
from helpers.notebook_client import wake_up_lost_messages

wake_up_lost_messages()

c = get_config()  # noqa: F821  (traitlets provides get_config to configuration files)
c.VoilaExecutor.timeout = 300
