"""TD019 distributed-setup: device_map, PEFT and checkpointing suit the launch's processes, sharding.

What it does
    Reads the launch's processes and DeepSpeed / FSDP sharding (and colocated vLLM's tensor-parallel
    groups over them), the policy's `device_map` (and whether the trainer resets it), the effective
    `use_reentrant` (config, the trainer's `setdefault`, transformers' default) and whether the
    trainer forces it under PEFT + ZeRO-3, deepspeed and peft against KI015, deepspeed's presence.

Why is this bad?
    - `device_map="auto"` ("balanced", "sequential", a multi-entry map) with more than one process:
      accelerate refuses it at `prepare` ("ValueError: You can't train a model that has been loaded
      with `device_map='auto'` in any distributed mode", transformers#31557; docs/coverage.md: H9).
    - PEFT + ZeRO-3 + non-reentrant checkpointing (`use_reentrant=False`, transformers 5's default,
      TRL's on transformers 4 since trl#4811): the first backward fails with "CheckpointError:
      Recomputed values for the following tensors have different metadata than during the forward
      pass" (trl#2514, transformers#47254; docs/coverage.md: H2); trl#6356 forces reentrant.
    - PEFT + ZeRO-3 on a 16-bit base with DeepSpeed 0.19.2: "TypeError: output tensor must have the
      same type as input tensor" at step 1 (deepspeed#8072, fixed in 0.19.3: deepspeed#8073;
      trl#6091 avoids it; docs/coverage.md: H3).
    - DeepSpeed configured without the package: "ImportError: DeepSpeed is not installed".
    - `vllm_tensor_parallel_size` not dividing the processes (colocate): TRL refuses it at start-up.

Example
    accelerate_config: accelerate_zero2_4gpu.yaml   # ZeRO-2 on this machine's 4 GPUs; no deepspeed
    -> fail: DeepSpeed ZeRO-2 is configured (...) but the deepspeed package is not installed ...

Fix safety
    Manual fixes only, the smallest change: no device_map (or {"": local_rank}) or one process;
    `use_reentrant: true`, ZeRO-2 or a TRL that forces it; `pip install "deepspeed!=0.19.2"`; `pip
    install deepspeed`; a multiple of the tensor-parallel size of processes.
"""

from __future__ import annotations

from typing import Any, Mapping

from trl_doctor import fail, manual, passed, rule, TRAINERS, Unavailable, warn
from trl_doctor.facts.launch.launcher import launch, package_version, sharding, trainer_distributed_handling
from trl_doctor.facts.launch.settings import checkpointing_reentrant, config_value, settings
from trl_doctor.facts.trl.trainer_config import trainer_config
from trl_doctor.facts.trl.versions import entry_matches_versions, load_table

SPREADING = ("auto", "balanced", "balanced_low_0", "sequential")  # transformers' strategies that place layers itself
NOT_JUDGED = "not judged"  # how a device_map detail ends when the script's map was seen at world size 1 only
MIXED_DTYPE_ISSUE = "KI015"
_Verdict = tuple[str, str, Any]  # (status, message, fix) of one part of the check
ACCELERATE_ERROR = ("ValueError: You can't train a model that has been loaded with `device_map='auto'` in any "
                    "distributed mode")


@rule(
    id="TD019",
    slug="distributed-setup",
    title="Model loading, PEFT and gradient checkpointing work under the launch's processes and DeepSpeed/FSDP",
    trainers=TRAINERS,
    fixable="never",
    static_skip="it judges the installed accelerate and DeepSpeed",
)
def check(ctx):
    the_launch = launch(ctx)
    shard = sharding(ctx)
    n = the_launch.processes
    details: dict[str, Any] = {
        "training processes": f"{n} ({the_launch.processes_from})",
        "sharding": f"{shard.words} ({shard.configured_by})" + (f": {shard.unknown}" if shard.unknown else ""),
    }
    findings = []
    for part in (_device_map, _vllm_tensor_parallel, _deepspeed_unreadable, _deepspeed_installed,
                 _peft_zero3_checkpointing, _peft_zero3_mixed_dtype):
        found, its_details = part(ctx, the_launch, shard)
        details.update(its_details)
        if found is not None:
            findings.append(found)
    for status, message, fix in findings:
        yield (fail if status == "fail" else warn)(message, fix, **details)
    if not findings:
        unjudged = str(details.get("device_map", "")).endswith(NOT_JUDGED)
        what = "PEFT and gradient checkpointing settings fit the launch; the script's device_map is not judged (seen " \
               "at world size 1)" if unjudged else "device_map, PEFT and gradient checkpointing settings fit the launch"
        yield passed(f"{n} training process{'es' if n != 1 else ''}, {shard.words}: {what}", **details)


# -- H9: a model spread over devices in a distributed launch -------------------------------------------------------

def spreads(device_map: Any) -> bool:
    """Whether a device_map places the model's layers on more than one device (what accelerate refuses)."""
    if isinstance(device_map, str):
        return device_map in SPREADING
    if isinstance(device_map, Mapping):
        return len(device_map) > 1 and len({str(v) for v in device_map.values()}) > 1
    return False


def _device_map(ctx, the_launch, shard) -> tuple[_Verdict | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    live = getattr(ctx, "live", None)
    preloaded = live is not None and live.model is not None
    if preloaded:  # the script loaded the policy itself: what it passed to from_pretrained (launch capture)
        kwargs = ctx.config.raw.get("model_init_kwargs")  # what the capture recorded the script passing
        kwargs = kwargs if isinstance(kwargs, Mapping) else {}
        where = "the script loads the policy with"
    else:
        s = settings(ctx)
        if "model_init_kwargs" not in s.fields and s.config_class:
            details["device_map"] = f"{s.config_class} has no model_init_kwargs: the script places the model"
            return None, details
        kwargs = s.model_init_kwargs
        where = "model_init_kwargs sets"
    if "device_map" not in kwargs or kwargs["device_map"] is None:
        details["device_map"] = "not set"
        return None, details
    dm = kwargs["device_map"]
    shown = f"device_map={dm!r}"
    n = the_launch.processes
    kind = "DEEPSPEED" if shard.backend == "deepspeed" else "FSDP" if shard.backend == "fsdp" else "MULTI_GPU"
    # TRL loads a model id after its arguments set up ZeRO-3, where transformers refuses any device_map
    zero3 = shard.backend == "deepspeed" and shard.zero_stage == 3 and not preloaded
    if not (zero3 or (spreads(dm) and n > 1)):
        details["device_map"] = f"{shown}: " + ("one device per process" if not spreads(dm) else
                                                "one process: accelerate lets a spread model train (no data parallel)")
        return None, details
    if preloaded and (getattr(live, "world", 1) or 1) < n:  # what the script passes at world size N is its code's to say
        details["device_map"] = (f"{shown} seen at world size 1: the script could not run as rank 0 of the launch's {n} "
                                 "processes here (see the launch notes), and code that maps each rank to its own GPU "
                                 f"decides at N: {NOT_JUDGED}")
        return None, details
    if not preloaded:
        handling = trainer_distributed_handling(ctx.trainer)
        if kind in handling.drops_device_map:
            details["device_map"] = (f"{shown}: trl {ctx.version('trl')} loads the model id with device_map=None under "
                                     f"{kind} ({handling.drops_device_map_at}), so the setting is dropped")
            return None, details
    if kind == "FSDP":  # with fsdp_cpu_ram_efficient_loading transformers does not dispatch the model: not judged
        details["device_map"] = f"{shown} under FSDP: transformers skips placing it when FSDP loads the weights itself"
        return None, details
    details["device_map"] = f"{shown} under {kind} with {n} process{'es' if n != 1 else ''}"
    remove = "from the script's from_pretrained call" if preloaded else "from model_init_kwargs"
    if zero3:
        return ("fail", (
            f"{where} {shown} under {shard.words} ({shard.configured_by}): ZeRO-3 partitions the weights as they load, "
            "and transformers refuses to place them when TRL loads the model (\"ValueError: DeepSpeed Zero-3 is not "
            f"compatible with passing a `device_map`\"); remove device_map {remove}"),
            manual("remove device_map: ZeRO-3 places the partitions itself")), details
    return ("fail", (
        f"{where} {shown} and the launch starts {n} training processes ({the_launch.processes_from}, {kind}): "
        f"accelerate refuses a model spread over devices in any distributed mode (\"{ACCELERATE_ERROR}\"), and every "
        f"process would load the whole model over all its GPUs; remove device_map {remove} (or use "
        "{\"\": local_rank} per process), or launch one process"),
        manual("remove device_map (each process then loads its copy on its own GPU), or launch with --num_processes 1")), details


# -- a DeepSpeed config the launch cannot read ---------------------------------------------------------------------

def _deepspeed_unreadable(ctx, the_launch, shard) -> tuple[_Verdict | None, dict[str, Any]]:
    """The DeepSpeed config named (the trainer config's `deepspeed`, or the accelerate config's deepspeed file) is
    missing or no mapping: TrainingArguments / accelerate stop on it at the launch, on every machine."""
    details: dict[str, Any] = {}
    if shard.backend != "deepspeed" or not shard.unreadable:
        return None, details
    return ("fail", (
        f"DeepSpeed is configured ({shard.configured_by}) but its config cannot be read: {shard.unknown}; the launch "
        "stops before training ('ValueError: Expected a string path to an existing deepspeed config, or a "
        "dictionary', or accelerate's error reading the file); fix the path (relative paths are read from the "
        "directory the job is launched in)"), manual("point deepspeed at an existing DeepSpeed JSON")), details


# -- colocated vLLM's tensor-parallel groups over the training processes ----------------------------------------

def _vllm_tensor_parallel(ctx, the_launch, shard) -> tuple[_Verdict | None, dict[str, Any]]:
    """Colocated vLLM splits the training processes into groups of vllm_tensor_parallel_size: TRL refuses a size
    that does not divide them, at start-up (its own words). Judged where the process count is known."""
    try:
        cfg = trainer_config(ctx)
    except Unavailable:
        return None, {}
    if not getattr(cfg, "use_vllm", False) or str(getattr(cfg, "vllm_mode", "")) != "colocate":
        return None, {}  # a release without colocated vLLM (trl < 0.18) has no such groups
    try:
        tp = int(getattr(cfg, "vllm_tensor_parallel_size", 1) or 1)
    except (TypeError, ValueError):
        return None, {}
    n = the_launch.processes
    if tp <= 1 or not the_launch.counted or n % tp == 0:
        return None, {"vLLM tensor parallel": tp} if tp > 1 else {}
    return ("fail", (
        f"vllm_tensor_parallel_size {tp} does not divide the launch's {n} training processes "
        f"({the_launch.processes_from}): TRL stops at start-up with \"vllm_tensor_parallel_size ({tp}) must divide "
        f"world size ({n}) evenly.\""), manual(
        f"launch a multiple of {tp} processes ({n - n % tp or tp}) or set vllm_tensor_parallel_size to a divisor of "
        f"{n}")), {"vLLM tensor parallel": tp}


# -- DeepSpeed configured but not installed ----------------------------------------------------------------------

def _deepspeed_installed(ctx, the_launch, shard) -> tuple[_Verdict | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    if shard.backend != "deepspeed":
        return None, details
    version = package_version("deepspeed")
    if version is not None:
        details["deepspeed"] = f"deepspeed {version} installed"
        return None, details
    if not the_launch.software_here:
        where = f"--target {the_launch.target}" if the_launch.target else "the launch machine (no GPU here)"
        details["deepspeed"] = (f"not installed here; {shard.configured_by} needs it on {where}: "
                                f"pip install deepspeed there ({the_launch.not_judged})")
        return None, details
    whose = f"the environment of the launch on {the_launch.target} (--target)" if the_launch.target else \
        "this machine, whose GPUs the job runs on"
    return ("fail", (
        f"{shard.words} is configured ({shard.configured_by}) but the deepspeed package is not installed in "
        f"{whose}: `accelerate launch` stops with \"ImportError: DeepSpeed is not installed "
        "=> run `pip3 install deepspeed` or build it from source\"; pip install deepspeed, or drop the DeepSpeed "
        "setting (plain data parallel)"), manual("pip install deepspeed")), details


# -- H2: PEFT + ZeRO-3 + non-reentrant gradient checkpointing ---------------------------------------------------------

def _zero3_peft(ctx, shard) -> bool:
    return shard.backend == "deepspeed" and shard.zero_stage == 3 and bool(config_value(ctx, "use_peft", False))


def _peft_zero3_checkpointing(ctx, the_launch, shard) -> tuple[_Verdict | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    if not _zero3_peft(ctx, shard):
        return None, details
    reentrant, where = checkpointing_reentrant(ctx)
    details["gradient checkpointing"] = "off" if reentrant is None else f"use_reentrant={reentrant} ({where})"
    if reentrant is None or reentrant:
        return None, details
    handling = trainer_distributed_handling(ctx.trainer)
    if handling.forces_reentrant:
        details["gradient checkpointing"] += (f"; trl {ctx.version('trl')} forces use_reentrant=True for PEFT + ZeRO-3 "
                                              f"({handling.forces_reentrant}) and warns")
        return None, details
    return ("fail", (
        f"PEFT + {shard.words} ({shard.configured_by}) + gradient checkpointing with use_reentrant=False ({where}): "
        "ZeRO-3 re-partitions the frozen weights before the non-reentrant recompute, and the first backward fails "
        "with \"CheckpointError: Recomputed values for the following tensors have different metadata than during the "
        f"forward pass\" (trl#2514); trl {ctx.version('trl')} does not force reentrant checkpointing there; set "
        "gradient_checkpointing_kwargs: {use_reentrant: true}, or use ZeRO-2, or upgrade TRL (trl#6356 forces it)"),
        manual("gradient_checkpointing_kwargs: {use_reentrant: true} (or ZeRO stage 2)")), details


# -- H3: PEFT + ZeRO-3 mixed adapter dtype on DeepSpeed 0.19.2 --------------------------------------------------------

def mixed_dtype_problem(installed: Mapping[str, str | None], entry: Mapping[str, Any], *, zero3_peft: bool,
                        quantized: bool, base_dtype: str, trainer_keeps_adapter_dtype: bool) -> str | None:
    """Why the first optimizer step fails with mixed bf16/fp32 ZeRO-3 parameters, or None. Pure: tested with real
    version strings."""
    if not zero3_peft or quantized or base_dtype not in ("bfloat16", "float16"):
        return None
    if trainer_keeps_adapter_dtype or not entry_matches_versions(entry, installed):
        return None
    return (f"{entry['id']}: deepspeed {installed.get('deepspeed')} with peft {installed.get('peft')}: LoRA adapters in "
            f"fp32 on a {base_dtype} base under ZeRO-3")


def _peft_zero3_mixed_dtype(ctx, the_launch, shard) -> tuple[_Verdict | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    if not _zero3_peft(ctx, shard):
        return None, details
    entry = next((e for e in load_table() if e["id"] == MIXED_DTYPE_ISSUE), None)
    if entry is None:
        return None, details
    installed = {pkg: package_version(pkg) for pkg in entry["when"]}
    try:
        quantized = bool(config_value(ctx, "load_in_4bit", False)) or bool(config_value(ctx, "load_in_8bit", False))
    except Unavailable:
        quantized = False
    handling = trainer_distributed_handling(ctx.trainer)
    dtype = settings(ctx).policy_dtype
    why = mixed_dtype_problem(installed, entry, zero3_peft=True, quantized=quantized, base_dtype=dtype,
                              trainer_keeps_adapter_dtype=bool(handling.keeps_adapter_dtype))
    versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in installed.items())
    details["adapter dtype"] = (f"{versions}; policy {dtype}" + (f"; trl {ctx.version('trl')} builds the adapters in the "
                                f"base dtype under ZeRO-3 ({handling.keeps_adapter_dtype})" if handling.keeps_adapter_dtype else ""))
    if why is None:
        return None, details
    return ("fail", (
        f"{why} ({shard.configured_by}): deepspeed 0.19.2 sizes ZeRO-3's all-gather buffers by the first parameter's "
        "dtype, so the first optimizer step fails with \"TypeError: output tensor must have the same type as input "
        f"tensor\" in _allgather_params_coalesced (deepspeed#8072), and trl {ctx.version('trl')} does not pass "
        "autocast_adapter_dtype=False; pip install \"deepspeed>=0.19.3\" (or <=0.19.1), or upgrade TRL (trl#6091)"),
        manual('pip install "deepspeed>=0.19.3"')), details
