"""The memory estimate judged against the launch machine's training GPUs: which GPUs train (a local vLLM server or
TRL 0.14-0.15's vLLM device takes one), the estimate under the launch's sharding for the tightest of them, and the
verdict (fail over its free memory, warn within 10%) with the change that shrinks the largest parts. gpu-capacity
reports it; logits-contract asks it whether whole-sequence logits make the job not fit (`memory_verdict`)."""

from __future__ import annotations

from typing import Any

from trl_doctor.facts.launch.launcher import launch, sharding
from trl_doctor.facts.launch.settings import LOCAL_HOSTS, config_value, settings, vllm_placement
from trl_doctor.facts.vllm.server import server_target

TIGHT = 0.10  # within 10% of the free memory: warn


def memory_verdict(ctx) -> tuple[str, str, dict[str, Any]] | None:
    """('pass' / 'warn' / 'fail', message, details) for the config's memory on the launch machine's training GPUs, as
    gpu-capacity judges it; None where no GPU is known (no NVML GPU and no --target), the job trains on the CPU, or the
    estimate cannot be made."""
    if ctx.config.raw.get("use_cpu") is True:
        return None
    use_vllm = settings(ctx).use_vllm
    the_launch = launch(ctx)
    visible = list(the_launch.gpus)
    plan, _ = plan_or_why(ctx) if visible else (None, None)
    if plan is None:
        return None
    training, _, _ = training_gpus(ctx, visible, use_vllm, vllm_mode(ctx) if use_vllm else None)
    if not training:
        return None
    processes = sharded_over(the_launch, training)
    gather = config_value(ctx, "ds3_gather_for_generation", True) is not False
    return judge_memory(plan, training, sharding(ctx), processes, gather)


def sharded_over(the_launch, training: list[dict]) -> int:
    """The processes ZeRO / FSDP shard over: every machine's (the world size) when the launch spans machines, else
    this machine's training GPUs at most (a process per GPU)."""
    if the_launch.machines > 1:
        return max(1, the_launch.processes)
    return max(1, min(the_launch.processes, len(training)))


def gib(n: float) -> str:
    """Bytes as GiB with one decimal, for messages."""
    return f"{n / 2**30:.1f}"


def gpu_name(g: dict) -> str:
    return f"GPU {g['index']} ({g['name']})"


def vllm_mode(ctx) -> str:
    """colocate, server, or 'device' (TRL 0.14-0.15's vLLM on a spare GPU, before vllm_mode existed)."""
    return str(vllm_placement(ctx)[0] or "server")


def server_is_local(ctx) -> bool:
    return server_target(ctx).host in LOCAL_HOSTS  # the host the trainer's client connects to (no name lookup)


def training_gpus(ctx, visible: list[dict], use_vllm: bool, mode: str | None) -> tuple[list[dict], list, str]:
    """(training GPUs, count problems, words) for the GPUs this launch takes."""
    n = len(visible)
    problems = []
    if use_vllm and mode == "colocate":
        tp = int(config_value(ctx, "vllm_tensor_parallel_size", 1) or 1)
        words = f"{n} GPU{'s' if n > 1 else ''} as {n} training process{'es' if n > 1 else ''}; vLLM colocate shares them (tensor parallel {tp})"
        if tp > n:
            problems.append(("fail", (
                f"vllm_tensor_parallel_size {tp} needs {tp} GPUs, but {n} {'is' if n == 1 else 'are'} visible "
                f"({', '.join(gpu_name(g) for g in visible)}): lower vllm_tensor_parallel_size to {n} or fewer")))
        return visible, problems, words
    if use_vllm and (mode == "device" or (mode == "server" and server_is_local(ctx))):
        who = "the vLLM server (`trl vllm-serve`)" if mode == "server" else "vLLM (its own GPU in TRL 0.14-0.15)"
        if n < 2:
            problems.append(("fail", (
                f"vllm_mode {mode}: {who} needs a GPU of its own apart from the training's, and this machine has {n} "
                f"({', '.join(gpu_name(g) for g in visible)}): use `vllm_mode: colocate` to share it, or run the server "
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


def plan_or_why(ctx):
    """(Plan, None) or (None, why the memory cannot be estimated)."""
    from trl_doctor.errors import InputError, Unavailable

    from trl_doctor.facts.memory.plan import plan_from_context

    try:
        return plan_from_context(ctx), None
    except (InputError, Unavailable) as exc:
        return None, str(exc)
    except Exception as exc:  # a model transformers cannot build on the meta device: the other checks still run
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def estimate_details(plan, est) -> dict[str, Any]:
    """The estimate as the details show it: the peak, its parts, what it was made from and what it assumed."""
    return {"memory estimate per GPU": f"{est.total_gib:.1f} GiB at the peak ({est.peak_phase}): {est.summary()}",
            "memory breakdown": est.breakdown(),
            "estimate inputs": {k: v for k, v in plan.labels},
            "assumptions": list(est.assumptions)}


def judge_memory(plan, training: list[dict], shard, processes: int,
                 gather: bool = True) -> tuple[str, str, dict[str, Any]]:
    """('pass' / 'warn' / 'fail', message, the details: the estimate and the free memory) for the tightest training
    GPU, under the launch's sharding (and, under ZeRO-3, whether generation gathers the whole policy: `gather`, TRL's
    ds3_gather_for_generation)."""
    from trl_doctor.facts.memory.plan import estimate, sharded

    worst = None
    for g in training:
        total = g.get("memory_total_bytes", g["memory_total_mib"] * 2**20)
        free = g.get("memory_free_bytes", g["memory_free_mib"] * 2**20)
        est, split = sharded(estimate(plan, total), plan, shard, processes, gather)
        margin = free - est.total_bytes
        if worst is None or margin < worst[0]:
            worst = (margin, g, est, free, split)
    assert worst is not None  # `training` is never empty: both callers check
    margin, g, est, free, split = worst
    details = estimate_details(plan, est)
    details["free memory per GPU"] = {f"GPU {x['index']}": f"{gib(x.get('memory_free_bytes', x['memory_free_mib'] * 2**20))} GiB"
                                      for x in training}
    need = f"~{est.total_gib:.1f} GiB per GPU ({est.summary()})"
    if split:
        need += f" with {split}"
    has = f"{gpu_name(g)} has {gib(free)} GiB free"
    tip = hint(plan, est, shard.backend)
    if shard.modelled and shard.shards_parameters:  # already sharded: more processes divide it further
        tip = tip.replace("or shard it over GPUs (ZeRO-3, FSDP)", f"or more GPUs than {processes} to shard it over")
    if margin < 0:
        status = "fail"
        message = f"does not fit: needs {need} but {has}; {tip}"
    elif est.total_bytes > (1 - TIGHT) * free:
        status = "warn"
        message = f"barely fits: needs {need} and {has} (within {TIGHT:.0%}); {tip}"
    else:
        return "pass", f"fits: needs {need} and {has}", details
    if shard.backend is not None and not shard.modelled and status == "fail":
        status = "warn"
        message += (f"; {shard.words} is set ({shard.configured_by}) but its sharding is not read ({shard.unknown}): the "
                    "estimate is for an unsharded process, so this is a warning")
    return status, message, details


def hint(plan, est, backend: str | None = None) -> str:
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


def colocate_kv_room(ctx, plan, training: list[dict]) -> tuple[str, str, dict[str, Any]] | None:
    """vLLM colocated (TRL's `vllm_mode: colocate`): whether its share of the GPU (vllm_gpu_memory_utilization x the
    GPU's total memory) holds the policy's weights and the KV cache of one sequence of the engine's max_model_len,
    which vLLM checks at start-up ("To serve at least one request with the models's max seq len (N), (X GiB KV cache
    is needed, which is larger than the available KV cache memory (Y GiB)"). TRL passes `vllm_max_model_length` as
    max_model_len; unset, vLLM takes the model's max_position_embeddings (131,072 for Llama 3.1). Counted beside it:
    the weights and the floor of vLLM's profiling pass (`_profiling_floor`); its non-torch memory and CUDA graphs take
    more, so a fail is certain, never a guess.
    ('fail', message, details), or None when it holds (or cannot be judged)."""
    share = plan.vllm_gpu_memory_utilization
    if not share or not training or not plan.num_layers or not plan.kv_dim or "vllm_mode" not in settings(ctx).fields:
        return None  # (TRL before 0.18 has no colocated vLLM: its engine runs on a GPU of its own)
    tp = max(1, int(config_value(ctx, "vllm_tensor_parallel_size", 1) or 1))
    model_len, whence = _engine_length(ctx)
    if not model_len:
        return None
    weight_bytes = 2 if plan.param_bytes <= 2 else 4  # vLLM loads the checkpoint's own dtype ("auto")
    kv_per_token = 2 * plan.num_layers * plan.kv_dim * weight_bytes / tp
    weights = plan.policy_params * weight_bytes / tp
    total = min(g.get("memory_total_bytes", g["memory_total_mib"] * 2**20) for g in training)
    profiling, profiling_how = _profiling_floor(ctx, plan, weight_bytes, tp)
    room = share * total - weights - profiling
    needed = model_len * kv_per_token
    details = {"vLLM colocate KV cache": (
        f"{share:g} x {gib(total)} GiB = {gib(share * total)} GiB for vLLM; the weights take {gib(weights)} GiB "
        f"({plan.policy_params:,} parameters x {weight_bytes} bytes / tensor parallel {tp}){profiling_how}; one "
        f"sequence of max_model_len {model_len:,} ({whence}) needs {gib(needed)} GiB of KV cache ({plan.num_layers} "
        f"layers x 2 x {plan.kv_dim} x {weight_bytes} bytes / {tp} a token)")}
    if room >= needed:
        return None
    if share * total <= weights:
        what = f"its share ({gib(share * total)} GiB) does not even hold the weights ({gib(weights)} GiB)"
    elif room <= 0:
        what = (f"its share ({gib(share * total)} GiB) holds the weights ({gib(weights)} GiB) but not also the "
                f"activations of vLLM's profiling pass (at least {gib(profiling)} GiB)")
    else:
        what = (f"at most {gib(room)} GiB is left for the KV cache once the weights and vLLM's profiling pass are "
                f"counted (less still: its non-torch memory and CUDA graphs), below the {gib(needed)} GiB one "
                f"sequence of max_model_len {model_len:,} needs")
    fitting = int(room / kv_per_token) if room > 0 else 0
    fix = ("set vllm_max_model_length to the longest prompt + max_completion_length" +
           (f" (at most ~{fitting:,} fits)" if fitting else "") + ", or raise vllm_gpu_memory_utilization")
    return "fail", (f"vLLM colocated cannot start: {what}; vLLM stops at start-up (\"To serve at least one request "
                    f"with the models's max seq len ({model_len}) ... KV cache is needed, which is larger than the "
                    f"available KV cache memory\"); {fix}"), details


def _profiling_floor(ctx, plan, act_bytes: int, tp: int) -> tuple[float, str]:
    """(bytes, words) of the least vLLM's start-up profiling pass holds beside the weights before it sizes the KV
    cache: a forward of max_num_batched_tokens dummy tokens (the value the installed TRL passes its colocated engine,
    read from its source), whose MLP holds two intermediate-sized activations of every token at once (a gated MLP's
    gate and up projections; a plain one's input and output of the activation). Attention, logits, the sampler, the
    allocator's slack and non-torch memory come on top: this is a floor, so a fail stays certain. (0, "") where the
    release passes no literal or the model's MLP width is not known."""
    from trl_doctor.facts.trl.installed import vllm_code_int

    tokens = vllm_code_int(ctx.trainer, "max_num_batched_tokens")
    if not tokens or not plan.intermediate_size:
        return 0.0, ""
    floor = tokens * 2 * plan.intermediate_size * act_bytes / tp
    return floor, (f"; its profiling pass at least {gib(floor)} GiB ({tokens:,} batched tokens, as the installed TRL "
                   f"passes max_num_batched_tokens, x 2 x intermediate {plan.intermediate_size:,} x {act_bytes} bytes "
                   f"/ {tp})")


def _engine_length(ctx) -> tuple[int | None, str]:
    """The max_model_len the installed TRL gives its colocated engine, read from its source: `vllm_max_model_length`
    where its vLLM code passes that field (unset: vLLM takes the model's positions); before (0.18-0.26),
    max_prompt_length + max_completion_length when both are set, else the model's positions."""
    from trl_doctor.facts.trl.installed import trainer_mentions, vllm_code_mentions

    positions = (_max_positions(ctx), "the model's max_position_embeddings")
    if vllm_code_mentions(ctx.trainer, "vllm_max_model_length"):
        asked = config_value(ctx, "vllm_max_model_length", None)
        if isinstance(asked, int) and asked > 0:
            return asked, "vllm_max_model_length"
        return positions[0], positions[1] + " (vllm_max_model_length is unset)"
    if trainer_mentions(ctx.trainer, "max_model_len = self.max_prompt_length + self.max_completion_length"):
        prompt, completion = config_value(ctx, "max_prompt_length", None), config_value(ctx, "max_completion_length", None)
        if isinstance(prompt, int) and isinstance(completion, int):
            return prompt + completion, "max_prompt_length + max_completion_length, as the installed TRL passes it"
        return positions[0], positions[1] + " (max_prompt_length is unset)"
    return None, "a release whose engine length is not read here"


def _max_positions(ctx) -> int | None:
    """The model's max_position_embeddings (its text model's, for a vision-language model), None when unknown."""
    try:
        cfg = ctx.model_config
    except Exception:  # Unavailable, or a config transformers cannot read: no length to judge
        return None
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    value = getattr(text, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None
