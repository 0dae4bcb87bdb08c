"""Whether the job's checkpoints keep the whole PEFT adapter under FSDP2 (issue 60).

accelerate 1.7 to 1.14 save an FSDP2 model's adapter with `FULL_STATE_DICT` through peft's own state dict, which reads
each rank's local shard of every LoRA tensor (a DTensor) and gathers nothing: rank 0 writes its slice alone, and a
resume restores nothing on the other ranks, so (N-1)/N of the adapter goes back to its initial values (lora_B to zero).
transformers' Trainer always saves this way (get_fsdp_ckpt_kwargs passes adapter_only=True). accelerate 1.15.0 gathers
the full tensors (huggingface/accelerate#4206, `_get_model_state_dict`'s full_state_dict branch); a
SHARDED_STATE_DICT checkpoint keeps every rank's shard. tests/test_fsdp2_adapter.py runs accelerate's own function
on two CPU processes under both releases."""

from __future__ import annotations

from dataclasses import dataclass

FIXED_IN = "1.15.0"


@dataclass(frozen=True)
class AdapterShards:
    """The finding: the words and the smallest change."""

    message: str
    fix: str


def adapter_save_loses_shards(ctx) -> AdapterShards | None:
    """The finding when FSDP2 with FULL_STATE_DICT saves a PEFT adapter from more than one process on an accelerate
    before 1.15.0 installed in the launch's environment; None otherwise (or where that environment is not this one)."""
    from importlib.metadata import PackageNotFoundError, version

    from trl_doctor.facts.launch.launcher import launch
    from trl_doctor.facts.launch.settings import settings
    from trl_doctor.facts.trl.versions import version_in

    lau = launch(ctx)
    acc = lau.accelerate
    fsdp = acc.fsdp if acc is not None else None
    if acc is None or fsdp is None or fsdp.version != 2 or (fsdp.state_dict_type or "").upper() != "FULL_STATE_DICT":
        return None
    live = getattr(ctx, "live", None)
    if not (settings(ctx).use_peft or getattr(live, "peft_config_given", False)):
        return None
    if lau.processes < 2 or not lau.software_here:
        return None
    try:
        installed = version("accelerate")
    except PackageNotFoundError:
        return None
    if not version_in(installed, f"<{FIXED_IN}"):
        return None
    n = lau.processes
    return AdapterShards(
        f"every checkpoint will keep only rank 0's slice of each LoRA tensor: accelerate {installed} saves an FSDP2 "
        f"model's adapter with FULL_STATE_DICT ({acc.named_by}) without gathering its {n} shards "
        f"(huggingface/accelerate#4206, fixed in {FIXED_IN}), so a resume puts {n - 1}/{n} of the adapter back to its "
        "initial values (lora_B to zero) and the saved adapter is not the one trained",
        f"upgrade accelerate to >= {FIXED_IN}, or set fsdp_state_dict_type: SHARDED_STATE_DICT in the accelerate config")

