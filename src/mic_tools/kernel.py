"""The chapter's Jupyter kernel: this environment's Python, started with the settings that keep it fast on a
machine that is also doing something else (issue 39).

    python -m mic_tools.kernel        (make install runs it) writes <env>/share/jupyter/kernels/python3/kernel.json

torch's OpenMP threads, by default, spin while they wait for each other. On a laptop whose two cores also run a
browser and a video call, a spinning thread takes the core a working one needs: a notebook measured 8 to 12 times
slower under two busy processes, where a fair share of the CPU predicts 2 to 3 times. ``OMP_WAIT_POLICY=PASSIVE``
makes a waiting thread sleep. The OpenMP runtime reads it once, as torch is imported, so it must be in the
kernel's environment from its start: the kernel spec's ``env``, which JupyterLab, the instructor view (Voila),
nbconvert and the book build (myst-nb) all honour. Every notebook names the kernel ``python3``; this spec, in the
environment's own share/jupyter, is the one they find (a user-wide spec of the same name would come first).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

KERNEL_NAME = "python3"
KERNEL_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def kernel_spec(python: str = sys.executable) -> dict:
    """ipykernel's own spec for ``python``, with :data:`KERNEL_ENV`."""
    return {"argv": [python, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3", "language": "python", "metadata": {"debugger": True}, "env": KERNEL_ENV}


def install(prefix: Path = Path(sys.prefix)) -> Path:
    """Write the spec into ``prefix``'s share/jupyter/kernels; returns the file written."""
    path = prefix / "share" / "jupyter" / "kernels" / KERNEL_NAME / "kernel.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kernel_spec(), indent=1) + "\n", encoding="utf8")
    return path


if __name__ == "__main__":
    print(f"Kernel spec with {KERNEL_ENV}: {install()}")
