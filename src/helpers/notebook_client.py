"""The notebook runner's side of the intermittent execution stall (issue 8), and its fix.

The symptom: a notebook executed by nbclient (the book build, `make bench`, `jupyter nbconvert
--execute`) stops between two cells with the kernel idle, then carries on exactly when the cell timeout
runs out, as if nothing had happened. The kernel is not stuck: its reply is already waiting in the
client's ZeroMQ socket. nbclient waits for it with `await socket.poll(timeout)` on an asyncio socket,
which relies on ZeroMQ's *edge-triggered* file descriptor to wake the event loop. When that wake-up is
missed, nothing wakes the loop until the timeout fires; pyzmq then polls once more without waiting,
finds the message, and execution resumes. Seen with ipykernel 6.31 and 7.x, jupyter_client 8.10,
pyzmq 27.3.

The fix: wait in short slices. Each slice that runs out ends in that same non-waiting poll, so a
message whose wake-up was lost is picked up within `SLICE_S` instead of at the cell timeout. A
blocking client (nbval's) polls with `zmq_poll` itself and is not affected.
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
