"""The notebook client's guard against lost ZeroMQ wake-ups (issue 8's execution stall)."""
import asyncio
import time
from queue import Empty

import pytest

from helpers import notebook_client


class DeafSocket:
    """A socket whose wake-up is always lost: `poll` only notices a waiting message when its wait runs out,
    which is what pyzmq's asyncio poller does when the edge-triggered file descriptor never fires."""

    def __init__(self, message_at: float | None):
        self.message_at = message_at          # monotonic time the message arrives, or None: never
        self.waits = []

    async def poll(self, timeout_ms):
        self.waits.append(timeout_ms)
        await asyncio.sleep((timeout_ms or 0) / 1000)
        return int(self.message_at is not None and time.monotonic() >= self.message_at)


class Channel:
    def __init__(self, socket):
        self.socket = socket

    async def _recv(self):
        return {"msg_type": "execute_reply"}


def get(channel, timeout):
    t0 = time.monotonic()
    result = asyncio.run(notebook_client._get_msg_in_slices(channel, timeout))
    return result, time.monotonic() - t0


def test_a_message_whose_wake_up_was_lost_is_picked_up_within_a_slice_not_at_the_timeout():
    sock = DeafSocket(message_at=time.monotonic() + 0.1)
    msg, waited = get(Channel(sock), timeout=300)
    assert msg["msg_type"] == "execute_reply"
    assert waited < 2 * notebook_client.SLICE_S
    assert max(sock.waits) <= notebook_client.SLICE_S * 1000


def test_no_message_still_times_out_at_the_timeout():
    sock = DeafSocket(message_at=None)
    with pytest.raises(Empty):
        get(Channel(sock), timeout=1.2)
    assert 1.1 < sum(sock.waits) / 1000 < 1.5


def test_the_patch_replaces_jupyter_clients_asyncio_get_msg_once():
    from jupyter_client.channels import AsyncZMQSocketChannel
    original = AsyncZMQSocketChannel.get_msg
    try:
        notebook_client.wake_up_lost_messages()
        notebook_client.wake_up_lost_messages()
        assert AsyncZMQSocketChannel.get_msg is notebook_client._get_msg_in_slices
    finally:
        AsyncZMQSocketChannel.get_msg = original


def test_the_book_build_installs_the_patch(monkeypatch):
    import importlib.util
    from pathlib import Path

    from jupyter_client.channels import AsyncZMQSocketChannel
    original = AsyncZMQSocketChannel.get_msg
    monkeypatch.setenv("MIC_STATIC", "0")     # the extension sets it; monkeypatch restores it afterwards
    path = Path(__file__).resolve().parents[1] / "book" / "_ext" / "mic_plotly.py"
    spec = importlib.util.spec_from_file_location("mic_plotly_under_test", path)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        assert AsyncZMQSocketChannel.get_msg is notebook_client._get_msg_in_slices
    finally:
        AsyncZMQSocketChannel.get_msg = original
