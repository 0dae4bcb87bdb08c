"""Whether bf16 training runs on a GPU below compute capability 8.0 (T4, V100), as the installed torch and
transformers decide it, read from their source files as text (no import: `--static` asks it too).

transformers' TrainingArguments refuses bf16 on a GPU unless `is_torch_bf16_gpu_available()`; from 4.x on that is
`torch.cuda.is_bf16_supported()`. torch's answer changed: up to 2.0 it needed compute capability 8.0; from 2.1 it
falls back to creating a bfloat16 tensor on the device (`_check_bf16_tensor_supported`), which works on older GPUs,
and from 2.3 that fallback is the default of `including_emulation=True`. Where both say yes, bf16 trains, emulated
and far slower (a warning); where either refuses, the job stops with "Your setup doesn't support bf16/gpu" (a fail).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class Bf16BelowAmpere:
    runs: bool | None  # True: emulated; False: refused; None: the sources could not be read
    why: str  # the evidence, with the files and functions read


@lru_cache(maxsize=None)
def bf16_below_ampere() -> Bf16BelowAmpere:
    torch_says = _torch_emulates()
    transformers_says = _transformers_delegates()
    if torch_says is None or transformers_says is None:
        return Bf16BelowAmpere(None, "the installed torch / transformers sources could not be read")
    emulates, torch_why = torch_says
    delegates, tf_why = transformers_says
    return Bf16BelowAmpere(emulates and delegates, f"{tf_why}; {torch_why}")


def _function(text: str, name: str) -> str | None:
    """The source of the top-level function `name` in `text` (to the next top-level statement)."""
    m = re.search(rf"^def {name}\(.*?(?=^\S)", text + "\n_end_", re.S | re.M)
    return m.group(0) if m else None


def _read(package: str, rel: str) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / rel
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _torch_emulates(text: str | None = None) -> tuple[bool, str] | None:
    """(emulates, words) from torch/cuda/__init__.py's `is_bf16_supported` (`text`: that file; default: the installed)."""
    body = _function(text if text is not None else _read("torch", "cuda/__init__.py") or "", "is_bf16_supported")
    if body is None:
        return None
    header = body.split("\n", 1)[0]  # the signature line
    falls_back = "_check_bf16_tensor_supported" in body
    if "including_emulation" in header:
        default_on = re.search(r"including_emulation\s*:\s*bool\s*=\s*True|including_emulation\s*=\s*True", header)
        emulates = falls_back and default_on is not None
    else:
        emulates = falls_back
    how = ("counts an emulated bfloat16 (it creates a bfloat16 tensor on the device when the compute capability is "
           "below 8.0)" if emulates else "requires compute capability 8.0")
    return emulates, f"torch's cuda.is_bf16_supported() {how}"


def _transformers_delegates() -> tuple[bool, str] | None:
    body = _function(_read("transformers", "utils/import_utils.py") or "", "is_torch_bf16_gpu_available")
    if body is None:
        return None
    cuda = body.split("if is_torch_xpu_available", 1)[0]
    delegates = "is_bf16_supported()" in cuda and "including_emulation=False" not in cuda
    how = ("asks torch.cuda.is_bf16_supported()" if delegates else
           "checks the compute capability itself")
    return delegates, f"transformers' is_torch_bf16_gpu_available() {how}"
