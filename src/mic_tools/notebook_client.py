"""A guard in our own notebook runners against the execution stall of issues 8 and 25.

The symptom: a notebook executed by nbclient (`jupyter nbconvert --execute`, papermill, the book build,
Voila) stops between two cells with the kernel idle, then carries on exactly when the cell timeout runs
out, as if nothing had happened. The kernel's reply is already waiting in the client's ZeroMQ socket.
nbclient waits for it with `await socket.poll(timeout)` on an asyncio socket, which relies on ZeroMQ's
*edge-triggered* file descriptor to wake the event loop; when that wake-up is lost, nothing wakes the
loop until the timeout fires, and pyzmq's last non-waiting poll then finds the message.

What loses it (issue 25): a *synchronous* send on that same socket while the reply is arriving. nbclient
makes one when a widget captures a cell's output (`with out:`, which `ipywidgets.interactive` does): it
plays JupyterLab's Output widget and sends each captured output back to the kernel on the shell channel,
from its IOPub task, while its shell task waits for the reply; jupyter_client's `Session.send` sends
through a blocking shadow of the asyncio socket (`zmq.Socket.shadow(sock.underlying)`), which reads the
socket's signal and so swallows the wake-up, and pyzmq's asyncio layer never learns of it. The chapter's
`helpers.live` no longer captures that way (it fills its output widget from the kernel), so no client
meets the stall on the chapter's notebooks, this patch or not; `scripts/stress-nbconvert.py` checks that
with the plain `jupyter nbconvert`. Without widgets no stall was found (3,000 tiny cells, unpatched).

What stays here: waiting in short slices, in the processes that call `wake_up_lost_messages` (the book
build, `make bench`, Voila, the debug script). Each slice that runs out ends in that same non-waiting
poll, so a message whose wake-up was lost (after output captured by a reader's own `with out:` cell, say)
is picked up within `SLICE_S` instead of at the cell timeout. A blocking client (nbval's) polls with
`zmq_poll` itself and is not affected.
"""
from __future__ import annotations

import time
from queue import Empty

SLICE_S = 0.5


async def _get_msg_in_slices(self, timeout: float | None = None) -> dict:
    """`AsyncZMQSocketChannel.get_msg`, waiting at most `SLICE_S` at a time for a wake-up."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = SLICE_S if deadline is None else min(SLICE_S, max(0.0, deadline - time.monotonic()))
        if await self.socket.poll(int(wait * 1000)):
            return await self._recv()
        if deadline is not None and time.monotonic() >= deadline:
            raise Empty


def wake_up_lost_messages() -> None:
    """Patch jupyter_client's asyncio channel in this process (idempotent). The book's Sphinx extension and
    our scripts call it before any kernel starts."""
    from jupyter_client.channels import AsyncZMQSocketChannel

    if AsyncZMQSocketChannel.get_msg is not _get_msg_in_slices:
        AsyncZMQSocketChannel.get_msg = _get_msg_in_slices
