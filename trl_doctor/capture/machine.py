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

import re
from typing import Any, Callable

from trl_doctor.context.env import package_version
from trl_doctor.wording import shown

# attention implementations that only the launch machine may be able to build: FlashAttention (its package, a GPU
# of the right compute capability), a Hub kernel ("kernels-community/flash-attn", with the `kernels` package and
# the Hub). Anything else a model refuses (a typo, a class without FlashAttention support) is refused at the
# launch too: it is not relaxed, the script stops where it would.
_LAUNCH_ONLY_ATTENTION = re.compile(r"(paged\|)?(flash_attention_\d|[\w.-]+/[\w.-]+(:[\w.-]+)?)")
# what transformers says when the package or hardware is missing (not when the value or the class is wrong)
_MISSING_HERE = re.compile(r"installed|not available|no module|cannot import|cuda|gpu|compute capability|hub|kernels",
                           re.I)
# a model class without the implementation ("X does not support Flash Attention 2 yet"): refused everywhere
_NOT_SUPPORTED = re.compile(r"does not support|doesn't support|not supported", re.I)


def attention_asked(config: Any) -> str | None:
    """The attention implementation a config carries (set by `from_pretrained(attn_implementation=...)` through the
    auto class, or by the script on the config it passes)."""
    value = getattr(config, "_attn_implementation_internal", None)
    return value if isinstance(value, str) else None



def set_attention(config: Any, value: str | None) -> None:
    """Set a config's attention implementation as transformers' own setter does: on the config and its sub-configs
    (a vision-language model's text and vision configs carry the value too). None is transformers' default."""
    prop = getattr(type(config), "_attn_implementation", None)
    if isinstance(prop, property) and prop.fset is not None:
        config._attn_implementation = value
        return
    config._attn_implementation_internal = value
    for key in getattr(config, "sub_configs", None) or ():
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "_attn_implementation_internal"):
            set_attention(sub, value)


def relaxable_attention(asked: str | None, exc: BaseException) -> bool:
    """Whether `exc`, raised while building a model with the attention `asked`, is this machine's lack (FlashAttention
    without its package or a GPU, a Hub kernel without the Hub) rather than a value or class the launch refuses too."""
    if not isinstance(asked, str) or not _LAUNCH_ONLY_ATTENTION.fullmatch(asked):
        return False
    text = " ".join(str(exc).split())
    return bool(_MISSING_HERE.search(text)) and not _NOT_SUPPORTED.search(text)


def build_relaxing_attention(build: Callable[[], Any], config: Any, relaxed: dict[str, tuple[Any, str]]) -> Any:
    """`build()` the model; when it refuses the config's attention implementation because this machine lacks what
    it needs (see `relaxable_attention`), build it with transformers' default attention and note what was asked.
    Any other failure is the script's."""
    asked = attention_asked(config)
    try:
        return build()
    except (ImportError, ValueError, RuntimeError) as exc:
        if not relaxable_attention(asked, exc):
            raise
        set_attention(config, None)
        model = build()
        relaxed["attn_implementation"] = (asked, (
            f"{shown(asked)} cannot load on this machine ({type(exc).__name__}: {shown(' '.join(str(exc).split()), 160)});"
            " the model's structure was built with the default attention, and precision-and-attention judges "
            "FlashAttention on the launch machine"))
        return model


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _on_meta(mod: Any) -> bool:
    """Whether a module's weights are meta tensors (the capture's structure-only models): no move can copy them."""
    tensor = next(mod.parameters(), None)
    if tensor is None:
        tensor = next(mod.buffers(), None)
    return tensor is not None and tensor.is_meta


def _parse_move(torch: Any, args: tuple, kwargs: dict) -> tuple[Any, Any, bool]:
    """(device, dtype, non_blocking) of a `.to(...)` call. A device index where this torch has no accelerator
    (`.to(0)`, `.to(local_rank)`) cannot be parsed here: it names the launch machine's GPU."""
    try:
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        return device, dtype, bool(non_blocking)
    except (RuntimeError, TypeError, ValueError):
        dtype = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.dtype)), None)
        return torch.device("cuda"), dtype, bool(kwargs.get("non_blocking", False))


class MachinePatches:
    """Moves of the capture's models. A structure-only (meta) model stays on meta whatever the move asks, on every
    machine (a dtype in the same call still applies). On a machine without CUDA, `.to("cuda")` / `.cuda()` of a
    loaded model leaves it where it is, and the move is noted."""

    def __init__(self, relaxed: dict[str, tuple[Any, str]], has_cuda: bool = False):
        self.relaxed = relaxed
        self.has_cuda = has_cuda
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> "MachinePatches":
        import torch

        module = torch.nn.Module
        original_to, original_cuda = module.to, module.cuda
        relaxed, has_cuda = self.relaxed, self.has_cuda

        def to(mod, *args: Any, **kwargs: Any):
            device, dtype, non_blocking = _parse_move(torch, args, kwargs)
            to_missing_gpu = device is not None and device.type == "cuda" and not has_cuda
            if not _on_meta(mod) and not to_missing_gpu:
                return original_to(mod, *args, **kwargs)
            if to_missing_gpu:
                _note_move(relaxed, f".to({shown(str(device))})")
            return original_to(mod, dtype=dtype, non_blocking=non_blocking) if dtype is not None else mod

        def cuda(mod, device: Any = None):
            if has_cuda and not _on_meta(mod):
                return original_cuda(mod, device)
            if not has_cuda:
                _note_move(relaxed, ".cuda()")
            return mod

        to.__wrapped__, cuda.__wrapped__ = original_to, original_cuda  # type: ignore[attr-defined]
        module.to, module.cuda = to, cuda  # patching torch's Module
        self._undo.append(lambda: setattr(module, "to", original_to))
        self._undo.append(lambda: setattr(module, "cuda", original_cuda))
        if not has_cuda:  # a rank picking its GPU (`torch.cuda.set_device(LOCAL_RANK)`, before its process group)
            original_set_device = torch.cuda.set_device

            def set_device(device: Any) -> None:
                relaxed.setdefault("torch.cuda.set_device", (shown(str(device)), (
                    f"the script selects GPU {shown(str(device))} for its rank; this machine has no CUDA, so nothing "
                    "was selected (the launch machine's GPUs are judged by gpu-capacity and distributed-setup)")))

            set_device.__wrapped__ = original_set_device  # type: ignore[attr-defined]
            torch.cuda.set_device = set_device
            self._undo.append(lambda: setattr(torch.cuda, "set_device", original_set_device))
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
    # installed = its distribution's metadata, as the rules read it (a deepspeed/ folder of JSON configs beside the
    # script is importable as a namespace, but it is not the package)
    if not value or package_version("deepspeed") is not None:
        return None
    config_self.deepspeed = None
    relaxed["deepspeed"] = (None, (
        f"{shown(value)} kept aside while TrainingArguments was built: the deepspeed package is not installed here; "
        "distributed-setup judges it (its file, ZeRO stage and the package) on the launch machine"))
    return value


# what TrainingArguments.report_to means when it names no tracker
_NO_TRACKER = {"none", "None", "", None}


def relax_trackers(config_self: Any, relaxed: dict[str, tuple[Any, str]]) -> list[str] | None:
    """Trackers are the launch machine's business: a `report_to` naming one (wandb, tensorboard, mlflow...) would make
    any Trainer built here start it, or refuse where it is not installed ("WandbCallback requires wandb to be
    installed"). After TrainingArguments has read it, it is turned off in what the trainer is given, and listed.
    The trackers asked for, for run-phases to judge as the job would start them (None when none)."""
    asked = getattr(config_self, "report_to", None)
    names = [asked] if isinstance(asked, str) else list(asked or [])
    trackers = [n for n in names if n not in _NO_TRACKER]
    if not trackers:
        return None
    config_self.report_to = []
    missing = [n for n in trackers if package_version(_TRACKER_PACKAGES.get(n, n)) is None]
    here = f" ({', '.join(missing)} not installed here)" if missing else ""
    relaxed["report_to"] = ("none", f"{', '.join(trackers)} turned off in what the trainer is given: trackers are the "
                                    f"launch machine's{here}; nothing is logged from the check")
    return trackers


# report_to names whose package is named otherwise
_TRACKER_PACKAGES = {"tensorboard": "tensorboard", "comet_ml": "comet-ml", "azure_ml": "azureml-core",
                     "dvclive": "dvclive", "trackio": "trackio", "swanlab": "swanlab", "clearml": "clearml"}
