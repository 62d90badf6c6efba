"""Every notebook runs top to bottom on a second, structurally different model.

The reader may point the chapter at their own model (``MIC_MODEL``). Structural facts must then be
handled, not assumed (a chat template, Llama's layer names, full attention in every layer, GGUF
blocks), and the chapter's empirical claims are reported, not asserted (``MIC_CLAIMS=report``).
This executes every notebook under nbval on the tiny model built by ``second_model.py``, so a
notebook that quietly assumes SmolLM2 fails here. It runs them as the book build does (``MIC_STATIC=1``:
plotly controls over precomputed values), so a course builder can build the site for another model;
``tests/test_lab_browser.py`` runs them live in JupyterLab on the same tiny model.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.md"))


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_on_a_second_architecture(source, second_model_dir, tmp_path):
    import jupytext
    nb = tmp_path / f"{source.stem}.ipynb"
    jupytext.write(jupytext.read(source), nb)
    env = dict(os.environ, MIC_MODEL=str(second_model_dir), MIC_CLAIMS="report", MIC_STATIC="1", OMP_WAIT_POLICY="PASSIVE",
               PYTHONPATH=str(ROOT / "notebooks"))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-c", str(ROOT / "pyproject.toml"),    # nbval's settings
         "--rootdir", str(tmp_path), str(nb)],
        cwd=ROOT / "notebooks", env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, f"{source.name} failed on the second model:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
