import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))   # so the fixtures can import tests/second_model.py


TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256)


def tiny_llama_config(**overrides):
    """The tiny Llama's configuration, with any field changed: ``tiny_llama_config(num_hidden_layers=1)``.

    Fields that follow from others (``head_dim`` from the width and the heads) follow them unless given.
    """
    from transformers import LlamaConfig
    fields = {**TINY, **overrides}
    if "head_dim" not in overrides and ("hidden_size" in overrides or "num_attention_heads" in overrides):
        fields["head_dim"] = fields["hidden_size"] // fields["num_attention_heads"]
    return LlamaConfig(**fields)


def make_tiny_llama(seed: int = 0, **overrides):
    """A Llama with random weights (seeded), small enough to build in milliseconds: the one factory every test
    uses for a model of the real model's family. ``overrides`` change its configuration."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_llama_config(**overrides)).eval()


@pytest.fixture(scope="session")
def tiny_llama():
    """A 2-layer Llama with random weights: same code paths as the real model, built in milliseconds."""
    return make_tiny_llama()


@pytest.fixture(scope="session")
def second_model_dir(tmp_path_factory):
    """A tiny random Gemma-3-style model folder (no chat template, sliding-window layers, one KV head)."""
    from second_model import build
    return build(tmp_path_factory.mktemp("second-model"))


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium through Playwright (never a browser Playwright downloads itself)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is missing: run scripts/install-system-deps (apt-get install chromium).")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])   # launch() always uses a fresh, empty profile
        yield b
        b.close()


# make test runs two workers, one test file at a time each (--dist loadfile). xdist hands out the files with the most
# tests first, so a file of few, long tests started last and ran alone while the other worker sat idle (the
# accessibility audit: 8 tests, about 3 minutes). The slowest files are collected first instead, and make test keeps
# that order (--no-loadscope-reorder): the longest first, the short ones fill in at the end. Their order is what
# tests took in a CI rehearsal on 2 cores (seconds, one file's tests together).
SLOWEST_FIRST = ("test_lab_browser.py",            # ~600: every notebook in JupyterLab, the instructor view
                 "test_book_browser.py",           # ~350: 30 chapter pages in Chromium
                 "test_edition_site_browser.py",   # ~280
                 "test_grading.py",                # ~200: nbgrader end to end
                 "test_accessibility.py",          # ~200: axe-core on every page of three sites
                 "test_second_model.py",           # ~155
                 "test_pdf.py",                    # ~130: the three PDFs printed
                 "test_solutions_hidden.py", "test_edition_outputs.py", "test_editions.py", "test_speculative.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))      # stable: each file's tests keep their order
