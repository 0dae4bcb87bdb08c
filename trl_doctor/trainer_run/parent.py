"""The trainer run's parent side: decides whether the installed TRL can build the config's trainer at all,
builds the `Spec` (the miniature twin, or the real model on a GPU when one step fits), runs it through the
worker side in this process, and turns what came back into a `RunResult` the rules read. One run per check,
cached on the context: the logits probe, the termination probe and the smoke step share it.

The printing process supervises the run through `ctx.emit` events: "trainer-run" (the run starts: the smoke
timeout starts counting), "trainer-stage" (each stage, for progress and for a failure's last stage) and
"trainer-run-end". When
it had to stop a run that hung or died, it hands the outcome to a fresh worker as `ctx.options.trainer_run`.
"""

from __future__ import annotations

import os
import time

from trl_doctor._cache import fact

from .protocol import RunResult, Spec

ROWS = 4  # prompts handed to the worker side: enough for one generation batch and a spare
FORCE_AFTER = 3  # the termination probe forces the end-of-turn token as the 4th completion token
MAX_COMPLETION = 8

LAST_PPO_RELEASE = "1.12.0"  # trl.experimental.ppo.PPOTrainer's last release (see the value-model rule)


def trainer_gap(ctx) -> str | None:
    """Why the installed TRL has no trainer for this config (with the version to pin), or None."""
    from trl_doctor.facts.trl import trainer_class

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
    from trl_doctor import Unavailable

    handed = getattr(ctx.options, "trainer_run", None)
    if handed is not None:  # a previous worker's run hung or died: its outcome, from the supervisor
        return RunResult.from_json(handed)
    gap = trainer_gap(ctx)
    if gap:
        raise Unavailable(gap)
    for need in ("trainer_config", "tokenizer", "model_config", "dataset"):
        ctx.need(need)
    spec = build_spec(ctx)
    ctx.emit("trainer-run", {"details": spec.details(), "limit": ctx.options.smoke_timeout, "trainer": spec.trainer})
    from . import worker

    started = time.perf_counter()
    ok, data = worker.execute(spec, on_stage=lambda s: ctx.emit("trainer-stage", s.to_json()))
    ctx.emit("trainer-run-end", {"ok": ok})
    details = {**spec.details(), "wall_s": round(time.perf_counter() - started, 2)}
    if not ok:
        return RunResult("failed", details, spec=spec, error=data, last_stage=data.get("stage"))
    return RunResult("ok", details, spec=spec, result=data)


PRECISION_KEYS = ("bf16", "fp16")


def build_spec(ctx) -> Spec:
    from trl_doctor.facts.models import parameter_count

    from trl_doctor.facts.chat import completion_terminator

    info = ctx.trainer_config_info
    raw = ctx.config.raw
    device = ctx.device
    tok = ctx.tokenizer
    rows = ctx.dataset.select(range(min(ROWS, len(ctx.dataset)))).to_list()
    stop = completion_terminator(tok, rows)
    gen = ctx.generation_config
    gen_eos = gen.eos_token_id if gen is not None else None
    suppress = {tok.eos_token_id, stop["id"], *(gen_eos if isinstance(gen_eos, list) else [gen_eos])} - {None}
    cfg = ctx.trainer_config
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
    model_kwargs = None
    if twin and ctx.options.trust_remote_code and isinstance((ctx.read_json(ctx.model_file("config.json")) or {}).get("auto_map"), dict):
        # the twin of a remote-code model loads back with its code only when trusted, as the job must
        overrides["model_init_kwargs"] = {"trust_remote_code": True}
        overrides["trust_remote_code"] = True
        _copy_model_code(ctx.config.model.path, model_path)
    if not twin:  # the real model loads as the job loads it (dtype, attention); the twin in fp32
        model_kwargs = raw.get("model_init_kwargs") or {k: raw[k] for k in ("dtype", "torch_dtype", "attn_implementation")
                                                           if raw.get(k) is not None} or None
        overrides["model_init_kwargs"] = model_kwargs
    return Spec(**{
        "trainer": ctx.trainer,
        "device": device,
        "model_path": model_path,
        "tokenizer_path": str(ctx.twin_dir) if twin else _tokenizer_dir(ctx),
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
        "rows": rows,
        "columns": list(ctx.dataset.column_names),
        "reward_funcs": list(ctx.config.reward_funcs),
        "reward_models": reward_models,
        "reward_model_path": _path(ctx, raw["reward_model_path"]) if raw.get("reward_model_path") else None,
        "value_model_path": _path(ctx, raw["value_model_path"]) if raw.get("value_model_path") else None,
        "user_dir": str(ctx.config.base_dir),
        "train": bool(ctx.options.smoke),
        "force_token_id": stop["id"],
        "force_token": stop["token"],
        "force_reason": stop["why"],
        "force_after": FORCE_AFTER,
        "suppress_ids": sorted(suppress),
        "twin_parameters": parameter_count(ctx.twin) if twin else None,
    })


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
    from trl_doctor.facts.models import resolve_artifact

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
    from trl_doctor.facts.models import parameter_count

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

    from trl_doctor.facts.memory import plan_from_context

    plan = plan_from_context(ctx)
    completion = ctx.config.get("max_completion_length") or ctx.config.get("response_length") or 256
    prompt = max(1, plan.seq_len - int(completion))
    seq = prompt + MAX_COMPLETION
    positions = plan.logits_positions if plan.logits_positions is not None else plan.seq_len
    positions = seq if positions >= plan.seq_len else min(positions, MAX_COMPLETION + 1)
    return replace(plan, batch_size=2, seq_len=seq, logits_positions=positions, generation_batch=2,
                   vllm_gpu_memory_utilization=0.0)


def step_gpu(gpus: list[dict], visible: str | None) -> dict | None:
    """The GPU the step's process gets (CUDA's device 0: the first one CUDA_VISIBLE_DEVICES leaves)."""
    from trl_doctor.facts.launch import visible_gpus

    shown, _ = visible_gpus(gpus, visible)
    return shown[0] if shown else None


def has_safetensors(folder) -> bool:
    from pathlib import Path

    return any(Path(folder).glob("*.safetensors"))


def real_model_fits(ctx, gpu: dict | None = None) -> tuple[bool, str]:
    """Whether one smoke step of the real model fits in the free memory of the GPU it would run on, and why."""
    from trl_doctor.facts.memory import GiB, estimate

    if not has_safetensors(ctx.config.model.path):
        return False, (f"{ctx.config.model.ref} has no .safetensors weights (the doctor loads no pickle files) or no "
                       "weights at all")
    if gpu is None:
        from trl_doctor.facts.launch import gpus

        found, why = gpus()
        gpu = step_gpu(found, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if gpu is None:
            return False, f"NVML reports no GPU to measure free memory on ({why or 'none visible'})"
    est = estimate(smoke_plan(ctx), gpu_total_bytes=gpu["memory_total_mib"] * 2**20)
    free = gpu["memory_free_mib"] * 2**20
    words = (f"one step needs ~{est.total_bytes / GiB:.1f} GiB ({est.summary()}) and GPU {gpu['index']} "
             f"({gpu['name']}) has {free / GiB:.1f} GiB free")
    return est.total_bytes <= FIT_MARGIN * free, words


def smoke_estimate_details(ctx) -> dict:
    """The step's memory estimate (and the free memory), shown beside an out-of-memory error."""
    from trl_doctor.facts.memory import estimate

    est = estimate(smoke_plan(ctx))
    out = {"memory estimate (one smoke step, real model)": f"~{est.total_gib:.1f} GiB: {est.summary()}"}
    out.update({f"estimate: {k}": v for k, v in est.breakdown().items()})
    if ctx.device == "cuda":
        fits, words = real_model_fits(ctx)
        out["memory check"] = words
    return out
