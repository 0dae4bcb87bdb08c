"""The trainer run's parent side: decides whether the installed TRL can build the config's trainer at all,
builds the `Spec` (the miniature twin, or the real model on a GPU when one step fits, and the plan of the
real-model sample: `sample_plan`), runs it through the worker side in this process, and turns what came back into
a `RunResult` the rules read. One run per check,
cached on the context: the logits probe, the termination probe and the smoke step share it.

The printing process supervises the run through `ctx.emit` events: "trainer-run" (the run starts: the smoke
timeout starts counting), "trainer-stage" (each stage, for progress and for a failure's last stage) and
"trainer-run-end". When
it had to stop a run that hung or died, it hands the outcome to a fresh worker as `ctx.options.trainer_run`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from trl_doctor.cache import fact
from trl_doctor.protocol import TrainerRun, TrainerRunEnd, TrainerStage

from trl_doctor.facts.trainer_run.launch_only import launch_only, launch_only_model_kwargs
from trl_doctor.facts.trainer_run.lent import lendable
from trl_doctor.facts.trainer_run.protocol import RunResult, Spec
from trl_doctor.facts.trl.trainer_config import trainer_config, trainer_config_info

ROWS = 4  # prompts handed to the worker side: enough for one generation batch and a spare
FORCE_AFTER = 3  # the termination probe forces the end-of-turn token as the 4th completion token
MAX_COMPLETION = 8
AGENT_KEYS = ("tools", "environment_factory", "rollout_func")  # GRPOTrainer's, passed to the step's trainer as given

LAST_PPO_RELEASE = "1.12.0"  # trl.experimental.ppo.PPOTrainer's last release (see the value-model rule)


def trainer_gap(ctx) -> str | None:
    """Why the installed TRL has no trainer for this config (with the version to pin), or None."""
    from trl_doctor.facts.trl.installed import trainer_class

    trl_version = ctx.version("trl")
    if trl_version is None:
        return "trl is not installed"
    cls = trainer_class(ctx.trainer)
    if cls is None:
        if ctx.trainer == "ppo":
            return (f"trl {trl_version} has no PPO trainer (it was removed in trl 1.13.0): pin trl=={LAST_PPO_RELEASE}, "
                    "the last release with trl.experimental.ppo.PPOTrainer, or move to GRPO or RLOO")
        return f"trl {trl_version} has no {ctx.trainer.upper()} trainer"
    if ctx.trainer == "rloo" and _ppo_style_class(cls) and not ctx.config.get("reward_model_path"):
        return (f"trl {trl_version}'s RLOOTrainer is the PPO-style one (before trl 0.22): it scores with one "
                "`reward_model_path` classifier, not `reward_funcs`; pin trl>=0.22 for RLOO with reward functions")
    if ctx.trainer == "ppo" and not ctx.config.get("reward_model_path"):
        return None  # PPOTrainer then dies as it would in the job; the value-model rule explains
    if ctx.trainer != "ppo" and not _ppo_style_class(cls) and not ctx.config.reward_funcs \
            and not ctx.config.get("reward_model_name_or_path"):
        return ("the config names no `reward_funcs` and no `reward_model_name_or_path`: the trainer has nothing to "
                "score completions with")
    return None


def _ppo_style_class(cls) -> bool:
    import inspect

    return "reward_funcs" not in inspect.signature(cls.__init__).parameters


@fact
def trainer_run(ctx) -> RunResult:
    """The run's outcome (ok, failed, timeout, crashed). Raises Unavailable when the trainer cannot be built for
    a reason another rule reports (trainer_gap, or a missing tokenizer, config or dataset)."""
    from trl_doctor.errors import Unavailable

    handed = ctx.options.trainer_run
    if handed is not None:  # a previous worker's run hung or died: its outcome, from the supervisor
        return RunResult.from_json(handed)
    from trl_doctor.facts.trl.subclass import own_data_path

    own = own_data_path(ctx)
    if own:  # one step of TRL's own trainer would not be the framework's step
        raise Unavailable(f"{own}; run the framework's own one-step training to see its first step")
    gap = trainer_gap(ctx)
    if gap:
        raise Unavailable(gap)
    from trl_doctor.facts.trl.trainer_config import trainer_config

    trainer_config(ctx)
    for need in ("tokenizer", "model_config", "dataset"):
        ctx.need(need)
    spec = build_spec(ctx)
    ctx.emit(TrainerRun(spec.details(), ctx.options.smoke_timeout, spec.trainer))
    from trl_doctor.facts.trainer_run import execute as worker
    from trl_doctor.facts.trainer_run.heap import frozen_heap
    from trl_doctor.facts.trainer_run.lent import lent_tokenizer

    started = time.perf_counter()
    # the context's own tokenizer, not a second load of it (lent.py); the heap so far out of the run's collections
    with lent_tokenizer(ctx) as tokenizer, frozen_heap():
        ok, data = worker.execute(spec, on_stage=lambda s: ctx.emit(TrainerStage(s.name, s.elapsed_s)), tokenizer=tokenizer,
                                  processor=_lent_processor(ctx, spec))
    ctx.emit(TrainerRunEnd(ok))
    details = {**spec.details(), "wall_s": round(time.perf_counter() - started, 2)}
    if not ok:
        return RunResult("failed", details, spec=spec, error=data, last_stage=data.get("stage"))
    return RunResult("ok", details, spec=spec, result=data)


PRECISION_KEYS = ("bf16", "fp16")
REHEARSED = ("eval_strategy", "metric_for_best_model", "greater_is_better", "load_best_model_at_end", "save_strategy",
             "save_only_model", "save_total_limit", "push_to_hub", "hub_model_id", "output_dir")


def _rehearsal_settings(ctx, cfg) -> dict:
    """The job's own settings for its later phases (facts/trainer_run/rehearsal.py), as plain values, and the
    trackers it reports to (a launch's, though the capture turned them off in what its trainer was given)."""
    from trl_doctor.facts.launch.phases import report_to
    from trl_doctor.facts.rewards import register_live

    out: dict[str, Any] = {"report_to": report_to(ctx, keep_all=True)}
    live = getattr(ctx, "live", None)
    job_args = getattr(live, "args", None) if live is not None else None
    if out["report_to"] and (job_args is not None or cfg is not None):
        # the job's arguments as its trackers get them at train(): the script's own object where a launch built
        # one (a torch.dtype in model_init_kwargs stays one), else the config as TRL builds it from the file
        out["job_args"] = register_live(job_args if job_args is not None else cfg)
    for key in REHEARSED:
        value = getattr(cfg, key, None)
        value = getattr(value, "value", value)  # transformers' IntervalStrategy / SaveStrategy
        if isinstance(value, (str, int, float, bool)) or value is None:
            out[key] = value
    return out


def build_spec(ctx) -> Spec:
    from trl_doctor.facts.inputs.models import parameter_count

    from trl_doctor.facts.inputs.chat import completion_terminator

    info = trainer_config_info(ctx)
    raw = ctx.config.raw
    device = ctx.device
    tok = ctx.tokenizer
    rows, rows_path, processor_path = _rows(ctx)
    stop = completion_terminator(tok, rows)
    gen = ctx.generation_config
    gen_eos = gen.eos_token_id if gen is not None else None
    suppress = {tok.eos_token_id, stop["id"], *(gen_eos if isinstance(gen_eos, list) else [gen_eos])} - {None}
    cfg = trainer_config(ctx)
    # the precision the job asks for (TRL's own defaults included) is kept: a dtype the device cannot do
    # must fail here as it would in the job
    precision = {k: getattr(cfg, k) for k in PRECISION_KEYS if getattr(cfg, k, None)}
    overrides = {
        "output_dir": str(ctx.workdir / "smoke-output"),
        "max_steps": 1,
        "num_train_epochs": 1,
        # warm-up would make the one step's learning rate 0: no parameter could move, whatever the job's health
        "warmup_steps": 0,
        "warmup_ratio": 0.0,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "num_generations": 2,
        "generation_batch_size": None,
        "steps_per_generation": None,
        "num_iterations": 1,
        "max_completion_length": MAX_COMPLETION,
        "logging_steps": 1,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "push_to_hub": False,
        "log_completions": False,
        "use_vllm": False,
        "dataloader_num_workers": 0,
        # what only worker processes take goes with them: transformers refuses a prefetch factor without workers
        # (axolotl sets 256, oumi 32), torch persistent workers without any (issue 45)
        "dataloader_prefetch_factor": None,
        "dataloader_persistent_workers": False,
        "disable_tqdm": True,
        "model_init_kwargs": None,
        # PPO and the old RLOO: one rollout of 2 prompts, one PPO epoch, one mini-batch
        "total_episodes": 2,
        "num_ppo_epochs": 1,
        "num_mini_batches": 1,
        "local_rollout_forward_batch_size": 2,
        "response_length": MAX_COMPLETION,
        "num_sample_generations": 0,
        "rloo_k": 2,
    }
    reward_models = [_path(ctx, raw["reward_model_name_or_path"])] if raw.get("reward_model_name_or_path") else []
    model_path, label, twin, note = _model_choice(ctx)
    sample = sample_plan(ctx, twin)
    model_kwargs = None
    if twin and ctx.options.trust_remote_code and isinstance((ctx.read_json(ctx.model_file("config.json")) or {}).get("auto_map"), dict):
        # the twin of a remote-code model loads back with its code only when trusted, as the job must
        overrides["model_init_kwargs"] = {"trust_remote_code": True}
        overrides["trust_remote_code"] = True
        _copy_model_code(ctx.config.model.path, model_path)
    left_out_overrides, left_out = launch_only(raw, device)
    overrides.update(left_out_overrides)
    if not twin:  # the real model loads as the job loads it (dtype, attention); the twin in fp32
        model_kwargs = raw.get("model_init_kwargs") or {k: raw[k] for k in ("dtype", "torch_dtype", "attn_implementation")
                                                           if raw.get(k) is not None} or None
        model_kwargs, kwargs_left_out = launch_only_model_kwargs(model_kwargs, device)
        left_out += kwargs_left_out
        overrides["model_init_kwargs"] = model_kwargs
    return Spec(**{
        "trainer": ctx.trainer,
        "device": device,
        "model_path": model_path,
        "tokenizer_path": None if lendable(ctx) else _tokenizer_dir(ctx),
        "model_label": label,
        "model_note": note,
        "twin_aux": twin,
        "model_kwargs": model_kwargs or {},
        "work_dir": str(ctx.workdir),
        "precision": (", ".join(f"{k}={v}" for k, v in precision.items()) or "fp32")
                     + ("; tf32 off on this CPU (the launch machine's GPU decides)" if device == "cpu" and raw.get("tf32") else ""),
        "config": {k: raw[k] for k in info.passed_keys if k in raw},
        "raw": {k: v for k, v in raw.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
        "overrides": overrides,
        "left_out": left_out,
        "rows": rows,
        "rows_path": rows_path,
        "processor_path": processor_path,
        "columns": list(ctx.dataset.column_names),
        "reward_funcs": list(ctx.config.reward_funcs),
        "agent": {k: raw[k] for k in AGENT_KEYS if raw.get(k)},
        "peft": raw["peft_config"] if isinstance(raw.get("peft_config"), str) else None,
        "reward_models": reward_models,
        "reward_model_path": _path(ctx, raw["reward_model_path"]) if raw.get("reward_model_path") else None,
        "value_model_path": _path(ctx, raw["value_model_path"]) if raw.get("value_model_path") else None,
        "user_dir": str(ctx.config.base_dir),
        "train": bool(ctx.options.smoke),
        "rehearse": _rehearsal_settings(ctx, cfg) if ctx.options.smoke else {},
        "force_token_id": stop["id"],
        "force_token": stop["token"],
        "force_reason": stop["why"],
        "force_after": FORCE_AFTER,
        "suppress_ids": sorted(suppress),
        "twin_parameters": parameter_count(ctx.twin) if twin else None,
        "sample": sample,
        "user_code_timeout": float(ctx.options.user_code_timeout),
    })


def _rows(ctx) -> tuple[list, str | None, str | None]:
    """(the first rows as plain values, where they are saved with their images, the processor's folder). A
    vision-language model trained on images gets the rows as the trainer gets them, images included, through the
    model folder's processor, as TRL loads it; where that processor cannot load here the run is Unavailable,
    with why, rather than run on text the job never sees."""
    from trl_doctor.context.twin import vision_language
    from trl_doctor.facts.inputs.vision import image_columns, processor

    first = ctx.dataset.select(range(min(ROWS, len(ctx.dataset))))
    images = image_columns(first) if vision_language(ctx.model_config) else []
    if not images:
        return first.to_list(), None, None
    processor(ctx)  # Unavailable when it cannot load here; the run is lent this one (execute's `processor`)
    out = ctx.workdir / "smoke-rows"
    first.save_to_disk(str(out))
    return first.remove_columns(images).to_list(), str(out), str(ctx.config.model.path)


def _lent_processor(ctx, spec: Spec):
    """The context's processor for a run on images (not loaded a second time), else None."""
    if not spec.processor_path:
        return None
    from trl_doctor.facts.inputs.vision import processor

    return processor(ctx)


def _copy_model_code(source, twin_dir) -> None:
    """The model folder's own Python files beside its twin: transformers 5 saves a remote-code model with its code,
    transformers 4 does not, and the twin loads back from its folder."""
    import shutil
    from pathlib import Path

    for py in Path(source).glob("*.py"):
        target = Path(twin_dir) / py.name
        if not target.exists():
            shutil.copyfile(py, target)


def _path(ctx, ref: str) -> str:
    """A reward or value model reference as the worker side loads it: a folder relative to the config, or a cached hub id."""
    from trl_doctor.facts.inputs.models import resolve_artifact

    try:
        return str(resolve_artifact(ref, ctx.config.base_dir, str(ctx.config.path), "reward_model_path", "config.json").path)
    except Exception:
        return ref  # the worker side's loader then fails with the real error


def _tokenizer_dir(ctx) -> str:
    out = ctx.workdir / "tokenizer"
    if not out.is_dir():
        ctx.tokenizer.save_pretrained(str(out))
    return str(out)


def _model_choice(ctx) -> tuple[str, str, bool, str | None]:
    """(model path, label, is the twin, why) for the step: the real model on a GPU when it fits, else the twin."""
    from trl_doctor.facts.inputs.models import parameter_count

    arch = ctx.model_config.__class__.__name__.replace("Config", "")
    twin_label = f"miniature twin of {arch} ({parameter_count(ctx.twin) / 1e6:.2f}M parameters)"
    if ctx.device != "cuda":
        return str(ctx.twin_dir), twin_label, True, None
    fits, why = real_model_fits(ctx)
    if not fits:
        return str(ctx.twin_dir), twin_label, True, f"the twin, not the real model: {why}"
    real = parameter_count(ctx.meta_model)
    return str(ctx.config.model.path), f"the real model {ctx.config.model.ref} ({real / 1e9:.2f}B parameters)", False, why


FIT_MARGIN = 0.9  # the real model is used when its one-step estimate takes at most 90% of the free memory


def smoke_plan(ctx):
    """The memory plan of the smoke step itself with the real model: the config's model, precision, PEFT,
    reference and reward models, at the step's batch of 2 and completions of MAX_COMPLETION tokens, no vLLM."""
    from dataclasses import replace

    from trl_doctor.facts.memory.plan import plan_from_context

    plan = plan_from_context(ctx)
    completion = ctx.config.get("max_completion_length") or ctx.config.get("response_length") or 256
    prompt = max(1, plan.seq_len - int(completion))
    seq = prompt + MAX_COMPLETION
    positions = plan.logits_positions if plan.logits_positions is not None else plan.seq_len
    positions = seq if positions >= plan.seq_len else min(positions, MAX_COMPLETION + 1)
    return replace(plan, batch_size=2, seq_len=seq, logits_positions=positions, generation_batch=2,
                   vllm_gpu_memory_utilization=0.0, gradient_accumulation_steps=1)


def step_gpu(gpus: list[dict], visible: str | None) -> dict | None:
    """The GPU the step's process gets (CUDA's device 0: the first one CUDA_VISIBLE_DEVICES leaves)."""
    from trl_doctor.facts.launch.launcher import visible_gpus

    shown, _ = visible_gpus(gpus, visible)
    return shown[0] if shown else None


def has_safetensors(folder) -> bool:
    from pathlib import Path

    return any(Path(folder).glob("*.safetensors"))


def real_model_fits(ctx, gpu: dict | None = None) -> tuple[bool, str]:
    """Whether one smoke step of the real model fits in the free memory of the GPU it would run on, and why."""
    from trl_doctor.facts.memory.plan import GiB, estimate

    if not has_safetensors(ctx.config.model.path):
        return False, (f"{ctx.config.model.ref} has no .safetensors weights (the doctor loads no pickle files) or no "
                       "weights at all")
    if gpu is None:
        from trl_doctor.facts.launch.launcher import gpus

        found, why = gpus()
        gpu = step_gpu(found, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if gpu is None:
            return False, f"NVML reports no GPU to measure free memory on ({why or 'none visible'})"
    plan = smoke_plan(ctx)
    est = estimate(plan, gpu_total_bytes=gpu["memory_total_mib"] * 2**20)
    extra, extra_how = doctor_overhead(plan, ctx.meta_model)
    need = est.total_bytes + extra
    free = gpu["memory_free_mib"] * 2**20
    words = (f"one step needs ~{need / GiB:.1f} GiB ({est.summary()}, the doctor's own {extra / GiB:.1f}: "
             f"{extra_how}) and GPU {gpu['index']} ({gpu['name']}) has {free / GiB:.1f} GiB free")
    return need <= FIT_MARGIN * free, words


def doctor_overhead(plan, meta_model) -> tuple[int, str]:
    """(bytes, how) the doctor adds on the GPU to the step the estimate counts: the parameter fingerprints' scratch
    (trainer_run/fingerprint.py; the step's parameters are never copied), and the gradient-norm hook's fp32 copy of
    one gradient at a time at the optimizer step (worker._GradNorms: `.float()` of a 16-bit gradient), when the
    trained weights are 16-bit; the logits and termination probes' few positions are below a MiB."""
    from trl_doctor.facts.trainer_run.fingerprint import SCRATCH_BYTES

    parts = [(SCRATCH_BYTES, f"fingerprint scratch {SCRATCH_BYTES / 2**20:.0f} MiB")]
    if not plan.peft_params and plan.param_bytes == 2:  # LoRA adapters and fp32 weights have fp32 gradients already
        largest = max((p.numel() for p in meta_model.parameters()), default=0)
        parts.append((largest * 4, f"the fp32 copy of the largest gradient ({largest:,} values) for its norm"))
    return sum(b for b, _ in parts), ", ".join(h for _, h in parts)


def smoke_estimate_details(ctx) -> dict:
    """The step's memory estimate (and the free memory), shown beside an out-of-memory error."""
    from trl_doctor.facts.memory.plan import estimate

    est = estimate(smoke_plan(ctx))
    out = {"memory estimate (one smoke step, real model)": f"~{est.total_gib:.1f} GiB: {est.summary()}"}
    out.update({f"estimate: {k}": v for k, v in est.breakdown().items()})
    if ctx.device == "cuda":
        fits, words = real_model_fits(ctx)
        out["memory check"] = words
    return out


# -- the real-model sample (docs/coverage.md: C7, E5) --------------------------------------------------------------

SAMPLE_ON_GPU = 2  # prompts sampled by default where the step itself ran the real model on a GPU
CPU_MAX_PARAMETERS = 1.5e9  # beyond this, sampling on a CPU takes minutes per prompt: refused
CPU_BYTES_PER_S = 1e10  # memory bandwidth assumed for the CPU time estimate (each decoding step reads every weight)
CPU_FLOPS = 2e10  # arithmetic throughput assumed for it (2 FLOPs per parameter per token)
SAMPLE_SHARE = 0.5  # the sample may take at most this share of --smoke-timeout by the estimate
GENERATION_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "cache_implementation")


def sample_plan(ctx, twin: bool) -> dict:
    """What the worker needs to sample the REAL model after the step (the miniature twin has random weights: its
    completions say nothing about the real model's length or reward spread): {} when no sample is asked for,
    {"n": N, "refused": why} when one is asked for but cannot run here, else the prompts (rendered and tokenized as
    the installed trainer does), the trainer's sampling settings and the model to load."""
    asked = ctx.options.sample
    if asked == 0 or not ctx.options.smoke:
        return {}
    if asked is None:
        if ctx.device != "cuda" or twin:
            return {}
        n, why = SAMPLE_ON_GPU, "by default on the GPU, where the step ran the real model (--sample 0 turns it off)"
    else:
        n, why = asked, f"--sample {asked}"
    try:
        return _sample_plan(ctx, n, why)
    except Exception as exc:  # e.g. Unavailable: an input another rule reports; never this rule's error
        return {"n": n, "why": why, "refused": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}


def _sample_plan(ctx, n: int, why: str) -> dict:
    from trl_doctor.facts.inputs.chat import prompt_format, prompt_rendering, render_prompt, template_fence
    from trl_doctor.facts.inputs.models import parameter_count

    out: dict = {"n": n, "why": why, "model": ctx.config.model.ref, "device": ctx.device}
    cfg = trainer_config(ctx)
    if ctx.trainer == "ppo" or not hasattr(cfg, "num_generations"):
        return {**out, "refused": (f"the sample scores completions with reward functions the way GRPO and RLOO do; "
                                   f"{type(cfg).__name__} has no num_generations groups")}
    if not has_safetensors(ctx.config.model.path):
        return {**out, "refused": (f"{ctx.config.model.ref} has no .safetensors weights: the doctor loads no pickle "
                                   "(.bin/.pt) weights, which can run code when unpickled")}
    params = parameter_count(ctx.meta_model)
    groups = int(cfg.num_generations)
    cap = int(getattr(cfg, "max_completion_length", None) or 0)
    out.update(parameters=params, num_generations=groups, max_completion_length=cap)
    if cap < 1:
        return {**out, "refused": f"max_completion_length is {cap}"}
    if ctx.device == "cpu":  # before any prompt is rendered: a refusal costs nothing
        refused = _cpu_refusal(ctx, params, n * groups, cap, 0)
        if refused:
            return {**out, "refused": refused}
    rows = ctx.dataset.select(range(min(n, len(ctx.dataset)))).to_list()
    tok = ctx.tokenizer
    how = prompt_rendering(ctx)
    prompt_ids = []
    with template_fence(tok, f"rendering {len(rows)} prompts for the real-model sample"):
        for i, row in enumerate(rows):
            prompt = row.get("prompt")
            kind = prompt_format(prompt)
            if kind == "conversational":
                text = render_prompt(tok, prompt, how)
                prompt_ids.append(tok(text, add_special_tokens=False)["input_ids"])
            elif kind == "standard":
                prompt_ids.append(tok(prompt, add_special_tokens=how.plain_special_tokens)["input_ids"])
            else:
                return {**out, "refused": f"row {i}'s prompt is {kind} (see the dataset-schema rule)"}
    longest = max((len(p) for p in prompt_ids), default=0)
    out.update(rows=rows, prompt_ids=prompt_ids, conversational=bool(rows) and prompt_format(rows[0].get("prompt")) == "conversational")
    if ctx.device == "cpu":  # again with the prompts' real length
        refused = _cpu_refusal(ctx, params, len(rows) * groups, cap, longest)
        if refused:
            return {**out, "refused": refused}
    generation = {"max_new_tokens": cap, "do_sample": True, "pad_token_id": tok.pad_token_id,
                  "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
    generation.update({k: getattr(cfg, k) for k in GENERATION_KEYS if hasattr(cfg, k)})
    generation.update(getattr(cfg, "generation_kwargs", None) or {})
    raw = ctx.config.raw
    model_kwargs: dict[str, Any] = {}
    if ctx.device == "cuda":  # as the job loads it; on the CPU in fp32 (bf16 matmuls there are slow or missing)
        model_kwargs = raw.get("model_init_kwargs") or {k: raw[k] for k in ("dtype", "torch_dtype", "attn_implementation")
                                                           if raw.get(k) is not None}
    weights = getattr(cfg, "reward_weights", None)
    return {**out, "model_path": str(ctx.config.model.path), "tokenizer_path": _tokenizer_dir(ctx),
            "model_kwargs": dict(model_kwargs), "generation": generation, "seed": int(getattr(cfg, "seed", 42) or 0),
            "eos_token": tok.eos_token, "eos_token_id": tok.eos_token_id,
            "reward_weights": list(weights) if weights is not None else None,
            "reward_models": [str(r) for r in ([raw["reward_model_name_or_path"]] if raw.get("reward_model_name_or_path") else [])],
            "use_vllm": bool(getattr(cfg, "use_vllm", False))}


def _cpu_refusal(ctx, params: int, sequences: int, cap: int, prompt: int) -> str | None:
    """Why sampling this model on this CPU is refused (too big, too little memory, too slow), or None."""
    from trl_doctor.runtime.limits import physical_memory

    if params > CPU_MAX_PARAMETERS:
        return (f"{ctx.config.model.ref} has {params / 1e9:.2f}B parameters: sampling it on the CPU is refused above "
                f"{CPU_MAX_PARAMETERS / 1e9:.1f}B (minutes per prompt); run the check on a GPU machine (--device cuda)")
    need = params * 4 * 1.3  # fp32 weights and the activations, KV cache and allocator slack beside them
    room = ctx.options.memory_limit or physical_memory()
    if room and need > 0.5 * room:  # the trainer's own run shares the worker's memory
        return (f"{ctx.config.model.ref} needs ~{need / 2**30:.1f} GiB in fp32 and the worker may use "
                f"{room / 2**30:.1f} GiB: sampling it here is refused")
    seconds = cap * params * 4 / CPU_BYTES_PER_S + sequences * (prompt + cap) * 2 * params / CPU_FLOPS
    if seconds > SAMPLE_SHARE * ctx.options.smoke_timeout:
        return (f"{sequences} completions of up to {cap} tokens from {params / 1e9:.2f}B parameters would take ~{seconds:.0f}s "
                f"on the CPU by the estimate, over half of --smoke-timeout {ctx.options.smoke_timeout:g}s: lower N, or "
                "raise --smoke-timeout")
    return None
