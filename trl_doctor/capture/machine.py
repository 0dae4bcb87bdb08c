"""Settings only the launch machine can honour, relaxed while a script runs to its trainer on this one.

A recipe written for a GPU cluster asks for things a laptop or a CPU runner cannot give: FlashAttention, a
`.to("cuda")`, a DeepSpeed config the TrainingArguments check at construction. Left alone, the script stops
before its trainer and the check says nothing about the job. So, while capturing, each is recorded as asked
and let through: the model is built with an attention this machine has, a move to a missing GPU leaves the
model where it is, TrainingArguments is built without the DeepSpeed plugin (its `deepspeed` value is kept for
the rules). The rules then judge what was asked against the launch machine (--target, or this machine's GPUs):
precision-and-attention (flash-attn, bitsandbytes), distributed-setup and version-skew (DeepSpeed, Liger).

Each relaxation is listed in the report under "relaxed on this machine", with what was asked.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

# attention implementations every transformers release builds on any machine
_PORTABLE_ATTENTION = ("eager", "sdpa", None)


def attention_asked(config: Any) -> str | None:
    """The attention implementation a config carries (set by `from_pretrained(attn_implementation=...)` through the
    auto class, or by the script on the config it passes)."""
    value = getattr(config, "_attn_implementation_internal", None)
    return value if isinstance(value, str) else None


def build_relaxing_attention(build: Callable[[], Any], config: Any, relaxed: dict[str, tuple[Any, str]]) -> Any:
    """`build()` the model; when it refuses the config's attention implementation on this machine (FlashAttention
    without its package or a GPU, a Hub kernel without the Hub), build it with transformers' default attention and
    note what was asked. Any other failure is the script's."""
    asked = attention_asked(config)
    try:
        return build()
    except (ImportError, ValueError, RuntimeError) as exc:
        if asked in _PORTABLE_ATTENTION or "attention" not in str(exc).lower() and "flash" not in str(exc).lower():
            raise
        config._attn_implementation_internal = None
        model = build()
        relaxed["attn_implementation"] = (asked, (
            f"{asked} cannot load on this machine ({type(exc).__name__}: {' '.join(str(exc).split())[:160]}); the "
            "model's structure was built with the default attention, and precision-and-attention judges "
            f"{asked} on the launch machine"))
        return model


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def deepspeed_installed() -> bool:
    try:
        return importlib.util.find_spec("deepspeed") is not None
    except (ImportError, ValueError):
        return False


class MachinePatches:
    """`Module.to("cuda")` / `.cuda()` on a machine without CUDA: the module stays where it is (a dtype in the same
    call still applies) and the move is noted. Installed only when this machine has no CUDA."""

    def __init__(self, relaxed: dict[str, tuple[Any, str]]):
        self.relaxed = relaxed
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> "MachinePatches":
        import torch

        module = torch.nn.Module
        original_to, original_cuda = module.to, module.cuda
        relaxed = self.relaxed

        def to(mod, *args: Any, **kwargs: Any):
            device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
            if device is None or device.type != "cuda":
                return original_to(mod, *args, **kwargs)
            _note_move(relaxed, f".to({str(device)!r})")
            return original_to(mod, dtype=dtype, non_blocking=non_blocking) if dtype is not None else mod

        def cuda(mod, device: Any = None):
            _note_move(relaxed, ".cuda()")
            return mod

        to.__wrapped__, cuda.__wrapped__ = original_to, original_cuda  # type: ignore[attr-defined]
        module.to, module.cuda = to, cuda
        self._undo.append(lambda: (setattr(module, "to", original_to), setattr(module, "cuda", original_cuda)))
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._undo:
            self._undo.pop()()


def _note_move(relaxed: dict[str, tuple[Any, str]], call: str) -> None:
    relaxed.setdefault("model placement", (call, (
        f"the script moves its model with {call}; this machine has no CUDA, so the model stayed where it was "
        "(the launch machine's GPUs are judged by gpu-capacity and precision-and-attention)")))


def relax_deepspeed(config_self: Any, relaxed: dict[str, tuple[Any, str]]) -> Any:
    """TrainingArguments builds its DeepSpeed plugin at construction and stops when the package is missing here.
    Returns the `deepspeed` value to put back after `__post_init__` (None when nothing was set aside)."""
    value = getattr(config_self, "deepspeed", None)
    if not value or deepspeed_installed():
        return None
    config_self.deepspeed = None
    relaxed["deepspeed"] = (None, (
        f"{value!r} kept aside while TrainingArguments was built: the deepspeed package is not installed here; "
        "distributed-setup and version-skew judge it on the launch machine"))
    return value
