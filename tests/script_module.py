"""A script of the repository (scripts/<name>, a file without .py) imported as a module, so that tests can call
its functions; each is loaded once per test session."""
import functools
import importlib.machinery
import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@functools.lru_cache(maxsize=None)
def load(name: str):
    """``load("sync-editions")``: the module that ``scripts/sync-editions`` defines."""
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(SCRIPTS / name))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module
