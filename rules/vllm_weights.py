"""TD020 vllm-weights: the policy's weights reach vLLM, which has a device and implementation for them.

What it does
    Without weights: the quantization and launch against what the installed TRL's weight sync does
    (PEFT merge and renames, a bitsandbytes engine, 8-bit, the ZeRO-3 gather; file:line quoted),
    `vllm_device` (TRL 0.14-0.15), the installed vLLM's model registry.

Why is this bad?
    TRL pushes the weights into vLLM by name after every step; these break only once the job runs:
    - bitsandbytes 4-bit or int8 tensors into bf16: `assert param_data.shape == loaded_weight.shape`
      (trl#3654, trl#4973); colocate with `quantization="bitsandbytes"` re-rounds the merged LoRA
      each sync (trl#3466: "Merge lora module to 4-bit linear may get different generations due to
      rounding errors") and refuses 8-bit ("vLLM does not support in-flight 8-bit quantization");
    - LoRA under a sync that does not merge, rename and filter the adapter (trl 0.14, trl#2698):
      base weights, or unknown names;
    - ZeRO-3 with `ds3_gather_for_generation: false` where the sync obeys it (trl 0.15-0.18):
      "Attempted to load weight (torch.Size([0])) into parameter";
    - TRL 0.14-0.15's `vllm_device` "auto" is `cuda:<num_processes>`: "The requested device for vllm
      (cuda:N) is not available" (open-r1#260, trl#2852);
    - a local `trl vllm-serve` on a training GPU: the sync hangs (trl#3157, open-r1#478);
    - an architecture the installed vLLM lacks: no engine, or its Transformers backend (trl#5269).

Example
    use_vllm: true                      # trl 0.15, one training process per GPU (4 GPUs)
    -> fail: vllm_device 'auto' = cuda:4 (...) does not exist: 4 GPUs visible, so TRL stops ...

Fix safety
    Manual: an unquantized policy (bf16 + LoRA) or `use_vllm: false`; a TRL whose sync handles PEFT;
    `ds3_gather_for_generation: true` (or ZeRO-2); `--num_processes <GPUs - 1>`; the server on its
    own GPU.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from trl_doctor import Finding, fail, manual, passed, rule, skip, warn
from trl_doctor.facts.launch.launcher import launch
from trl_doctor.facts.launch.settings import LOCAL_HOSTS, config_value, settings, vllm_placement
from trl_doctor.facts.vllm.server import server_target
from trl_doctor.facts.trl.installed import trainer_mentions
from trl_doctor.facts.vllm.support import installed_sync, quantization, supported_architectures

NO_VLLM = "`use_vllm: false` (the trainer generates itself)"


@rule(
    id="TD020",
    slug="vllm-weights",
    title="The policy's weights can be pushed into vLLM, and vLLM has a GPU and an implementation for them",
    trainers=("grpo", "rloo"),
    fixable="never",
    static_skip="it loads the model's weights",
)
def check(ctx):
    s = settings(ctx)
    if "use_vllm" not in s.fields and s.config_class:
        yield skip(f"the installed TRL's {s.config_class} has no use_vllm: this trainer never generates with vLLM")
        return
    if not config_value(ctx, "use_vllm", False):
        yield skip("use_vllm is off: generation runs in the trainer, no weights are pushed into vLLM")
        return
    mode, why = vllm_placement(ctx)
    if mode and "vllm_mode" not in s.fields and "vllm_device" in s.fields:
        mode, why = "device", f"vllm_device (this TRL has no vllm_mode: `vllm_mode: {mode}` is not read)"
    sync = installed_sync(ctx.trainer)
    details: dict[str, Any] = {"vLLM mode": f"{mode} ({why})", "trl": ctx.version("trl")}
    if sync is not None:
        details["weight sync read from"] = ", ".join(sync.files)
        if sync.push:
            details["weights pushed at"] = sync.push
    findings = []
    for part in (_quantized, _peft, _zero3_gather, _legacy_device, _server_overlap, _architecture):
        found, finding = part(ctx, s, mode, sync)
        details.update(found)
        if finding is not None:  # it carries the details known so far
            findings.append(replace(finding, details=dict(details)))
    if findings:
        yield from findings
        return
    arch = details.get("vLLM architectures", "")
    yield passed("the policy's weights can be pushed into vLLM as the installed TRL syncs them "
                 f"({mode or 'vLLM'} mode)" + ("; the architecture is not judged (vllm is not installed here)"
                                               if arch.startswith("not judged") else ""), **details)


# -- G7 / G5: quantized policy --------------------------------------------------------------------------------

def _quantized(ctx, s, mode, sync) -> tuple[dict[str, Any], Finding | None]:
    details: dict[str, Any] = {}
    q = quantization(ctx.config.raw, s.model_init_kwargs, ctx.config.model.path)
    if q.kind is None:
        return details, None
    details["quantization"] = q.source
    unquantized = f"load the policy unquantized (remove {q.source}; bf16 + LoRA) or set {NO_VLLM}"
    fix = manual(unquantized)
    if q.kind == "8bit":
        if mode == "colocate" and sync is not None and sync.refuses_8bit:
            details["TRL refuses 8-bit"] = sync.refuses_8bit
            return details, fail(
                f"{q.source} with vLLM colocate: the installed TRL stops when it starts the engine ('vLLM does "
                f"not support in-flight 8-bit quantization'); {unquantized}, or use 4-bit", fix)
        return details, fail(
            f"{q.source} with vLLM ({mode or 'server'} mode): each sync pushes the policy's int8 "
            "weights into an engine holding bf16 ones (vLLM generates from garbage, or its weight loader "
            f"stops on the dtype/shape); {unquantized}", fix)
    if mode == "colocate" and sync is not None and sync.quantizes_4bit_engine:
        details["colocated engine quantized"] = sync.quantizes_4bit_engine
        return details, warn(
            f"{q.source} with vLLM colocate: the installed TRL starts vLLM with bitsandbytes 4-bit, so the "
            "push fits, but the merged LoRA is re-rounded to 4 bits at every sync and vLLM samples from a "
            "slightly different policy than the one trained (trl#3466); train a bf16 base with LoRA for "
            "exact rollouts, or accept the drift", fix)
    where = {"server": "the `trl vllm-serve` engine loads the bf16 checkpoint",
             "colocate": "the installed TRL starts the colocated engine unquantized (no bitsandbytes quantization)",
             "device": "TRL starts vLLM on its own GPU from the bf16 checkpoint"}.get(mode or "", "vLLM loads the bf16 checkpoint")
    return details, fail(
        f"{q.source} with vLLM ({mode or 'server'} mode): {where}, and each sync pushes packed 4-bit tensors "
        "(uint8, half the elements) into it: vLLM's weight loader stops with 'assert param_data.shape == "
        f"loaded_weight.shape' at the first sync (trl#3654, trl#4973); {unquantized}", fix)


# -- G6: LoRA names -------------------------------------------------------------------------------------------

def _peft(ctx, s, mode, sync) -> tuple[dict[str, Any], Finding | None]:
    details: dict[str, Any] = {}
    if not config_value(ctx, "use_peft", False) or sync is None or sync.push is None:
        return details, None
    saved = config_value(ctx, "lora_modules_to_save", None) or []
    if isinstance(saved, str):
        saved = [saved]
    elif not isinstance(saved, (list, tuple)):
        saved = [saved]
    saved = [str(x) for x in saved]
    upgrade = manual(f"upgrade TRL (its sync merges LoRA and renames the parameters from 0.15), or set {NO_VLLM}")
    missing = [what for what, ev in (("merge the adapter (merge_adapter)", sync.merges_peft),
                                     ("strip `base_model.model.`/`.base_layer` from the names", sync.strips_base_layer),
                                     ("leave the LoRA tensors out", sync.drops_adapter)) if ev is None]
    if missing:
        return details, fail(
            f"use_peft with vLLM: the installed TRL's weight sync ({sync.push.split(': ')[0]}) does not "
            f"{', '.join(missing)}: vLLM gets names it has no parameter for and keeps generating with the "
            "base weights, or stops on them (trl#2698); upgrade TRL (0.15+) or set " + NO_VLLM,
            upgrade)
    details["PEFT sync"] = f"{sync.merges_peft}; {sync.strips_base_layer}"
    if saved:
        details["lora_modules_to_save"] = list(saved)
        if sync.strips_modules_to_save is None or sync.drops_original_module is None:
            return details, fail(
                f"lora_modules_to_save {list(saved)} with vLLM: the installed TRL's weight sync does not map "
                "`modules_to_save.default.` back to the base names (nor drop `original_module`), so the trained "
                f"copies of {', '.join(saved)} never reach vLLM; upgrade TRL, or leave them out of "
                "lora_modules_to_save", upgrade)
        details["modules_to_save sync"] = sync.strips_modules_to_save
    return details, None


# -- G5: ZeRO-3 without gathering ---------------------------------------------------------------------------

def _zero3_gather(ctx, s, mode, sync) -> tuple[dict[str, Any], Finding | None]:
    details: dict[str, Any] = {}
    if config_value(ctx, "ds3_gather_for_generation", True) is not False:
        return details, None
    acc = launch(ctx).accelerate
    stage = acc.deepspeed.zero_stage if acc is not None and acc.deepspeed is not None else None
    if str(stage) != "3":
        return details, None
    details["DeepSpeed"] = f"ZeRO-{stage} ({acc.named_by})"
    if sync is not None and sync.ds3_gather_flag:
        details["gather follows the flag"] = sync.ds3_gather_flag
        return details, fail(
            "ds3_gather_for_generation: false under DeepSpeed ZeRO-3 with vLLM: the installed TRL gathers the "
            "parameters for the sync only when that flag is on, so each process pushes its empty shard "
            "('Attempted to load weight (torch.Size([0])) into parameter'); set `ds3_gather_for_generation: "
            "true` (or use ZeRO-2)", manual("set `ds3_gather_for_generation: true`"))
    return details, None


# -- G3: TRL 0.14-0.15's vLLM GPU -----------------------------------------------------------------------------

def _legacy_device(ctx, s, mode, sync) -> tuple[dict[str, Any], Finding | None]:
    details: dict[str, Any] = {}
    if mode != "device" or "vllm_device" not in s.fields:
        return details, None
    value = config_value(ctx, "vllm_device", "auto")
    where = launch(ctx)
    if not where.gpus:
        return details, None  # no GPU known here: TD008 reports it; the device cannot be judged
    n, procs = len(where.gpus), where.processes
    details["vllm_device"] = value
    details["training processes"] = f"{procs} ({where.processes_from})"
    details["visible GPUs"] = n
    if value == "auto":
        shares_one = n == 1 and trainer_mentions(ctx.trainer, "device_count() == 1")
        index = 0 if shares_one else procs
        said = f"vllm_device 'auto' = cuda:{index} (the GPU after the {procs} training process{'es' if procs != 1 else ''})"
        if shares_one:
            return details, None
    else:
        m = re.fullmatch(r"cuda:(\d+)", str(value).strip())
        if m is None:
            return details, None
        index, said = int(m.group(1)), f"vllm_device {value!r}"
    if index >= n:
        fix = (f"launch with `--num_processes {n - 1}` to leave cuda:{n - 1} to vLLM" if n > 1 else
               "vLLM needs a GPU of its own here: use a machine with 2 GPUs, or upgrade TRL (colocate mode)")
        return details, fail(
            f"{said} does not exist: {n} GPU{'s' if n != 1 else ''} visible, so TRL stops at start with 'The "
            f"requested device for vllm (cuda:{index}) is not available'; {fix}", manual(fix))
    return details, None


# -- G2: a server on this machine and training on every GPU ---------------------------------------------------

def _server_overlap(ctx, s, mode, sync) -> tuple[dict[str, Any], Finding | None]:
    details: dict[str, Any] = {}
    if mode != "server":
        return details, None
    target = server_target(ctx)
    if target.host not in LOCAL_HOSTS:
        return details, None  # the server runs on another machine: no GPU of this one is shared
    where = launch(ctx)
    n, procs = len(where.gpus), where.processes
    if n < 2 or (where.nvml_gpus and len(where.nvml_gpus) > n):
        return details, None  # one GPU: TD008 says a server cannot share it; GPUs hidden by CUDA_VISIBLE_DEVICES may hold the server
    if procs < n:
        return details, None
    details["vLLM server"] = f"{target.base_url} (this machine)"
    details["training processes"] = f"{procs} ({where.processes_from})"
    details["visible GPUs"] = n
    # the model as the file names it, for a command line the user runs
    serve = f"CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model {ctx.config.raw.get('model_name_or_path', '<model>')}"
    train = f"CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(1, n))} accelerate launch --num_processes {n - 1}"
    return details, fail(
        f"vLLM server mode with the server on this machine ({target.base_url}) and {procs} training processes "
        f"on all {n} visible GPUs: the server's GPU is also a training GPU, so the weight-sync communicator "
        "hangs or NCCL's watchdog fires at the first update (trl#3157) and both compete for its memory; give "
        f"the server its own GPU: `{serve}` and `{train}`", manual(f"`{serve}`, then `{train} ...`"))


# -- G10: the architecture in vLLM -------------------------------------------------------------------------

def _architecture(ctx, s, mode, sync) -> tuple[dict[str, Any], Finding | None]:
    details: dict[str, Any] = {}
    from trl_doctor.facts.inputs.text import read_json

    cfg = read_json(ctx.config.model.path / "config.json")
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    if not isinstance(archs, list) or not archs:
        return details, None
    known = supported_architectures()
    if known.archs is None:
        details["vLLM architectures"] = f"not judged: {known.why}"
        return details, None
    details["vLLM architectures"] = known.why
    missing = [a for a in archs if isinstance(a, str) and a not in known.archs]
    if not missing or len(missing) < len(archs):
        return details, None
    fallback = known.transformers_backend(ctx.config.model.path, missing[0])
    if fallback is True:
        details["vLLM Transformers backend"] = f"{missing[0]} runs through vLLM's Transformers backend"
        return details, None
    return details, fail(
        f"config.json architectures {missing} are not implemented by the installed vLLM {known.version} "
        f"({len(known.archs)} architectures in its registry){'' if fallback is None else '; ' + fallback}: the "
        f"engine cannot load the model; set {NO_VLLM}, or a vLLM release that implements it",
        manual(f"set {NO_VLLM}"))
