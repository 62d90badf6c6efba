#!/usr/bin/env python
"""Execute every notebook once and print a table of its wall time and the kernel's peak memory.

    make bench                      # all notebooks, one after another, as the book build runs them
    .venv/bin/python scripts/bench.py notebooks/03-cache-size.md [more.md ...]

The budget the chapter holds itself to (issue 8): every notebook <= 90 s on 2 cores, the whole
chapter <= 8 min, and a peak of at most 4 GB per notebook, half of an 8 GB laptop (issue 25: a notebook
pointed at a larger model must not need several times what that model needs). Peak memory is the kernel
process's high-water mark of resident memory (VmHWM), which includes Python, torch and the model: what a
student's laptop must actually hold. A notebook over either budget is marked in the table, and named again at
the end.
Executes in static mode (MIC_STATIC=1), exactly as the book build does; pass --live for the
JupyterLab code path.

A student's laptop is rarely quiet (issue 39). ``--busy 2`` runs two CPU-bound processes beside the notebooks,
as a browser and a video call would, and ``--nbconvert`` executes each notebook with plain ``jupyter nbconvert
--execute`` (the kernel spec's environment, mic_tools.kernel, is all that keeps it fast), so:

    make bench BENCH="--nbconvert --busy 2 notebooks/02-prefill-decode.md notebooks/04-batching.md"

gives the times under load; the same without ``--busy`` gives the quiet ones to divide by.

``--record FILE`` also writes the run as JSON: its date, the machine (processor, cores, memory), each notebook's
wall time, the CPU seconds its kernel used and its peak memory, and the disk the model takes. The site's page for
teachers (book/teaching.md, issue 40) reads its table of what a JupyterHub class needs per student from
``book/_data/bench.json``, a run recorded this way:

    make bench BENCH="--record book/_data/bench.json" Runs on a quiet machine give the numbers worth quoting; the table says, for each
notebook, what share of the CPU time the host of a virtual machine took away (steal), so a slow hour shows.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
BUDGET_NOTEBOOK_S, BUDGET_CHAPTER_S = 90, 8 * 60
BUDGET_PEAK_MIB = 4 * 10 ** 9 / 2 ** 20          # 4 GB (decimal, as a laptop's memory is sold) = 3,815 MiB


def flags(r: dict) -> str:
    """What the table's note column says of one notebook's run: a failure, and each budget it went over."""
    notes = [f"FAILED {r['error']}"] if r["error"] else []
    if r["seconds"] > BUDGET_NOTEBOOK_S:
        notes.append(f"over {BUDGET_NOTEBOOK_S} s")
    if r["peak"] > BUDGET_PEAK_MIB:                  # nan (no reading) compares False: no mark without a number
        notes.append(f"**MEMORY over 4 GB** ({r['peak']:,.0f} MiB)")
    return "; ".join(notes)


def over_memory(rows: list[dict]) -> str:
    """The line after the table naming every notebook whose peak passed 4 GB, or '' when none did."""
    over = [f"{r['name']} ({r['peak']:,.0f} MiB)" for r in rows if r["peak"] > BUDGET_PEAK_MIB]
    return (f"MEMORY: {len(over)} notebook{'s' if len(over) > 1 else ''} peaked over 4 GB "
            f"({BUDGET_PEAK_MIB:,.0f} MiB): {', '.join(over)}." if over else "")


def kernel_peak_mib(client) -> float:
    """The kernel process's peak resident memory (VmHWM), in MiB, or nan when it cannot be read."""
    try:
        pid = client.km.provisioner.process.pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except Exception:
        pass
    return float("nan")


def kernel_cpu_seconds(client) -> float:
    """The CPU seconds (user and system, all threads, and any children) the kernel process has used, or nan."""
    try:
        t = psutil.Process(client.km.provisioner.process.pid).cpu_times()
        return t.user + t.system + t.children_user + t.children_system
    except Exception:
        return float("nan")


def machine() -> dict:
    """What ran the benchmark: processor, cores, memory, Python and torch, for a recorded run's reader."""
    import platform

    import torch
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    return dict(processor=cpu, cores=os.cpu_count(), memory_gib=round(psutil.virtual_memory().total / 2 ** 30, 1),
                system=f"{platform.system()} {platform.machine()}", python=platform.python_version(),
                torch=torch.__version__)


def model_disk_mib() -> dict:
    """The disk the default model takes: the embedded GGUF (the package) and its dequantized copy in the cache, in
    MiB (that copy only: the cache may hold other models too)."""
    from helpers.infra.model import cached_copy, embedded_gguf_path
    gguf = embedded_gguf_path().stat().st_size
    copy = cached_copy(embedded_gguf_path())
    cache = sum(f.stat().st_size for f in copy.rglob("*") if f.is_file()) if copy.exists() else 0
    return dict(gguf=round(gguf / 2 ** 20, 1), cache=round(cache / 2 ** 20, 1))


def record(path: Path, rows: list[dict], mode: str, busy: int) -> None:
    """Write a run as JSON (see the module's docstring): what book/teaching.md's table is generated from."""
    import datetime
    import json

    from helpers.infra.model import EMBEDDED_NAME, is_default_model, model_setting
    def number(x, digits):                  # a reading that failed (nan) is recorded as null, not as a number
        return None if math.isnan(x) else round(x, digits)
    notebooks = [dict(name=r["name"], seconds=number(r["seconds"], 1), cpu_seconds=number(r["cpu"], 1),
                      peak_mib=number(r["peak"], None), error=r["error"]) for r in rows]
    run = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), machine=machine(),
               load_average_after=round(os.getloadavg()[0], 2),      # other work on the machine inflates wall time
               model=EMBEDDED_NAME if is_default_model() else model_setting(), mode=mode, busy=busy,
               model_disk_mib=model_disk_mib(), notebooks=notebooks)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n", encoding="utf8")


def cpu_ticks() -> tuple[float, float]:
    """(stolen, all) CPU seconds since boot, summed over cores (psutil reads /proc/stat).

    Steal is time a virtual machine's cores were runnable but the host ran someone else: on a shared
    machine it is the usual reason the same notebook takes 40 s one hour and 60 s the next. Where the
    platform keeps no steal count (psutil then has no such field), it counts as none."""
    t = psutil.cpu_times()
    return getattr(t, "steal", 0.0), sum(t)


def stolen_percent(before, after) -> float:
    """The share of all CPU time between two :func:`cpu_ticks` readings that the host took away, in per cent."""
    if after[1] <= before[1]:
        return float("nan")
    return 100 * (after[0] - before[0]) / (after[1] - before[1])


def machine_speed() -> str:
    """How fast this machine is right now: an fp32 matmul of a prefill's shape and a streaming read.

    Shared machines drift (the same notebook has taken 40 s and 58 s an hour apart here); printing these
    beside the table says which kind of hour the times come from."""
    import torch

    from helpers.infra.measure import time_it
    from helpers.s02_roofline import gb_per_s, gflop_per_s
    x, w, big = torch.randn(2048, 576), torch.randn(1536, 576), torch.randn(64 * 2 ** 20)
    gflops = gflop_per_s(2 * x.shape[0] * x.shape[1] * w.shape[0], time_it(lambda: x @ w.T, repeats=20).median)
    gbs = gb_per_s(big.numel() * 4, time_it(big.sum, repeats=10).median)
    return f"fp32 matmul {gflops:.0f} GFLOP/s, memory read {gbs:.1f} GB/s"


def run(path: Path, timeout: int) -> dict:
    """Execute one notebook; its wall time, start-up, slowest code cell, the kernel's peak memory and any error.

    Start-up is the kernel starting plus the first code cell (the imports and ``load_model``): a cost every
    notebook pays before it measures anything."""
    import jupytext
    from nbclient import NotebookClient

    from mic_tools.notebook_client import wake_up_lost_messages
    wake_up_lost_messages()

    nb = jupytext.read(path)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    out = dict(seconds=float("nan"), start=float("nan"), slowest=(0.0, ""), peak=float("nan"), error="",
               cpu=float("nan"))
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    ticks = cpu_ticks()
    t0 = time.perf_counter()
    with client.setup_kernel():
        try:
            for i, cell in enumerate(nb.cells):
                t = time.perf_counter()
                client.execute_cell(cell, i)
                took = time.perf_counter() - t
                if i == code[0]:                        # the imports and load_model
                    out["start"] = time.perf_counter() - t0
                elif i in code and took > out["slowest"][0]:
                    first = next((l for l in cell.source.splitlines() if l.strip() and not l.startswith("#")), "")
                    out["slowest"] = (took, first.strip()[:48])
        except Exception as e:        # report and go on to the next notebook
            out["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:100] if str(e).strip() else ''}"
        out["peak"] = kernel_peak_mib(client)
        out["cpu"] = kernel_cpu_seconds(client)
    out["seconds"] = time.perf_counter() - t0
    out["stolen"] = stolen_percent(ticks, cpu_ticks())
    return out


def run_nbconvert(path: Path, timeout: int) -> dict:
    """Execute one notebook with plain ``jupyter nbconvert --execute``, as a student might; its wall time."""
    import subprocess
    import tempfile

    import jupytext
    out = dict(seconds=float("nan"), start=float("nan"), slowest=(0.0, ""), peak=float("nan"), error="",
               cpu=float("nan"))
    ticks = cpu_ticks()
    with tempfile.TemporaryDirectory() as tmp:
        ipynb = Path(tmp) / (path.stem + ".ipynb")
        jupytext.write(jupytext.read(path), ipynb)
        t0 = time.perf_counter()
        run = subprocess.run([str(Path(sys.executable).with_name("jupyter")), "nbconvert", "--to", "notebook",
                              "--execute", f"--ExecutePreprocessor.timeout={timeout}", "--output-dir", tmp,
                              "--output", "done", str(ipynb)], cwd=path.parent, capture_output=True, text=True)
        out["seconds"] = time.perf_counter() - t0
    if run.returncode:
        out["error"] = (run.stderr.strip().splitlines() or ["nbconvert failed"])[-1][:100]
    out["stolen"] = stolen_percent(ticks, cpu_ticks())
    return out


def busy_processes(n: int) -> list:
    """``n`` processes that keep a core busy each (a student's browser, a video call) until stopped."""
    import subprocess
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--live", action="store_true", help="execute the live (JupyterLab) code path instead of the static one")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell before giving up (default 300)")
    ap.add_argument("--nbconvert", action="store_true", help="execute with plain jupyter nbconvert --execute")
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run beside the notebooks")
    ap.add_argument("--record", type=Path, help="also write the run as JSON to this file (e.g. book/_data/bench.json)")
    args = ap.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9]*.md"))
    os.environ["MIC_STATIC"] = "0" if args.live else "1"
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {'live' if args.live else 'static'} mode; "
          f"{machine_speed()}", flush=True)
    rows, total, failed = [], 0.0, False
    busy = busy_processes(args.busy)
    if busy:
        print(f"{len(busy)} busy processes beside the notebooks", flush=True)
    ticks = cpu_ticks()
    try:
        for p in paths:
            r = run_nbconvert(p, args.timeout) if args.nbconvert else run(p, args.timeout)
            total += r["seconds"]
            failed |= bool(r["error"])
            r["name"] = p.stem
            r["flag"] = flags(r)
            rows.append(r)
            print(f"  {p.stem:<28} {r['seconds']:7.1f} s (start-up {r['start']:4.1f} s, slowest cell "
                  f"{r['slowest'][0]:5.1f} s) {r['peak']:8.0f} MiB  {r['cpu']:6.1f} CPU s  {r['stolen']:4.1f} % stolen  {r['flag']}",
                  flush=True)
    finally:
        for b in busy:
            b.kill()
    print("\n| notebook | seconds | start-up: kernel, imports, model (s) | slowest code cell (s) | peak memory (MiB) "
          "| kernel CPU (s) | CPU stolen by the host | note |\n|---|---:|---:|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['name']} | {r['seconds']:.1f} | {r['start']:.1f} | {r['slowest'][0]:.1f}: `{r['slowest'][1]}` | "
              f"{r['peak']:.0f} | {r['cpu']:.1f} | {r['stolen']:.1f} % | {r['flag']} |")
    over = " (over the 8 min budget)" if total > BUDGET_CHAPTER_S else ""
    start = sum(r["start"] for r in rows)
    print(f"| **whole chapter** | **{total:.1f}** | {start:.1f} | | {max(r['peak'] for r in rows):.0f} (largest) "
          f"| {sum(r['cpu'] for r in rows):.1f} | {stolen_percent(ticks, cpu_ticks()):.1f} % | {over} |")
    if over_memory(rows):
        print(over_memory(rows))
    print(f"load average after: {os.getloadavg()[0]:.2f}; {machine_speed()}")
    if args.record:
        record(args.record, rows, "live" if args.live else "static", args.busy)
        print(f"recorded in {args.record}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
