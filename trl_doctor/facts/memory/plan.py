"""The job's memory plan, read from the context: model dimensions and parameter counts (meta-device model),
LoRA adapters, reward and reference models, the logits path the installed TRL takes, and the settings the
trainer resolves. The arithmetic over a plan lives in `trl_doctor.facts.memory.estimate`; rules reach it through
here."""

from __future__ import annotations

import re
from typing import Any, Mapping

from trl_doctor.facts.memory.estimate import (  # noqa: F401
    CUDA_CONTEXT_BYTES, DEFAULT_PROMPT_LENGTH, GiB, MiB, QUANT_BYTES, Component, Estimate, Plan, estimate,
    optimizer_state_bytes, peak_estimate,
)
from trl_doctor.facts.launch.settings import (  # noqa: F401
    _MISSING, DTYPE_BYTES, LOCAL_HOSTS, _field_default, config_value, model_init_kwargs, policy_dtype, precision,
    settings,
)

# -- filling a Plan from a check context ----------------------------------------------------------------

def _text_config(model_config):
    return model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config


def _dims(model_config, meta_model) -> dict[str, int]:
    t = _text_config(model_config)
    hidden = int(getattr(t, "hidden_size", 0) or getattr(t, "n_embd", 0) or 0)
    heads = int(getattr(t, "num_attention_heads", 0) or getattr(t, "n_head", 0) or 1)
    kv_heads = int(getattr(t, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(t, "head_dim", None) or (hidden // heads if heads else 0))
    inter = getattr(t, "intermediate_size", None) or getattr(t, "n_inner", None) or 4 * hidden
    layers = int(getattr(t, "num_hidden_layers", 0) or getattr(t, "n_layer", 0) or 0)
    vocab = int(getattr(t, "vocab_size", 0) or 0)
    out = meta_model.get_output_embeddings() if hasattr(meta_model, "get_output_embeddings") else None
    weight = getattr(out, "weight", None)
    if weight is not None and weight.dim() == 2:
        vocab = int(weight.shape[0])
    return {"hidden_size": hidden, "num_heads": heads, "kv_dim": kv_heads * head_dim,
            "intermediate_size": int(inter), "num_layers": layers, "vocab_size": vocab}


def count_params(model) -> int:
    """Parameters of a (meta-device) model, tied weights counted once."""
    return sum(p.numel() for p in model.parameters())


def lora_adapter_params(model, r: int, targets: Any, use_dora: bool = False) -> tuple[int, list[str]]:
    """Parameters LoRA adds: r × (in + out) for each targeted linear (+ out for DoRA's magnitude), and the
    module names matched. `targets` as PEFT takes them: a list of name suffixes, a regex string, 'all-linear'."""
    linears = _linear_modules(model)
    if targets == "all-linear" or targets == ["all-linear"]:
        out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        chosen = [(n, i, o) for n, m, i, o in linears if m is not out_emb]
    elif isinstance(targets, str):
        chosen = [(n, i, o) for n, _, i, o in linears if re.fullmatch(targets, n)]
    else:
        wanted = list(targets or [])
        chosen = [(n, i, o) for n, _, i, o in linears if any(n == t or n.endswith("." + t) for t in wanted)]
    total = sum(r * (i + o) + (o if use_dora else 0) for _, i, o in chosen)
    return total, [n for n, _, _ in chosen]


def _linear_modules(model) -> list[tuple[str, Any, int, int]]:
    import torch

    found = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            found.append((name, module, module.in_features, module.out_features))
        elif type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:  # GPT-2's linear
            found.append((name, module, module.weight.shape[0], module.weight.shape[1]))
    return found


def _peft_default_targets(model_type: str) -> tuple[Any, str]:
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as mapping
    except Exception:
        return ["q_proj", "v_proj"], "peft is not importable here: assumed PEFT's usual default q_proj, v_proj"
    found = mapping.get(model_type)
    if found is None:
        return ["q_proj", "v_proj"], f"PEFT has no default target modules for {model_type!r}: assumed q_proj, v_proj"
    return list(found), f"PEFT's default target modules for {model_type}: {', '.join(found)}"


def quantization(ctx) -> tuple[str, str] | None:
    """("4bit" or "8bit", where it was read) when the policy loads quantized: TRL's `load_in_4bit` / `load_in_8bit`
    keys, a `quantization_config` in `model_init_kwargs` (a recipe's, or what the script passed to from_pretrained or
    to the trainer), or the checkpoint's own config.json `quantization_config` (a pre-quantized model); else None."""
    kind: str | None
    for key, kind in (("load_in_4bit", "4bit"), ("load_in_8bit", "8bit")):
        if config_value(ctx, key, False):
            return kind, f"{key}: true"
    # the trainer's config, then the check's own keys (a launch command adds what the script gave from_pretrained or
    # the trainer's quantization_config argument there)
    for init in (config_value(ctx, "model_init_kwargs", None), ctx.config.raw.get("model_init_kwargs")):
        if not isinstance(init, dict):
            continue
        for key, kind in (("load_in_4bit", "4bit"), ("load_in_8bit", "8bit")):
            if init.get(key) is True:
                return kind, f"model_init_kwargs.{key}"
        kind = _quant_kind(init.get("quantization_config"))
        if kind is not None:
            return kind, "model_init_kwargs.quantization_config"
    kind = _quant_kind(getattr(ctx.model_config, "quantization_config", None))
    if kind is not None:
        return kind, "the checkpoint's config.json quantization_config (pre-quantized)"
    return None


def _quant_kind(quant: Any) -> str | None:
    """4bit / 8bit for a bitsandbytes (or GPTQ / AWQ) quantization config, as a dict or an object."""
    if quant is None:
        return None
    if not isinstance(quant, dict):
        to_dict = getattr(quant, "to_dict", None)
        quant = to_dict() if callable(to_dict) else vars(quant) if hasattr(quant, "__dict__") else {}
    if quant.get("load_in_4bit") is True:
        return "4bit"
    if quant.get("load_in_8bit") is True:
        return "8bit"
    bits = quant.get("bits") or quant.get("w_bit")
    if bits in (4, 8) and str(quant.get("quant_method", "")).lower() in ("gptq", "awq", "quantmethod.gptq", "quantmethod.awq"):
        return f"{bits}bit"
    return None


def _quantized_linear_params(model) -> int:
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return sum(m.weight.numel() for _, m, _, _ in _linear_modules(model) if m is not out_emb)


def reward_model_refs(ctx) -> list[tuple[str, Any]]:
    """(config key, local folder) of every reward / value model the config loads besides the policy."""
    from pathlib import Path

    from trl_doctor.context.config import resolve_artifact

    cfg = ctx.config
    refs: list[tuple[str, Any]] = []
    keys = ["reward_model_name_or_path", "reward_model_path"]
    for key in keys:
        ref = cfg.get(key)
        if isinstance(ref, str) and ref:
            refs.append((key, resolve_artifact(ref, cfg.base_dir, str(cfg.path), key, need="config.json").path))
    for name in cfg.reward_funcs:  # TRL also takes a reward model's folder or hub id in reward_funcs
        folder = Path(name).expanduser()
        folder = folder if folder.is_absolute() else cfg.base_dir / folder
        if (folder / "config.json").is_file():
            refs.append(("reward_funcs", folder.resolve()))
    return refs


def seq_classifier_params(ctx, folder) -> int:
    """Exact parameters of the 1-label sequence classifier TRL builds from `folder`, on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from trl_doctor.errors import InputError

    trc = ctx.options.trust_remote_code
    try:
        mcfg = AutoConfig.from_pretrained(str(folder), trust_remote_code=trc, local_files_only=True, num_labels=1)
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(mcfg, trust_remote_code=trc)
    except Exception as exc:
        raise InputError(f"{folder / 'config.json'}: cannot build it as a sequence classifier: "
                         f"{' '.join(str(exc).split())[:300]}") from None
    return count_params(model)


def logits_path(ctx, model) -> dict:
    """How the installed trainer gets log-probs (`trl.logits_reading`): a fused, tiled LM head (TRL 1.x:
    `fused_lm_head=True`, no logits tensor), or logits for the completion only (when the model's forward takes
    the keyword the trainer passes), or logits for the whole sequence (trl#2770)."""
    import inspect

    from trl_doctor.facts.trl.installed import logits_reading

    reading = logits_reading(ctx.trainer)
    if reading.fused:
        tile = reading.tile
        return {"fused": True, "keeps": True, "tile": tile,
                "words": f"{reading.source} scores completions through TRL's fused LM head, in {tile[0]} × {tile[1]} tiles"}
    kwarg = reading.keep_kwarg
    accepted: Mapping[str, Any]
    try:
        accepted = inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):
        accepted = {}
    keeps = kwarg is not None and kwarg in accepted
    if keeps:
        words = f"the trainer passes {kwarg} and {type(model).__name__}.forward takes it: logits for the completion only"
    elif kwarg:
        words = (f"the trainer passes {kwarg} but {type(model).__name__}.forward does not take it: logits for the whole "
                 "sequence (see logits-contract)")
    else:
        words = "logits for the whole sequence"
    return {"fused": False, "keeps": keeps, "tile": (4096, 32768), "words": words}


def plan_from_context(ctx, meta_model=None) -> Plan:
    """A Plan for the config in `ctx`, with how each number was read in `notes`."""
    model = ctx.meta_model if meta_model is None else meta_model
    mcfg = ctx.model_config
    raw = ctx.config.raw
    notes: list[str] = []
    labels: list[tuple[str, Any]] = []

    params = count_params(model)
    resolved = settings(ctx)
    dtype, dtype_from = resolved.policy_dtype, resolved.policy_dtype_from
    bf16, fp16 = resolved.bf16, resolved.fp16
    labels += [("policy parameters", f"{params:,} (meta-device model, exact)"),
               ("policy dtype", f"{dtype} ({dtype_from})"), ("bf16", bf16), ("fp16", fp16)]
    param_bytes = DTYPE_BYTES[dtype]

    quantized, qbytes = 0, 0.0
    found = quantization(ctx)
    if found is not None:
        kind, source = found
        quantized, qbytes = _quantized_linear_params(model), QUANT_BYTES[kind]
        notes.append(f"{kind} quantization ({source}): the linear layers' {quantized:,} weights at {qbytes:g} bytes "
                     "(with block scales); embeddings, norms and the output layer at the load dtype")
        labels.append(("quantization", f"{kind} ({source})"))

    peft = 0
    use_peft = resolved.use_peft
    if use_peft:
        r = int(config_value(ctx, "lora_r", 16) or 16)
        targets = raw.get("lora_target_modules", _field_default(ctx.trainer, "lora_target_modules"))
        if targets is _MISSING or targets is None:
            targets, why = _peft_default_targets(getattr(mcfg, "model_type", ""))
            notes.append(why)
        peft, names = lora_adapter_params(model, r, targets, bool(config_value(ctx, "use_dora", False)))
        saved = config_value(ctx, "lora_modules_to_save", None) or []
        if isinstance(saved, str):
            saved = [saved]
        for name, module in model.named_modules():
            if any(name == s or name.endswith("." + s) for s in saved):
                peft += sum(p.numel() for p in module.parameters())
        labels += [("PEFT", f"LoRA r={r} on {len(names)} linear layers: {peft:,} trainable parameters")]
        notes.append("PEFT: LoRA adapters train in fp32 (PEFT's autocast_adapter_dtype); the base stays frozen")

    beta = config_value(ctx, "beta", 0.0)
    beta = 0.0 if beta is None else float(beta)
    reference = beta != 0.0 and not use_peft
    labels.append(("beta", beta))
    if beta != 0.0 and use_peft:
        notes.append("beta != 0 with PEFT: the reference is the base model with the adapter disabled (no copy)")
    elif beta == 0.0:
        notes.append("beta = 0: no reference model is loaded")
    if ctx.trainer == "ppo":
        reference = True  # PPO always holds a reference policy
        notes.append("PPO holds a reference copy of the policy")

    reward, value = [], 0
    for key, folder in reward_model_refs(ctx):
        n = seq_classifier_params(ctx, folder)
        reward.append(n)
        labels.append((f"reward model ({key})", f"{folder}: {n:,} parameters"))
    vref = ctx.config.get("value_model_path")
    if ctx.trainer == "ppo" and isinstance(vref, str) and vref:
        from trl_doctor.context.config import resolve_artifact

        folder = resolve_artifact(vref, ctx.config.base_dir, str(ctx.config.path), "value_model_path", need="config.json").path
        value = seq_classifier_params(ctx, folder)
        labels.append(("value model", f"{folder}: {value:,} parameters (trained)"))

    optim = config_value(ctx, "optim", "adamw_torch")
    optimizer = str(getattr(optim, "value", optim))  # TrainingArguments holds an OptimizerNames enum
    batch = int(resolved.per_device_train_batch_size or 8)
    completion = resolved.max_completion_length  # PPO's response_length
    if completion is None:
        completion = 256
        notes.append("no max_completion_length: assumed 256 completion tokens")
    prompt, how = prompt_tokens(ctx, resolved.max_prompt_length)
    if how:
        notes.append(how if how.startswith("no max_prompt_length") else f"prompt tokens: {how}")
    completion = int(completion)
    seq = prompt + completion
    dims = _dims(mcfg, model)
    head = logits_path(ctx, model)
    if head["fused"]:
        positions = completion
    else:
        positions = completion + 1 if head["keeps"] else seq

    gc = resolved.gradient_checkpointing
    mixed = bf16 or fp16 or param_bytes == 2
    act_bytes = 2.0 if mixed else 4.0
    attn = resolved.model_init_kwargs.get("attn_implementation") or raw.get("attn_implementation")
    use_vllm = resolved.use_vllm
    mode = resolved.vllm_mode if use_vllm else None
    share = 0.0
    if use_vllm and mode == "colocate":
        share = float(config_value(ctx, "vllm_gpu_memory_utilization", 0.3) or 0.0)
    gen = 0
    if not use_vllm:
        steps = config_value(ctx, "steps_per_generation", None) or resolved.gradient_accumulation_steps or 1
        gen = batch * int(steps)
    labels += [("optimizer", optimizer), ("per_device_train_batch_size", batch),
               ("tokens per sequence", f"{prompt} prompt + {completion} completion"),
               ("log-probs", head["words"]),
               ("gradient_checkpointing", gc), ("use_vllm", use_vllm)]
    if use_vllm:
        labels.append(("vllm_mode", mode or "a separate GPU (TRL < 0.16)"))
    if gen:
        labels.append(("sequences generated at once", gen))
    notes += [  # the report's words, unchanged by the move to facts/memory/ (the snapshots hold them)
        "one training process per GPU, nothing sharded (DeepSpeed ZeRO or FSDP, where the launch sets them, divide "
        "this afterwards: facts.memory.sharded)",
        "weights, gradients and AdamW states in the trained parameters' dtype; no fp32 master copy (the HF Trainer "
        "keeps none; DeepSpeed's bf16 optimizer would add one)",
        "activations: 6·hidden + 2·kv + 4·intermediate values per token and layer, + 4·hidden in 16-bit for the "
        "RMSNorms' fp32 copies (Llama-style decoder with SDPA or flash attention), layer inputs only with gradient "
        "checkpointing; allocator fragmentation not counted",
    ]
    vision = _vision_tower(ctx, mcfg, use_peft, notes, labels)
    return Plan(
        policy_params=params, param_bytes=param_bytes, quantized_params=quantized, quantized_bytes=qbytes,
        peft_params=peft, reference=reference, reward_params=tuple(reward), reward_bytes=param_bytes,
        value_params=value, optimizer=optimizer, batch_size=batch, seq_len=seq, logits_positions=positions,
        fused_lm_head=head["fused"], logits_tile=head["tile"],
        activation_bytes=act_bytes, logits_bytes=4.0 if (bf16 or fp16) else float(param_bytes),
        gradient_checkpointing=gc, eager_attention=attn == "eager",
        generation_batch=gen, vllm_gpu_memory_utilization=share, overhead_bytes=CUDA_CONTEXT_BYTES,
        gradient_accumulation_steps=int(resolved.gradient_accumulation_steps or 1),
        notes=tuple(notes), labels=tuple(labels), **dims, **vision,
    )


def prompt_tokens(ctx, cap) -> tuple[int, str | None]:
    """(tokens, how) of the longest prompt one sequence holds: the dataset's longest prompt as the installed trainer
    renders it (a batch is padded to its longest), truncated at `cap` (`max_prompt_length`) when one is set.
    Measured on every row it is a bound; on a sample it is the sample's longest, said so. Where the prompts cannot be
    measured here (no `prompt` column, no dataset, a tokenizer not loadable, rows that fail to render): the cap, else
    DEFAULT_PROMPT_LENGTH. `how` is None where the cap decides. Shared by the memory estimate and logits-contract.
    (An H100 run, docs/gpu-verdicts.json: TRL 0.15's launch with 36-token prompts was estimated at its 512-token
    `max_prompt_length`, 21% over the measured peak.)"""
    from trl_doctor.errors import InputError, Unavailable
    from trl_doctor.facts.inputs.chat import prompt_lengths
    from trl_doctor.vocabulary import OTHER_TRAINER

    measured: dict = {}
    if ctx.trainer != OTHER_TRAINER:  # TRL's own renderings (another trainer's: unknown)
        try:  # the estimate never stops a check for its own sake: a dataset or tokenizer it cannot read leaves the cap
            measured = prompt_lengths(ctx)
        except (InputError, Unavailable, ImportError, OSError, ValueError, AttributeError):
            measured = {}
    longest = measured.get("max")
    if longest and not measured.get("errors"):
        if cap is not None and int(cap) <= longest:
            return int(cap), None
        if len(measured["indices"]) == measured["total"]:
            return int(longest), f"the dataset's longest prompt, {longest} tokens ({measured['measured']})"
        return int(longest), (f"the longest prompt of {measured['measured']}, {longest} tokens; rows not measured "
                              "may be longer")
    if cap is not None:
        return int(cap), None
    return DEFAULT_PROMPT_LENGTH, (f"no max_prompt_length (TRL >= 0.28 does not truncate prompts): assumed "
                                   f"{DEFAULT_PROMPT_LENGTH} prompt tokens; long prompts need more")


def _vision_tower(ctx, mcfg, use_peft: bool, notes: list, labels: list) -> dict:
    """The Plan's vision-tower fields for a vision-language model trained on images: the most image patches one
    sequence of the measured rows holds (their tokens as the processor counts them, times the merge of patches into
    tokens), the tower's width, blocks and MLP width. {} for a text model, a dataset without images, images that
    could not be counted here (said in the notes), or a LoRA run (the frozen tower keeps no activations)."""
    from trl_doctor.context.twin import vision_language
    from trl_doctor.errors import Unavailable
    from trl_doctor.facts.inputs.chat import prompt_lengths
    from trl_doctor.facts.inputs.vision import image_columns

    vision = getattr(mcfg, "vision_config", None)
    if vision_language(mcfg) is None or vision is None:
        return {}
    try:
        if not image_columns(ctx.dataset):
            return {}
        images = prompt_lengths(ctx).get("images")
    except (Unavailable, ImportError, OSError, ValueError) as exc:  # no dataset here: left out, said so (bad input
        # still stops the check with its one line: InputError is not caught)
        notes.append(f"vision tower: activations not counted (the dataset's images could not be read: {exc})")
        return {}
    if not images:
        return {}
    if not images["counted"]:
        notes.append(f"vision tower: activations not counted ({images['why']})")
        return {}
    if use_peft:
        notes.append("vision tower: frozen under LoRA, so it keeps no activations for backward")
        return {}
    merge = int(getattr(vision, "spatial_merge_size", 1) or 1)
    width: Any = getattr(vision, "embed_dim", None) or getattr(vision, "hidden_size", 0)
    layers: Any = getattr(vision, "depth", None) or getattr(vision, "num_hidden_layers", 0)
    inner: Any = getattr(vision, "intermediate_size", None) or int(width * float(getattr(vision, "mlp_ratio", 4) or 4))
    patches = int(images["max_per_row"]) * merge * merge
    labels.append(("image patches per sequence", f"{patches:,} (the measured rows' most image tokens, "
                                                  f"{images['max_per_row']:,}, × {merge}² merged patches each)"))
    return {"vision_patches": patches, "vision_hidden": int(width), "vision_layers": int(layers),
            "vision_intermediate": int(inner)}


_PARAMETERS = ("policy weights", "LoRA adapters", "value model")  # what ZeRO-3 / FSDP FULL_SHARD partitions with the model
_FROZEN_COPIES = ("reference model", "reward models")  # TRL prepares these with the same sharding under ZeRO-3 / FSDP


def sharded(est: Estimate, plan: Plan, sharding, processes: int, gather_for_generation: bool = True) -> tuple[Estimate, str]:
    """`est` (one unsharded process) as one of `processes` processes under `sharding` (facts.launch.launcher.Sharding):
    DeepSpeed ZeRO-1 divides the optimizer states by the process count, ZeRO-2 the gradients too, ZeRO-3 the
    parameters too (the policy, its adapters, a value model, and the reference and reward models TRL prepares the
    same way); offload_optimizer / offload_param to the CPU take them off the GPU. FSDP FULL_SHARD (and
    HYBRID_SHARD, within one machine) is ZeRO-3, SHARD_GRAD_OP ZeRO-2, NO_SHARD nothing; its CPU offload takes
    parameters, gradients and optimizer states off the GPU. `gather_for_generation` is TRL's
    `ds3_gather_for_generation`: when it is off, ZeRO-3 generates with the parameters still sharded, gathering
    them a layer at a time, so the whole policy is never gathered. Returns the new estimate and the per-GPU words
    ("DeepSpeed ZeRO-3 over 4 processes: parameters 3.7 GiB/GPU, ...")."""
    import dataclasses

    n = max(1, int(processes))
    if sharding is None or not sharding.modelled:
        return est, ""
    s = sharding
    comps = []
    opt_label = _optimizer_label_of(est)
    new: float
    for c in est.components:
        new, how = c.bytes, c.how
        if c.name == opt_label and s.backend == "deepspeed" and plan.param_bytes == 2 and not plan.peft_params \
                and c.name == "AdamW states":
            # DeepSpeed's ZeRO optimizer keeps an fp32 master copy and fp32 Adam states of 16-bit trained weights
            new = c.bytes * 3
            how = f"{plan.trainable_params:,} trained parameters × 12 bytes (DeepSpeed: fp32 master copy + two fp32 Adam states)"
        if c.name == opt_label and s.shards_optimizer:
            new, how = (0, how + "; offloaded to the CPU") if s.offload_optimizer else (new / n, how + f"; ÷ {n} processes")
        elif c.name == "gradients" and s.shards_gradients:
            off = s.backend == "fsdp" and s.offload_parameters
            new, how = (0, how + "; offloaded to the CPU") if off else (new / n, how + f"; ÷ {n} processes")
        elif c.name in _PARAMETERS and s.shards_parameters:
            new, how = (0, how + "; offloaded to the CPU") if s.offload_parameters else (new / n, how + f"; ÷ {n} processes")
        elif c.name in _FROZEN_COPIES and s.shards_parameters:
            new, how = new / n, how + f"; ÷ {n} processes (TRL shards it like the policy)"
        comps.append(dataclasses.replace(c, bytes=int(round(new)), how=how))
    if s.shards_parameters and not s.offload_parameters and n > 1:
        weights = est.component("policy weights").bytes
        layers = max(1, plan.num_layers)
        comps.append(Component("gathered layers", int(round(2 * weights / layers)), "training",
                               f"the layer computed and the one prefetched, gathered whole: 2 × {weights / GiB:.1f} GiB "
                               f"/ {layers} layers"))
        if plan.generation_batch:
            comps.append(_generation_gather(weights, layers, n, s.backend == "deepspeed" and not gather_for_generation))
    notes = tuple(x for x in est.assumptions if not x.startswith("one training process per GPU, nothing sharded"))
    notes += (f"{s.words} ({s.configured_by}) over {n} process{'es' if n != 1 else ''}: what it partitions is divided "
              "by the process count; communication buckets are not counted",)
    # DeepSpeed keeps its gradient partition in a persistent buffer: it outlives the step's activations
    out = peak_estimate(comps, list(notes), plan.gradient_accumulation_steps > 1 or s.backend == "deepspeed")

    def per_gpu(names) -> float:
        return sum(c.bytes for c in comps if c.name in names) / GiB

    parts = [f"parameters {per_gpu(_PARAMETERS):.1f} GiB/GPU", f"gradients {per_gpu(('gradients',)):.1f} GiB/GPU",
             f"{opt_label} {per_gpu((opt_label,)):.1f} GiB/GPU"]
    return out, f"{s.words} over {n} process{'es' if n != 1 else ''}: " + ", ".join(parts)


def _generation_gather(weights: int, layers: int, n: int, layer_by_layer: bool) -> Component:
    """What generating without vLLM gathers under sharded parameters: the whole policy, or (ZeRO-3 with
    ds3_gather_for_generation: false) one layer and the one prefetched, as training does."""
    if layer_by_layer:
        return Component("layers gathered for generation", int(round(2 * weights / layers)), "generation",
                         "ds3_gather_for_generation: false: ZeRO-3 generates with sharded parameters, gathering a "
                         f"layer and prefetching the next: 2 × {weights / GiB:.1f} GiB / {layers} layers")
    return Component("policy gathered for generation", int(round(weights * (n - 1) / n)), "generation",
                     "the trainer gathers the whole policy to generate without vLLM "
                     "(ds3_gather_for_generation / FSDP's full parameters)")


def _optimizer_label_of(est: Estimate) -> str:
    return next((c.name for c in est.components if c.name in ("AdamW states", "optimizer states")), "optimizer states")


def from_context(ctx, gpu_total_bytes: int | None = None) -> Estimate:
    """The estimate for the config in `ctx` on a GPU of `gpu_total_bytes` (which sizes vLLM's colocate share)."""
    return estimate(plan_from_context(ctx), gpu_total_bytes)


__all__ = ["Plan", "Component", "Estimate", "estimate", "plan_from_context", "from_context", "optimizer_state_bytes",
           "config_value", "precision", "policy_dtype", "lora_adapter_params", "count_params", "GiB", "MiB", "sharded",
           "CUDA_CONTEXT_BYTES"]
