"""TD008 gpu-capacity: the GPUs can run the job: a new enough driver, enough GPUs, enough memory.

What it does
    Reads the GPUs through NVML (CUDA_VISIBLE_DEVICES applied) and torch's CUDA build, and estimates
    one process's peak memory (facts/memory_estimate.py): weights, gradients and AdamW states of
    what trains, a reference copy (beta != 0 without PEFT), reward and value models, activations,
    the log-prob head as the installed trainer runs it (whole-sequence logits where `logits_to_keep`
    is ignored, trl#2770), the KV cache, vLLM colocate's share, 0.5 GiB of CUDA context, divided by
    ZeRO or FSDP sharding. Over a GPU's free memory fails (warns where the sharding cannot be read),
    within 10% warns; a local vLLM server takes a GPU; no GPU fails with use_vllm, else skips.

Why is this bad?
    A config written for one machine dies on another at start-up or the first step: a driver older
    than torch's CUDA major ("The NVIDIA driver on your system is too old"; within it,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION from Triton kernels); `vllm_tensor_parallel_size` above the
    GPUs ("tensor_parallel_size (X) must divide world size (Y) evenly"), server mode on one GPU; out
    of memory: TRL loads the policy in float32 unless a dtype is given (`bf16: true` only
    autocasts), 16 bytes per parameter, ~120 GiB for 8B. bf16 is on by default from TRL 0.19; GRPO's
    beta is 0.0 from 0.19 (0.04 before), RLOO's 0.05 in 1.16; vLLM takes a spare GPU in 0.14-0.15,
    is a server by default in 0.16-0.29, colocated from 1.0 (memory utilization 0.3); past 0.27 (no
    max_prompt_length) 512 prompt tokens are assumed, and said.

Example
    model_name_or_path: llama-3-8b      # no dtype: loaded in float32; one 80 GB A100
    -> fail: does not fit: needs ~... GiB per GPU (...) but ... has ... GiB free; ...

Fix safety
    No fix: the message names the numbers and the smallest change
    (`model_init_kwargs: {dtype: bfloat16}`, a smaller batch or completion, gradient_checkpointing,
    beta 0 or PEFT, a lower vllm_gpu_memory_utilization, a newer driver).
"""

from __future__ import annotations

import re
from typing import Any

from trl_doctor import fail, passed, rule, skip, warn
from trl_doctor.facts.launch import launch, sharding, torch_cuda_version
from trl_doctor.facts.settings import LOCAL_HOSTS, config_value, settings, vllm_placement
from trl_doctor.facts.vllm_server import server_target

TIGHT = 0.10  # within 10% of the free memory: warn


@rule(
    id="TD008",
    slug="gpu-capacity",
    title="The GPUs can run the job: driver CUDA, GPU count and a memory estimate",
    needs=("model_config",),
)
def check(ctx):
    raw = ctx.config.raw
    if raw.get("use_cpu") is True:  # as the file asks (the built config holds the doctor's stand-in)
        yield skip("use_cpu: true: the job trains on the CPU, so there is no GPU to check")
        return
    resolved = settings(ctx)
    bf16, fp16 = resolved.bf16, resolved.fp16
    use_vllm = resolved.use_vllm
    mode = _vllm_mode(ctx) if use_vllm else None
    the_launch = launch(ctx)
    visible, visible_note, why = list(the_launch.gpus), the_launch.visible_note, the_launch.nvml_error
    torch_cuda = torch_cuda_version()
    details: dict = {"GPUs": [_describe(g) for g in visible] or f"none ({why or visible_note or 'NVML reports no GPU'})"}
    if visible_note:
        details["CUDA_VISIBLE_DEVICES"] = visible_note
    if the_launch.target:
        details["judged against"] = f"--target {the_launch.target} (the launch machine; its driver is not known here)"
    elif visible:
        details["driver"] = f"{visible[0]['driver']} (CUDA {visible[0]['driver_cuda']})"
    details["torch CUDA build"] = torch_cuda or "none (a CPU build of torch): the driver's CUDA is not compared"
    details["bf16 / fp16"] = f"{bf16} / {fp16}" + ("" if "bf16" in raw else " (bf16 is the installed TRL's default)")
    if use_vllm:
        details["vLLM"] = _vllm_words(ctx, mode)
    plan, est_error = _plan(ctx)
    if est_error:
        details["memory estimate"] = f"not made: {est_error}"

    if not visible:
        reason = why or visible_note or "NVML reports no GPU"
        if plan is not None:  # the summary only: without a GPU there is nothing to compare it with
            from trl_doctor.facts.memory import estimate

            est = estimate(plan)
            details["memory estimate per GPU"] = (f"{est.total_gib:.1f} GiB at the peak ({est.peak_phase}, without "
                                                  f"a vLLM share): {est.summary()}")
        # this machine is not the launch machine: the GPU verdicts need that one (--target), never a fail here
        needs = "vLLM (use_vllm: true) and the training need a CUDA GPU there" if use_vllm else \
            "the config asks for no vLLM"
        yield skip(f"no GPU here ({reason}): pass --target (e.g. --target 8xH100-80GB) to check against the launch "
                   f"machine; {needs}", **details)
        return

    findings = []
    problem = driver_cuda_problem(visible[0]["driver_cuda"], torch_cuda) if visible[0].get("driver_cuda") else None
    if problem is not None:
        findings.append(problem)

    training, count_problems, launch_words = _launch(ctx, visible, use_vllm, mode)
    details["launch"] = launch_words
    findings += count_problems

    shard = sharding(ctx)
    processes = max(1, min(the_launch.processes, len(training)))
    if shard.backend is not None:
        details["sharding"] = (f"{shard.words} ({shard.configured_by}) over {processes} training process"
                               f"{'es' if processes != 1 else ''}" + (f": not modelled, {shard.unknown}" if shard.unknown else ""))
    memory_message = None
    if plan is not None and training:
        gather = config_value(ctx, "ds3_gather_for_generation", True) is not False
        memory_status, memory_message, estimated = _judge_memory(plan, training, shard, processes, gather)
        details.update(estimated)
        if memory_status != "pass":
            findings.append((memory_status, memory_message))

    for status, message in findings:
        yield (fail if status == "fail" else warn)(message, **details)
    if findings:
        return
    extra = []
    if torch_cuda:
        extra.append(f"driver CUDA {visible[0]['driver_cuda']} runs torch's CUDA {torch_cuda}")
    tail = f"; {', '.join(extra)}" if extra else ""
    if memory_message is None:
        yield skip(f"{launch_words}{tail}; memory not estimated: {est_error or 'no training GPU'}", **details)
        return
    yield passed(f"{memory_message}{tail}", **details)


# -- pure pieces, tested on their own ---------------------------------------------------------------------

def driver_cuda_problem(driver_cuda: str | None, torch_cuda: str | None) -> tuple[str, str] | None:
    """('fail' or 'warn', message) when the driver's CUDA is older than torch's CUDA build, else None."""
    if not driver_cuda or not torch_cuda:
        return None
    d, t = _version(driver_cuda), _version(torch_cuda)
    if d is None or t is None or d >= t:
        return None
    if d[0] < t[0]:
        return "fail", (
            f"the NVIDIA driver supports CUDA {driver_cuda} but torch is built for CUDA {torch_cuda}: torch finds no "
            f"usable GPU (\"The NVIDIA driver on your system is too old\"); update the driver to one for CUDA "
            f"{t[0]}.{t[1]} or newer, or install a torch built for CUDA {d[0]}.x")
    return "warn", (
        f"the NVIDIA driver supports CUDA {driver_cuda}, older than torch's CUDA {torch_cuda}: CUDA's minor-version "
        "compatibility runs torch, but kernels built for the newer release (Triton, torch.compile) can fail with "
        f"CUDA_ERROR_UNSUPPORTED_PTX_VERSION; update the driver to one for CUDA {torch_cuda} or newer")


def _version(text: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


# -- helpers ----------------------------------------------------------------------------------------------

def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}"


def _name(g: dict) -> str:
    return f"GPU {g['index']} ({g['name']})"


def _describe(g: dict) -> str:
    total = g.get("memory_total_bytes", g["memory_total_mib"] * 2**20)
    free = g.get("memory_free_bytes", g["memory_free_mib"] * 2**20)
    procs = g.get("processes")
    others = "" if procs is None else f", {procs} process{'es' if procs != 1 else ''} running"
    return (f"{_name(g)}: compute capability {g['compute_capability']}, {_gib(total)} GiB total, "
            f"{_gib(free)} GiB free{others}")


def _vllm_mode(ctx) -> str:
    """colocate, server, or 'device' (TRL 0.14-0.15's vLLM on a spare GPU, before vllm_mode existed)."""
    return str(vllm_placement(ctx)[0] or "server")


def _server_is_local(ctx) -> bool:
    return server_target(ctx).host in LOCAL_HOSTS  # the host the trainer's client connects to (no name lookup)


def _vllm_words(ctx, mode: str) -> str:
    if mode == "colocate":
        return (f"colocate: tensor parallel {config_value(ctx, 'vllm_tensor_parallel_size', 1)}, "
                f"vllm_gpu_memory_utilization {config_value(ctx, 'vllm_gpu_memory_utilization', 0.3)}")
    if mode == "device":
        return "on a spare GPU apart from training (TRL 0.14-0.15)"
    return "server mode: `trl vllm-serve` on " + ("this machine" if _server_is_local(ctx) else "another machine")


def _launch(ctx, visible: list[dict], use_vllm: bool, mode: str | None) -> tuple[list[dict], list, str]:
    """(training GPUs, count problems, words) for the GPUs this launch takes."""
    n = len(visible)
    problems = []
    if use_vllm and mode == "colocate":
        tp = int(config_value(ctx, "vllm_tensor_parallel_size", 1) or 1)
        words = f"{n} GPU{'s' if n > 1 else ''} as {n} training process{'es' if n > 1 else ''}; vLLM colocate shares them (tensor parallel {tp})"
        if tp > n:
            problems.append(("fail", (
                f"vllm_tensor_parallel_size {tp} needs {tp} GPUs, but {n} {'is' if n == 1 else 'are'} visible "
                f"({', '.join(_name(g) for g in visible)}): lower vllm_tensor_parallel_size to {n} or fewer")))
        elif n % tp:
            problems.append(("warn", (
                f"vllm_tensor_parallel_size {tp} does not divide the {n} visible GPUs: launching one training process "
                f"per GPU fails with \"tensor_parallel_size ({tp}) must divide world size ({n}) evenly\"; launch "
                f"{n - n % tp} processes or pick a tensor parallel size dividing {n}")))
        return visible, problems, words
    if use_vllm and (mode == "device" or (mode == "server" and _server_is_local(ctx))):
        who = "the vLLM server (`trl vllm-serve`)" if mode == "server" else "vLLM (its own GPU in TRL 0.14-0.15)"
        if n < 2:
            problems.append(("fail", (
                f"vllm_mode {mode}: {who} needs a GPU of its own apart from the training's, and this machine has {n} "
                f"({', '.join(_name(g) for g in visible)}): use `vllm_mode: colocate` to share it, or run the server "
                "on another machine (vllm_server_host / vllm_server_base_url)")))
            return visible, problems, f"{n} GPU: not enough for a vLLM server and training"
        by_free = sorted(visible, key=lambda g: -g.get("memory_free_bytes", g["memory_free_mib"] * 2**20))
        training = sorted(by_free[: n - 1], key=lambda g: g["index"])
        words = (f"{n} GPUs: 1 for {who}, {n - 1} for training (judged on the {n - 1} with the most free memory: "
                 f"{', '.join(str(g['index']) for g in training)})")
        return training, problems, words
    words = f"{n} GPU{'s' if n > 1 else ''} as {n} training process{'es' if n > 1 else ''}"
    if use_vllm:
        words += "; the vLLM server runs on another machine"
    return visible, problems, words


def _plan(ctx):
    """(Plan, None) or (None, why the memory cannot be estimated)."""
    from trl_doctor import InputError, Unavailable
    from trl_doctor.facts.memory import plan_from_context

    try:
        return plan_from_context(ctx), None
    except (InputError, Unavailable) as exc:
        return None, str(exc)
    except Exception as exc:  # a model transformers cannot build on the meta device: the other checks still run
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def _estimate_details(plan, est) -> dict[str, Any]:
    return {"memory estimate per GPU": f"{est.total_gib:.1f} GiB at the peak ({est.peak_phase}): {est.summary()}",
            "memory breakdown": est.breakdown(),
            "estimate inputs": {k: v for k, v in plan.labels},
            "assumptions": list(est.assumptions)}


def _judge_memory(plan, training: list[dict], shard, processes: int,
                  gather: bool = True) -> tuple[str, str, dict[str, Any]]:
    """('pass' / 'warn' / 'fail', message, the details: the estimate and the free memory) for the tightest training
    GPU, under the launch's sharding (and, under ZeRO-3, whether generation gathers the whole policy: `gather`, TRL's
    ds3_gather_for_generation)."""
    from trl_doctor.facts.memory import estimate, sharded

    worst = None
    for g in training:
        total = g.get("memory_total_bytes", g["memory_total_mib"] * 2**20)
        free = g.get("memory_free_bytes", g["memory_free_mib"] * 2**20)
        est, split = sharded(estimate(plan, total), plan, shard, processes, gather)
        margin = free - est.total_bytes
        if worst is None or margin < worst[0]:
            worst = (margin, g, est, free, split)
    margin, g, est, free, split = worst
    details = _estimate_details(plan, est)
    details["free memory per GPU"] = {f"GPU {x['index']}": f"{_gib(x.get('memory_free_bytes', x['memory_free_mib'] * 2**20))} GiB"
                                      for x in training}
    need = f"~{est.total_gib:.1f} GiB per GPU ({est.summary()})"
    if split:
        need += f" with {split}"
    has = f"{_name(g)} has {_gib(free)} GiB free"
    hint = _hint(plan, est, shard.backend)
    if shard.modelled and shard.shards_parameters:  # already sharded: more processes divide it further
        hint = hint.replace("or shard it over GPUs (ZeRO-3, FSDP)", f"or more GPUs than {processes} to shard it over")
    if margin < 0:
        status = "fail"
        message = f"does not fit: needs {need} but {has}; {hint}"
    elif est.total_bytes > (1 - TIGHT) * free:
        status = "warn"
        message = f"barely fits: needs {need} and {has} (within {TIGHT:.0%}); {hint}"
    else:
        return "pass", f"fits: needs {need} and {has}", details
    if shard.backend is not None and not shard.modelled and status == "fail":
        status = "warn"
        message += (f"; {shard.words} is set ({shard.configured_by}) but its sharding is not read ({shard.unknown}): the "
                    "estimate is for an unsharded process, so this is a warning")
    return status, message, details


def _hint(plan, est, backend: str | None = None) -> str:
    """The largest components and the change that shrinks each."""
    gather_tip = ("set `ds3_gather_for_generation: false` (ZeRO-3 then generates with the parameters sharded, a layer "
                  "at a time: slower generation, no whole copy of the policy), or generate with vLLM (`use_vllm: true`)"
                  if backend == "deepspeed" else "generate with vLLM (`use_vllm: true`)")
    tips = {
        "policy gathered for generation": gather_tip,
        "policy weights": "load the weights in bf16 (`model_init_kwargs: {dtype: bfloat16}`), which halves weights, "
        "gradients and AdamW states" if plan.param_bytes == 4
        else "a 4-bit base with LoRA (`load_in_4bit: true`, `use_peft: true`), or shard it over GPUs (ZeRO-3, FSDP)",
        "AdamW states": "train LoRA adapters (`use_peft: true`) or an 8-bit AdamW (`optim: adamw_8bit`)",
        "optimizer states": "train LoRA adapters (`use_peft: true`)",
        "gradients": "train LoRA adapters (`use_peft: true`)",
        "reference model": "set `beta: 0.0` or use PEFT (the reference is then the base without the adapter)",
        "activations": "lower per_device_train_batch_size or max_completion_length"
        + ("" if plan.gradient_checkpointing else ", or turn gradient_checkpointing on"),
        "logits": "lower per_device_train_batch_size or max_completion_length",
        "KV cache (generation)": "generate with vLLM or lower the generation batch",
        "vLLM share": "lower vllm_gpu_memory_utilization",
        "reward models": "use a smaller reward model",
    }
    big = sorted(est.in_peak(), key=lambda c: -c.bytes)[:2]
    parts = [f"{c.name} {c.gib:.1f} GiB: {tips[c.name]}" for c in big if c.name in tips]
    return "the largest parts are " + "; ".join(parts) if parts else "see the breakdown"
