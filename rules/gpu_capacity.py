"""TD008 gpu-capacity: the GPUs can run the job: a new enough driver, enough GPUs, enough memory.

What it does
    Reads the GPUs through NVML (CUDA_VISIBLE_DEVICES applied) and torch's CUDA build, and estimates
    one process's peak memory (facts/memory/estimate.py): weights, gradients and AdamW states of
    what trains, a reference copy (beta != 0 without PEFT), reward and value models, activations,
    the log-prob head as the installed trainer runs it (whole-sequence logits where `logits_to_keep`
    is ignored, trl#2770), the KV cache, vLLM colocate's share, 1.25 GiB of CUDA context, divided by
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

from trl_doctor import fail, passed, rule, skip, warn
from trl_doctor.facts.launch.launcher import launch, sharding, torch_cuda_version
from trl_doctor.facts.memory.fit import (colocate_kv_room, gib, gpu_name, judge_memory, plan_or_why, server_is_local,
                                         sharded_over, training_gpus, vllm_mode)
from trl_doctor.facts.launch.settings import config_value, settings



@rule(
    id="TD008",
    slug="gpu-capacity",
    title="The GPUs can run the job: driver CUDA, GPU count and a memory estimate",
    needs=("model_config",),
    static_skip="it counts the model's parameters on the meta device",
)
def check(ctx):
    raw = ctx.config.raw
    if raw.get("use_cpu") is True:  # as the file asks (the built config holds the doctor's stand-in)
        yield skip("use_cpu: true: the job trains on the CPU, so there is no GPU to check")
        return
    resolved = settings(ctx)
    bf16, fp16 = resolved.bf16, resolved.fp16
    use_vllm = bool(config_value(ctx, "use_vllm", False))
    mode = vllm_mode(ctx) if use_vllm else None
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
    plan, est_error = plan_or_why(ctx)
    if est_error:
        details["memory estimate"] = f"not made: {est_error}"

    if not visible:
        reason = why or visible_note or "NVML reports no GPU"
        if plan is not None:  # the summary only: without a GPU there is nothing to compare it with
            from trl_doctor.facts.memory.plan import estimate

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

    training, count_problems, launch_words = training_gpus(ctx, visible, use_vllm, mode)
    details["launch"] = launch_words
    findings += count_problems

    shard = sharding(ctx)
    processes = sharded_over(the_launch, training)
    if the_launch.machines > 1:
        details["machines"] = (f"{the_launch.machines} ({the_launch.machines_from}): {the_launch.processes} training "
                               f"processes in all ({the_launch.processes_from}), {the_launch.per_machine} per machine; "
                               "each machine judged as the GPUs above")
    if shard.backend is not None:
        details["sharding"] = (f"{shard.words} ({shard.configured_by}) over {processes} training process"
                               f"{'es' if processes != 1 else ''}" + (f": not modelled, {shard.unknown}" if shard.unknown else ""))
    memory_message = None
    if plan is not None and training:
        gather = config_value(ctx, "ds3_gather_for_generation", True) is not False
        memory_status, memory_message, estimated = judge_memory(plan, training, shard, processes, gather)
        details.update(estimated)
        if memory_status != "pass":
            findings.append((memory_status, memory_message))
        if mode == "colocate":
            kv = colocate_kv_room(ctx, plan, training)
            if kv is not None:
                findings.append(kv[:2])
                details.update(kv[2])

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

def _describe(g: dict) -> str:
    total = g.get("memory_total_bytes", g["memory_total_mib"] * 2**20)
    free = g.get("memory_free_bytes", g["memory_free_mib"] * 2**20)
    procs = g.get("processes")
    others = "" if procs is None else f", {procs} process{'es' if procs != 1 else ''} running"
    return (f"{gpu_name(g)}: compute capability {g['compute_capability']}, {gib(total)} GiB total, "
            f"{gib(free)} GiB free{others}")


def _vllm_words(ctx, mode: str) -> str:
    if mode == "colocate":
        return (f"colocate: tensor parallel {config_value(ctx, 'vllm_tensor_parallel_size', 1)}, "
                f"vllm_gpu_memory_utilization {config_value(ctx, 'vllm_gpu_memory_utilization', 0.3)}")
    if mode == "device":
        return "on a spare GPU apart from training (TRL 0.14-0.15)"
    return "server mode: `trl vllm-serve` on " + ("this machine" if server_is_local(ctx) else "another machine")


