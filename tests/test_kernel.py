"""The chapter's kernel starts with the environment that keeps torch fast on a busy machine (issue 39)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel

from mic_tools import kernel


def test_the_spec_runs_this_python_with_the_environment(tmp_path):
    path = kernel.install(tmp_path)
    spec = json.loads(path.read_text(encoding="utf8"))
    assert path == tmp_path / "share/jupyter/kernels/python3/kernel.json"
    assert spec["argv"][0] == sys.executable and "ipykernel_launcher" in spec["argv"]
    assert spec["env"] == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_a_kernel_jupyter_starts_has_it_before_torch_is_imported():
    """The spec jupyter finds for the notebooks' kernel name is ours, and a kernel started from it (as JupyterLab,
    Voila, nbconvert and the book build start one) sees the setting in its environment from the start."""
    assert KernelSpecManager().get_kernel_spec("python3").env == kernel.KERNEL_ENV, "run make install"
    km, kc = start_new_kernel(kernel_name="python3")
    seen = []
    try:
        code = "import os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
        reply = kc.execute_interactive(code, timeout=60, output_hook=seen.append)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok"
    printed = "".join(m["content"].get("text", "") for m in seen if m["msg_type"] == "stream")
    assert printed.split() == ["PASSIVE", "False"], printed
