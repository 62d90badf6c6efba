#!/usr/bin/env python
"""Hunt the execution stall (issues 8 and 25) the way a reader meets it: plain `jupyter nbconvert --execute`.

    .venv/bin/python scripts/stress-nbconvert.py [--runs 50] [--notebooks 06 05] [--model tiny|default]
                                                 [--timeout 60] [--gap 30] [--without-fix]

Executes chapter notebooks one after another, in live mode (MIC_STATIC unset, so every `live()` control is
built and run), with nothing of ours in the client process: `jupyter nbconvert --to notebook --execute
--ExecutePreprocessor.timeout=60 --ExecutePreprocessor.record_timing=True`. Claims are reported, not asserted
(MIC_CLAIMS=report), so a timing claim on this busy machine cannot stop a run. `--model tiny` (the default)
points the chapter at the tiny second-architecture model of tests/second_model.py, built once into the work
folder: a notebook then takes seconds, and the stall does not depend on the model.

A stall is a gap of more than `--gap` seconds between a cell's reply (`shell.execute_reply`) and the next
cell's start (`iopub.execute_input`), both stamped by the kernel: the kernel was idle while the client sat on a
reply it had not noticed, until the cell timeout's last poll found it and execution went on as if nothing had
happened. The cause (issue 25): nbclient plays JupyterLab's Output widget when a widget captures a cell's
output (`with out:`, which `ipywidgets.interactive` uses) and sends each captured output back to the kernel on
the shell channel while it waits there for the reply; jupyter_client sends through a blocking shadow of the
asyncio socket, which swallows the wake-up of a reply that has just arrived. `live()` now fills its output
widget from the kernel, so there is nothing to send. `--without-fix` puts the old behaviour back in each
executed copy (a first cell makes `live()` use `ipywidgets.interactive` itself), to show the script catches
the stall. Exit status 1 when any execution stalled or failed.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WITHOUT_FIX = ("# stress-nbconvert --without-fix: live() captures with `with out:` again, as before issue 25\n"
               "import ipywidgets\nimport helpers.infra.controls\n"
               "helpers.infra.controls._INTERACTIVE[:] = [ipywidgets.interactive]")


def stamp(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def stalls(nb: dict, gap_s: float) -> list[tuple[float, str]]:
    """(gap, first line of the cell before it) for each reply-to-next-start gap over ``gap_s``."""
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and c.get("metadata", {}).get("execution")]
    found = []
    for a, b in zip(cells, cells[1:]):
        end, start = a["metadata"]["execution"].get("shell.execute_reply"), b["metadata"]["execution"].get(
            "iopub.execute_input")
        if end and start and (g := (stamp(start) - stamp(end)).total_seconds()) > gap_s:
            src = "".join(a["source"]) if isinstance(a["source"], list) else a["source"]
            found.append((g, src.strip().splitlines()[0][:70] if src.strip() else ""))
    return found


def prepare(names: list[str], work: Path, without_fix: bool) -> list[Path]:
    out = []
    for name in names:
        src = next(iter(sorted((ROOT / "notebooks").glob(f"{name}*.md"))), None)
        if src is None:
            sys.exit(f"no notebook matches {name!r} in notebooks/")
        ipynb = work / (src.stem + ".ipynb")
        subprocess.run([BIN / "jupytext", "--quiet", "--to", "ipynb", "-o", ipynb, src], check=True)
        if without_fix:
            nb = json.loads(ipynb.read_text())
            nb["cells"].insert(0, {"cell_type": "code", "execution_count": None, "id": "stress-without-fix",
                                   "metadata": {}, "outputs": [], "source": WITHOUT_FIX})
            ipynb.write_text(json.dumps(nb))
        out.append(ipynb)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50, help="executions in all, taking the notebooks in turn")
    ap.add_argument("--notebooks", nargs="+", default=["06", "05"],
                    help="notebook name prefixes (default: 06 05, six and three live controls, seconds each)")
    ap.add_argument("--model", choices=["tiny", "default"], default="tiny")
    ap.add_argument("--timeout", type=int, default=60, help="nbconvert's cell timeout, s")
    ap.add_argument("--gap", type=float, default=30, help="a reply-to-next-cell gap over this is a stall, s")
    ap.add_argument("--without-fix", action="store_true", help="put back live()'s old `with out:` capture")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (executed notebooks) and say where")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="stress-nbconvert-"))
    env = {k: v for k, v in os.environ.items() if k not in ("MIC_STATIC", "MIC_MODEL")}
    env["MIC_CLAIMS"] = "report"
    if args.model == "tiny":
        subprocess.run([sys.executable, ROOT / "tests" / "second_model.py", work / "tiny"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        env["MIC_MODEL"] = str(work / "tiny")
    notebooks = prepare(args.notebooks, work, args.without_fix)
    print(f"{args.runs} executions of {', '.join(p.stem for p in notebooks)}, live mode, model {args.model}, "
          f"cell timeout {args.timeout} s, {'WITHOUT' if args.without_fix else 'with'} the fix", flush=True)

    stalled, failed, t_all = [], [], time.monotonic()
    for i in range(args.runs):
        nb = notebooks[i % len(notebooks)]
        out = work / f"run{i:03d}-{nb.name}"
        t0 = time.monotonic()
        r = subprocess.run([BIN / "jupyter", "nbconvert", "--to", "notebook", "--execute",
                            f"--ExecutePreprocessor.timeout={args.timeout}",
                            "--ExecutePreprocessor.record_timing=True", "--output", out.name, nb],
                           cwd=work, env=env, capture_output=True, text=True)
        took = time.monotonic() - t0
        found = stalls(json.loads(out.read_text()), args.gap) if out.exists() else []
        line = f"{i + 1:3d}/{args.runs} {nb.stem}: {took:5.0f} s"
        if r.returncode:
            failed.append(i)
            line += f"  FAILED (exit {r.returncode}): {(r.stderr.strip().splitlines() or [''])[-1][:150]}"
        if found:
            stalled.append(i)
            line += "  STALLED " + "; ".join(f"{g:.0f} s after `{src}`" for g, src in found)
        print(line, flush=True)
        if not args.keep and out.exists():
            out.unlink()

    print(f"\n{args.runs} executions in {(time.monotonic() - t_all) / 60:.1f} min "
          f"({'without' if args.without_fix else 'with'} the fix): {len(stalled)} stalled, {len(failed)} failed")
    if args.keep:
        print(f"work folder: {work}")
    else:
        subprocess.run(["rm", "-rf", str(work)])
    return 1 if stalled or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
