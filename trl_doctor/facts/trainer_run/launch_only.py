"""What the one-step run leaves out because only the launch machine can do it.

The step proves the trainer, the data and the user's code work together; it is one process on this machine.
Kernels and engines that need the launch machine's GPUs or packages (Liger, DeepSpeed, FSDP, torch.compile on a
CPU, bitsandbytes' 8-bit optimizers and quantized loading, FlashAttention) would fail it for the wrong reason: a
laptop is not the cluster. They are switched off for the step only, each named in the step's details; whether
the launch machine can run them is judged by the static rules (version-skew for Liger, distributed-setup for
DeepSpeed and FSDP, precision-and-attention for FlashAttention and bitsandbytes).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from trl_doctor.context.env import package_version
from trl_doctor.wording import shown

_DISTRIBUTIONS = {"liger_kernel": "liger-kernel", "bitsandbytes": "bitsandbytes", "flash_attn": "flash-attn"}


def _importable(module: str) -> bool:
    """The package is installed (its distribution's metadata: a folder of that name beside the script is not it)
    and its module can be found."""
    if package_version(_DISTRIBUTIONS.get(module, module)) is None:
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def launch_only(raw: dict[str, Any], device: str) -> tuple[dict[str, Any], list[str]]:
    """(step overrides, what each one left out) for the config's keys on `device`."""
    overrides: dict[str, Any] = {}
    notes: list[str] = []
    on_cpu = device == "cpu"
    for key in ("use_liger_kernel", "use_liger_loss"):
        if raw.get(key) and (on_cpu or not _importable("liger_kernel")):
            overrides[key] = False
            notes.append(f"{key}: off (Liger's Triton kernels need a GPU and liger-kernel; version-skew judges them)")
    if raw.get("deepspeed"):
        overrides["deepspeed"] = None
        notes.append("deepspeed: off (the step is one process; distributed-setup judges the DeepSpeed setting)")
    if raw.get("fsdp"):
        overrides["fsdp"] = ""
        overrides["fsdp_config"] = None
        notes.append("fsdp: off (the step is one process; distributed-setup judges the FSDP setting)")
    if raw.get("torch_compile") and on_cpu:
        overrides["torch_compile"] = False
        notes.append("torch_compile: off on this CPU (compilation is the launch machine's)")
    workers = raw.get("dataloader_num_workers")
    if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0:
        # the step loads its few rows in its own process; what is valid only with worker processes goes along
        # (transformers refuses a prefetch factor without workers: axolotl sets 256, oumi 32)
        along = [f"{key} {shown(str(raw[key]))}" for key in ("dataloader_prefetch_factor", "dataloader_persistent_workers")
                 if raw.get(key) not in (None, False)]
        notes.append(f"dataloader_num_workers: {workers} -> 0 for the step (its rows load in its own process)"
                     + (f", and with it {' and '.join(along)} (valid only with worker processes)" if along else ""))
    optim = str(raw.get("optim") or "")
    if ("8bit" in optim or "bnb" in optim) and (on_cpu or not _importable("bitsandbytes")):
        overrides["optim"] = "adamw_torch"
        notes.append(f"optim: {shown(optim)} replaced by adamw_torch (bitsandbytes' optimizers need a GPU and the package)")
    return overrides, notes


def launch_only_model_kwargs(kwargs: dict[str, Any] | None, device: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The real model's load keywords with what this machine cannot load left out (the twin loads without any)."""
    if not kwargs:
        return kwargs, []
    out, notes = dict(kwargs), []
    attn = out.get("attn_implementation")
    if isinstance(attn, str) and "flash" in attn and (device == "cpu" or not _importable("flash_attn")):
        out["attn_implementation"] = "sdpa"
        notes.append(f"attn_implementation: {shown(attn)} replaced by sdpa for the step (precision-and-attention judges it)")
    quantized = out.get("quantization_config") or out.get("load_in_4bit") or out.get("load_in_8bit")
    if quantized and (device == "cpu" or not _importable("bitsandbytes")):
        for key in ("quantization_config", "load_in_4bit", "load_in_8bit"):
            out.pop(key, None)
        notes.append("quantization: the step loads the model unquantized (bitsandbytes needs a GPU and the package; "
                     "precision-and-attention judges it)")
    if device == "cpu" and out.get("device_map") not in (None, "cpu"):
        out.pop("device_map")
    return out, notes
