#!/usr/bin/env python
"""Hunt the lost-message stall: execute many tiny cells through nbclient and report every slow one.

    .venv/bin/python scripts/stress-kernel-client.py [--cells 3000] [--timeout 5] [--unpatched]

The cells take a kernel a few milliseconds each and produce the traffic a real notebook does: a quiet
assignment, a printed line, a 100 KB display (a figure's size), a burst of progress-bar writes on stderr. A cell that takes as long as the timeout
and then succeeds is the symptom issue 8 describes: the reply sat in the client's socket while its
asyncio watcher never fired, until the timeout's final poll found it. With the patch from
`helpers.notebook_client` (the default here) such a message is picked up within half a second.
"""
from __future__ import annotations

import argparse
import time

import nbformat
from nbclient import NotebookClient


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=3000)
    ap.add_argument("--timeout", type=int, default=5)
    ap.add_argument("--unpatched", action="store_true", help="run jupyter_client as installed")
    args = ap.parse_args()
    if not args.unpatched:
        from helpers.notebook_client import wake_up_lost_messages
        wake_up_lost_messages()

    kinds = [
        "x = {i}",
        "print('cell {i}')",
        "from IPython.display import HTML, display; display(HTML('<div>' + 'x' * 100_000 + '</div>'))",
        "import sys\nfor k in range(20): sys.stderr.write(f'\\r{{k}}/20'); sys.stderr.flush()",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(kinds[i % len(kinds)].format(i=i))
                                         for i in range(args.cells)])
    client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3")
    slow = []
    t_start = time.perf_counter()
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            t0 = time.perf_counter()
            client.execute_cell(cell, i)
            dt = time.perf_counter() - t0
            if dt > 0.5:
                slow.append((i, dt))
    total = time.perf_counter() - t_start
    print(f"{args.cells} cells in {total:.1f} s ({'unpatched' if args.unpatched else 'patched'}); "
          f"cells over 0.5 s: {len(slow)}" + "".join(f"\n  cell {i}: {dt:.2f} s" for i, dt in slow))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
