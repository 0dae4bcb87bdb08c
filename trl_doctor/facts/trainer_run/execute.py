"""The trainer run's worker side: builds the installed TRL's real trainer for a tiny version of the config,
runs the probes other rules ask for on it (the logits contract), then, unless the smoke step is off, one
optimizer step (with the end-of-turn token forced early, so the step also shows whether generation stops), then,
when the spec asks for it, the real-model sample (`sample_real`: the real weights, the trainer's sampling settings,
the config's reward functions in the fence).

It runs inside the check's one heavy worker process, after the static rules, so torch, transformers and TRL
are imported once per check. `execute` never raises: the trainer's exception comes back as data with the
traceback trimmed to the frames that matter. A hang, a segfault or an out-of-memory kill takes the worker
process down instead; the printing process, which supervises it (`trl_doctor.supervisor.session`), then reports the
run as `timeout` or `crashed` and hands that outcome to a fresh worker for the rules still to run.
"""

from __future__ import annotations

import copy
import os
import time
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from trl_doctor.facts.trainer_run.protocol import Progress, Spec, Stage


def execute(spec: Spec, on_stage: Callable[[Stage], None] | None = None, tokenizer=None,
            processor=None) -> tuple[bool, dict]:
    """(True, {"trainer", "import_s", "probes", "model", "train"}) or (False, the error as data). `tokenizer`: the
    trainer's tokenizer already loaded (the context's, lent.py), else it is loaded from `spec.tokenizer_path`."""
    started = time.perf_counter()
    progress = Progress()

    def stage(name: str) -> None:
        progress.stage = name
        print(f"[trl-doctor] stage: {name}", flush=True)  # in the worker's log, beside what the trainer prints
        if on_stage is not None:
            on_stage(Stage(name, round(time.perf_counter() - started, 3)))

    here = os.getcwd()
    try:
        os.chdir(step_dir(spec, here))
        return True, run(spec, progress, stage, started, tokenizer, processor)
    except BaseException as exc:  # everything, sys.exit() in a reward function included, must come back as data
        return False, {
            "error_type": type(exc).__name__,
            "error": " ".join(str(exc).split())[:2000],
            "traceback": _trim(traceback.format_exception(type(exc), exc, exc.__traceback__), spec.user_dir),
            "raised_at": _raised_at(exc),
            "stage": progress.stage,
            "rewards": progress.calls,
            "probes": progress.probes,  # probes that finished before the failure
            "heard": progress.heard,
            "agent_calls": progress.agent,
        }
    finally:
        os.chdir(here)


def step_dir(spec: Spec, here: str) -> str:
    """Where the step runs. The job's working directory where the check holds it (trl_doctor.runtime.hold): the
    user's code finds its relative paths as in the job (a reward appending to the log file its script created in
    output_dir), and what anything writes beside itself lands in the check's own layer. Else the check's own folder,
    so that nothing is written into the user's."""
    from trl_doctor.runtime.hold import holder

    return here if holder(here) is not None else spec.work_dir


def _raised_at(exc: BaseException) -> str | None:
    """`trl/trainer/grpo_trainer.py:569`: the file and line that raised `exc` (a library's as heard.place names it)."""
    from trl_doctor.facts.trainer_run.heard import place

    frames = traceback.extract_tb(exc.__traceback__)
    return f"{place(frames[-1].filename)}:{frames[-1].lineno}" if frames else None


def _trim(frames: list[str], user_dir: str | None) -> str:
    """Keep the user's own frames (their reward code) and the last few of the library's."""
    frames = [f for f in frames if "trainer_run/execute.py" not in f]
    keep = [f for f in frames if user_dir and user_dir in f]
    tail = frames[-4:]
    return "".join(keep + [f for f in tail if f not in keep]).rstrip()


def run(spec: Spec, progress: Progress, stage: Callable[[str], None], started: float, tokenizer=None,
        processor=None) -> dict:
    from trl_doctor.facts.trainer_run.heard import hearing

    with twin_threads(spec), hearing() as heard:
        progress.heard = heard  # filled as the libraries speak: a failure reports what they said before it
        out = _step(spec, progress, stage, started, tokenizer, processor)
    out["heard"] = heard
    if out["train"] is None:
        return out
    sample = None
    if spec.sample.get("prompt_ids") and not spec.sample.get("refused"):
        stage("sample")  # the step's trainer and models went with _step: the real model takes their place in memory
        sample = sample_real(spec)
    return {**out, "sample": sample}


@contextmanager
def twin_threads(spec: Spec) -> Iterator[None]:
    """One torch thread while the miniature twin runs on the CPU, the worker's count restored after. The twin's
    ops are too small to split: with more threads, OpenMP's idle threads spin between the thousands of tiny ops
    (with Qwen's 151k vocabulary the check burnt about 1 s of CPU more on 2 cores, more where there are more), and
    one thread also gives the step the same float sums on every machine. Not for the real model (a GPU's step, or
    `sample_real` on the CPU), which keeps every thread."""
    if spec.device != "cpu" or not spec.twin_aux:
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _step(spec: Spec, progress: Progress, stage: Callable[[str], None], started: float, tokenizer=None,
          processor=None) -> dict:
    """The trainer built on the twin (or the real model), its probes and, unless the smoke step is off, its one
    optimizer step: {"trainer", "import_s", "probes", "model", "train"}."""
    stage("import")
    import resource

    import torch
    from transformers import AutoTokenizer

    from trl_doctor.facts.trl import installed as _trl

    from trl_doctor.facts.trainer_run.fingerprint import changed, fingerprints

    trainer_cls = _trl.trainer_class(spec.trainer)
    config_cls = _trl.config_class(spec.trainer)
    import_s = time.perf_counter() - started
    grads = _GradNorms()

    stage("config")
    args = config_cls(**_config_kwargs(config_cls, spec))
    liger = _liger_left_out(config_cls, spec)

    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer_path, local_files_only=True)
    if _ppo_style(trainer_cls):
        trainer, policy, model = _build_ppo_style(trainer_cls, args, tokenizer, spec, progress, stage)
    else:
        processing = _processor(spec, tokenizer, processor) if spec.processor_path else tokenizer
        trainer, policy, model = _build_grpo_style(trainer_cls, args, processing, spec, progress, stage, liger)
    probes = progress.probes
    if hasattr(trainer, LOGPS_METHODS[0]) or hasattr(trainer, LOGPS_METHODS[1]):
        stage("logits probe")
        try:
            probes["logits"] = probe_logits(trainer, model, tokenizer)
        except Exception as exc:  # the model broke the trainer's own log-prob call: that is the probe's finding
            probes["logits"] = probe_error(trainer, model, exc)
    info = {"trainer": trainer_cls.__name__, "import_s": round(import_s, 2), "probes": probes,
            "model": _model_info(policy, spec)}
    if not spec.train:
        return {**info, "train": None}

    # fingerprints, not clones: a copy of every parameter doubled the step's GPU memory (see fingerprint.py)
    trainable = fingerprints((n, p) for n, p in model.named_parameters() if p.requires_grad)
    frozen = fingerprints((n, p) for n, p in model.named_parameters() if not p.requires_grad)

    stage("train")
    forcing = force_token(policy, spec.force_token_id, spec.force_after, spec.suppress_ids)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with grads:
        trainer.train()
    step_s = time.perf_counter() - t0
    forcing.remove()

    stage("inspect")
    updated = changed(trainable, model)
    frozen_changed = changed(frozen, model)
    logs = {}
    for entry in trainer.state.log_history:
        logs.update(entry)
    host_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    loss = logs.get("loss", logs.get("train_loss"))
    if loss is None and "loss/policy_avg" in logs:  # PPO logs its losses apart
        loss = logs["loss/policy_avg"] + logs.get("loss/value_avg", 0.0)
    result = {
        "forced_token_id": spec.force_token_id if forcing.skipped is None else None,
        "termination_probe_skipped": forcing.skipped,
        "generate_steps": forcing.generated,
        "forced_after": spec.force_after,
        "step_s": round(step_s, 2),
        "loss": loss,
        "grad_norm": logs.get("grad_norm", grads.last),
        "optimizer_steps": grads.steps,
        "reward_std": logs.get("reward_std"),
        "frac_reward_zero_std": logs.get("frac_reward_zero_std"),
        "completion_mean_length": logs.get("completions/mean_length", logs.get("completion_length")),  # trl<0.17 name
        "completion_max_length": logs.get("completions/max_length"),
        "completion_mean_terminated_length": logs.get("completions/mean_terminated_length"),
        "clipped_ratio": logs.get("completions/clipped_ratio"),
        "trainable_tensors": len(trainable),
        "trainable_names": _name_kinds(trainable),
        "updated_tensors": len(updated),
        "frozen_changed": frozen_changed[:10],
        "rewards": copy.deepcopy(progress.calls),  # the step's calls: the rehearsal's resume step calls them again
        "agent_calls": dict(progress.agent),
        "reward_model_score": logs.get("objective/scores"),
        "peak_host_mb": round(host_peak_mb, 1),
        "global_steps": trainer.state.global_step,
        "logs": {k: v for k, v in logs.items() if isinstance(v, (int, float))},
    }
    if torch.cuda.is_available() and spec.device == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if spec.rehearse and not _ppo_style(trainer_cls):  # PPO's own loop (and the PPO-style RLOO's) takes no resume
        stage("rehearsal")
        from trl_doctor.facts.trainer_run.rehearsal import rehearse

        said = len(progress.heard)
        result["rehearsal"] = rehearse(trainer, spec)
        # what the libraries say during the rehearsal (a resume's "missing keys" of the twin's tied weights) is the
        # rehearsal's, not the step's: the smoke step judges what was said up to the step
        result["rehearsal_heard"] = progress.heard[said:]
        del progress.heard[said:]
    return {**info, "train": result}


def sample_real(spec: Spec) -> dict:
    """The real model (full safetensors weights) generates `num_generations` completions for each sampled prompt
    with the trainer's sampling settings (transformers' generate, as TRL's non-vLLM path), and the config's reward
    functions score them as the trainer calls them. Reported: how many completions ran to max_completion_length
    without the eos TRL looks for, how many groups got identical rewards, the time taken and the model size.
    An error of the doctor's own comes back as {"error"}; a reward function that raises is recorded by name."""
    import gc

    import torch

    plan = spec.sample
    gc.collect()  # the step's trainer and models were dropped: free their memory before the real weights load
    if spec.device == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()
    t0 = time.perf_counter()
    try:
        model, tok = _load_real(plan, spec.device)
        load_s = time.perf_counter() - t0
        completion_ids, generate_s = _generate(model, tok, plan, spec.device)
        params = sum(p.numel() for p in model.parameters())
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        del model
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}",
                "seconds": round(time.perf_counter() - t0, 2)}
    eos, cap, groups = plan["eos_token_id"], plan["max_completion_length"], plan["num_generations"]
    kept, terminated = [], 0
    for ids in completion_ids:  # as TRL masks them: up to and including the first eos
        if eos is not None and eos in ids:
            ids = ids[:ids.index(eos) + 1]
            terminated += 1
        kept.append(ids)
    hit_cap = sum(1 for ids in kept if (eos is None or eos not in ids) and len(ids) >= cap)
    texts = tok.batch_decode(kept, skip_special_tokens=True)
    t1 = time.perf_counter()
    rewards, totals = _score(spec, plan, kept, texts)
    score_s = time.perf_counter() - t1
    spreads = []
    for g in range(len(plan["rows"])):
        values = totals[g * groups:(g + 1) * groups] if totals is not None else []
        spreads.append(_spread(values) if values else None)
    lengths = [len(ids) for ids in kept]
    return {
        "prompts": len(plan["rows"]), "num_generations": groups, "completions": len(kept), "max_completion_length": cap,
        "terminated": terminated, "hit_cap": hit_cap, "mean_length": round(sum(lengths) / max(1, len(lengths)), 1),
        "min_length": min(lengths, default=0), "max_length": max(lengths, default=0),
        "examples": [t[-120:] for t in texts[:2]], "rewards": rewards,
        "group_rewards": [[None if v is None else round(v, 4) for v in totals[g * groups:(g + 1) * groups]]
                          for g in range(len(plan["rows"]))] if totals is not None else None,
        "group_std": spreads, "zero_spread_groups": sum(1 for s in spreads if s is not None and _is_zero(s)),
        "parameters": params, "dtype": dtype, "device": spec.device,
        "load_s": round(load_s, 2), "generate_s": round(generate_s, 2), "score_s": round(score_s, 2),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _load_real(plan: dict, device: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(plan["tokenizer_path"], local_files_only=True)
    return load_real_model(plan, device), tok


def load_real_model(plan: dict, device: str):
    """The real model as the sample runs it (benchmarks/bench_sample.py times it against a bare generate)."""
    from transformers import AutoModelForCausalLM

    # safetensors only: from_pretrained refuses the pickle files (.bin) rather than falling back to them
    model: Any = AutoModelForCausalLM.from_pretrained(plan["model_path"], local_files_only=True, use_safetensors=True,
                                                      **(plan.get("model_kwargs") or {}))
    if device == "cpu":
        model = model.float()
    return model.to(device).eval()


def _generate(model, tok, plan: dict, device: str) -> tuple[list[list[int]], float]:
    """Each prompt repeated num_generations times (as TRL's sampler repeats it), left-padded into one batch: ONE
    generate call over all prompts × generations, with no logits processor, stopping criterion or hook of the
    doctor's (nothing that would synchronise with the host at each decoding step), and one transfer of the ids at
    the end. benchmarks/bench_sample.py holds it to within 1.2x of a bare generate of the same batch."""
    import torch
    from transformers import GenerationConfig

    settings = dict(plan["generation"])
    pad = settings.get("pad_token_id")
    if pad is None:  # a tokenizer without pad: the pad-token rule's finding; generate needs one to batch
        pad = settings["pad_token_id"] = plan["eos_token_id"] if plan["eos_token_id"] is not None else 0
    prompts = [ids for ids in plan["prompt_ids"] for _ in range(plan["num_generations"])]
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    torch.manual_seed(plan.get("seed", 0))
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=GenerationConfig(**settings))
    seconds = time.perf_counter() - t0
    return [row[width:].tolist() for row in out.cpu()], seconds


def _score(spec: Spec, plan: dict, completion_ids: list, texts: list) -> tuple[dict, list | None]:
    """Each reward function called as the installed trainer calls it, in the user-code fence; the weighted sum per
    completion as TRL forms it (nansum: None counts as no score), or None when a function failed."""
    import math

    from trl_doctor.facts.rewards import (as_trl_reads, environments_for, new_stats, raised_info, record_values,
                                          resolve_reward, reward_call, reward_fence)

    groups = plan["num_generations"]
    rows = [row for row in plan["rows"] for _ in range(groups)]
    conversational = plan.get("conversational")
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else list(texts)
    call = reward_call(spec.trainer)
    excluded = call.excluded_columns if call is not None else ("prompt", "completion")
    kwargs = {"prompts": [r.get("prompt") for r in rows], "completions": completions, "completion_ids": completion_ids}
    if call is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in call.keywords or k in ("prompts", "completions")}
        for key in call.extras:
            kwargs[key] = _extra(key)
    for column in (rows[0] if rows else {}):
        if column not in excluded:
            kwargs[column] = [r.get(column) for r in rows]
    factory = _agent_factory(spec)
    if call is not None and call.environment_extras and factory is not None:
        try:  # one environment per completion, built and reset as TRL does before it generates
            envs = environments_for(factory, rows)
            kwargs.update({key: envs for key in call.environment_extras})
        except Exception as exc:
            return {name: {**new_stats(), "raised": raised_info(exc, skip_files=(__file__,))}
                    for name in spec.reward_funcs}, None
    weights = plan.get("reward_weights") or [1.0] * len(spec.reward_funcs)
    stats: dict = {}
    totals: list | None = [0.0] * len(completions) if spec.reward_funcs else None
    for name, weight in zip(spec.reward_funcs, weights):
        s = stats[name] = new_stats()
        try:
            func = resolve_reward(name, spec.user_dir)
            with reward_fence(name, func, spec.user_dir, spec.user_code_timeout):
                values = func(**kwargs)
        except Exception as exc:
            s["raised"] = raised_info(exc, skip_files=(__file__,))
            totals = None
            continue
        scores = record_values(s, as_trl_reads(values, call), len(completions))
        if scores is None or len(scores) != len(completions) or totals is None:
            totals = None
            continue
        totals = [t + (weight * v if v is not None and math.isfinite(v) else 0.0) for t, v in zip(totals, scores)]
    return stats, totals


def _agent_factory(spec: Spec):
    """The script's environment_factory, as it passed it (a callable or a dict of them), or None."""
    from trl_doctor.facts.rewards import resolve_callables

    names = spec.agent.get("environment_factory") if spec.agent else None
    return None if names is None else resolve_callables(names, spec.user_dir)


def _extra(key: str):
    if key in ("log_extra", "log_metric"):
        return lambda *a, **k: None
    if key == "trainer_state":
        from transformers import TrainerState

        return TrainerState()
    return None


def _spread(values: list[float]) -> float:
    """The group's standard deviation, as TRL's advantage normalisation takes it (unbiased)."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


def _is_zero(std: float) -> bool:
    return abs(std) <= 1e-8  # TRL's frac_reward_zero_std: torch.isclose(std, 0), absolute tolerance 1e-8


def _config_kwargs(config_cls, spec: Spec) -> dict:
    import dataclasses

    fields = {f.name for f in dataclasses.fields(config_cls) if f.init}
    kwargs = {k: v for k, v in spec.config.items() if k in fields}
    kwargs.update({k: v for k, v in spec.overrides.items() if k in fields})
    if spec.device == "cpu" and "use_cpu" in fields:
        kwargs["use_cpu"] = True
    if spec.device == "cpu" and kwargs.get("tf32"):
        kwargs["tf32"] = None  # TF32 is a GPU's; the launch machine's is judged by precision-and-attention
    return kwargs


def _ppo_style(trainer_cls) -> bool:
    """PPOTrainer, and RLOOTrainer before trl 0.22: policy, reference and reward model instances, no reward_funcs."""
    import inspect

    return "reward_funcs" not in inspect.signature(trainer_cls.__init__).parameters


def _peft_config(spec: Spec):
    """The PEFT config the script passed (a copy of its own object, whatever its kind), else the one `trl <trainer>
    --config` builds from the ModelConfig keys (use_peft, lora_r, ...)."""
    import copy
    import dataclasses

    import trl

    if spec.peft:
        from trl_doctor.facts.rewards import live_reward

        given = live_reward(spec.peft)
        if given is not None:
            return copy.deepcopy(given)

    model_config_cls = getattr(trl, "ModelConfig", None)
    raw = spec.raw
    if model_config_cls is None or not raw.get("use_peft"):
        return None
    fields = {f.name for f in dataclasses.fields(model_config_cls) if f.init}
    model_args = model_config_cls(**{k: v for k, v in raw.items() if k in fields and k != "model_name_or_path"})
    return trl.get_peft_config(model_args)


def _build_grpo_style(trainer_cls, args, tokenizer, spec, progress, stage, liger_args=None):
    from trl_doctor.facts.rewards import resolve_reward, reward_call

    stage("reward functions")
    calls: dict[str, dict] = progress.calls
    call = reward_call(spec.trainer)
    funcs = [_recorded(resolve_reward(name, spec.user_dir), name, calls, call) for name in spec.reward_funcs]
    reward_models = [_aux_model_path(path, spec) for path in spec.reward_models or []]

    kwargs = _agent(trainer_cls, spec, progress.agent)
    peft_config = _peft_config(spec)
    if peft_config is not None:
        kwargs["peft_config"] = peft_config
    inputs = {"model": spec.model_path, "reward_funcs": funcs + reward_models, "train_dataset": _dataset(spec),
              "processing_class": tokenizer, **kwargs}
    refused = None
    if liger_args is not None:
        stage("trainer init with Liger on")
        refused = _liger_refusal(trainer_cls, liger_args, inputs)
    stage("trainer init")
    trainer = trainer_cls(args=args, **inputs)  # a refusal of something else than Liger's fails here, in its stage
    if refused is not None:  # built without Liger, refused with it: the launch's Liger settings are the cause
        progress.stage = "trainer init with Liger on"
        raise refused
    return trainer, trainer.model, trainer.model


def _liger_left_out(config_cls, spec: Spec):
    """The config with the launch's Liger keys on, where the step turns them off (launch_only: no GPU or no
    liger-kernel here), else None."""
    keys = {k: True for k in ("use_liger_kernel", "use_liger_loss") if spec.raw.get(k) and spec.overrides.get(k) is False}
    if not keys:
        return None
    try:
        return config_cls(**{**_config_kwargs(config_cls, spec), **keys})
    except ImportError:  # a config class that asks for liger-kernel itself: its checks cannot be heard here
        return None


def _liger_refusal(trainer_cls, liger_args, inputs: dict) -> BaseException | None:
    """TRL's own checks of what may go with Liger, run by building the trainer once with the launch's Liger keys on:
    trl 0.17-1.14 refuse in GRPOTrainer.__init__ a LoRA on lm_head, prompt-learning PEFT, off-policy masking, an
    entropy mask or bonus, a loss type or importance-sampling level the Liger loss lacks (docs/coverage.md A9), before
    they ask for liger-kernel. The step itself runs without Liger, where those checks never run. TRL's ImportError
    for liger-kernel (or transformers') means they all passed (version-skew judges the package); a trainer built
    (trl 1.15+ applies Liger at training) is let go; any other error is returned: the refusal, Liger's only if the
    trainer then builds without Liger."""
    import gc

    try:
        trainer = trainer_cls(args=liger_args, **inputs)
    except ImportError as exc:
        return None if "liger" in str(exc).lower() else exc
    except Exception as exc:
        return exc
    del trainer
    gc.collect()
    import torch

    if torch.cuda.is_available():  # the real model on a GPU: its first copy's memory goes back before the second
        torch.cuda.empty_cache()
    return None


def _agent(trainer_cls, spec: Spec, calls: dict) -> dict:
    """The script's tools, environment factory and rollout function, the callables it passed (not wrappers: TRL tells
    an async tool or an environment's methods by what they are), for a trainer whose __init__ takes them. The
    rollout function, which TRL only calls, is counted into `calls`: a release that takes it and never calls it in
    the job's generation (trl 0.25-0.27 call it only when generating with vLLM) trains without it, silently."""
    import inspect

    from trl_doctor.facts.rewards import resolve_callables

    takes = inspect.signature(trainer_cls.__init__).parameters
    out = {key: resolve_callables(names, spec.user_dir) for key, names in spec.agent.items() if key in takes}
    if callable(out.get("rollout_func")):
        calls["rollout_func"] = 0
        out["rollout_func"] = _counted(out["rollout_func"], "rollout_func", calls)
    return out


def _counted(func, key: str, calls: dict):
    """`func` with its calls counted into calls[key]; its name, signature and async-ness kept."""
    import functools
    import inspect

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def counted_async(*args, **kwargs):
            calls[key] += 1
            return await func(*args, **kwargs)
        return counted_async

    @functools.wraps(func)
    def counted(*args, **kwargs):
        calls[key] += 1
        return func(*args, **kwargs)
    return counted


def _build_ppo_style(trainer_cls, args, tokenizer, spec, progress, stage):
    """PPO (and the old RLOO) take model instances and a tokenized dataset, as TRL's example scripts build them."""
    import inspect

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    stage("models")
    params = inspect.signature(trainer_cls.__init__).parameters
    load = dict(spec.model_kwargs or {}, local_files_only=True)
    if spec.overrides.get("trust_remote_code"):  # a remote-code model's twin loads back with its code, as the job must
        load["trust_remote_code"] = True
    policy = AutoModelForCausalLM.from_pretrained(spec.model_path, **load)
    ref = AutoModelForCausalLM.from_pretrained(spec.model_path, **load)
    reward_path = spec.reward_model_path
    if not reward_path:
        raise ValueError("the config names no `reward_model_path`: PPO scores completions with a reward model")

    def classifier(path):
        # TRL's PPO and RLOO example scripts load both models this way
        return AutoModelForSequenceClassification.from_pretrained(_aux_model_path(path, spec), num_labels=1,
                                                                  local_files_only=True)

    reward_model = classifier(reward_path)
    value_path = spec.value_model_path
    value_model = classifier(value_path) if value_path else None

    stage("dataset")
    rows = [{"input_ids": _prompt_ids(tokenizer, row)} for row in spec.rows]
    dataset = Dataset.from_list(rows)

    stage("trainer init")
    kwargs = {"processing_class": tokenizer, "train_dataset": dataset}
    if "policy" in params:  # RLOOTrainer before trl 0.22
        kwargs.update(config=args, policy=policy, ref_policy=ref, reward_model=reward_model)
    else:
        kwargs.update(args=args, model=policy, ref_model=ref, reward_model=reward_model, value_model=value_model)
    peft_config = _peft_config(spec)
    if peft_config is not None and "peft_config" in params:
        kwargs["peft_config"] = peft_config
    trainer = trainer_cls(**kwargs)
    model = trainer.model
    return trainer, getattr(model, "policy", model), model


def _dataset(spec: Spec):
    """The step's rows as the trainer gets them: the saved rows with their images, or the plain rows."""
    from datasets import Dataset, load_from_disk

    if spec.rows_path:
        return load_from_disk(spec.rows_path)
    return Dataset.from_list(spec.rows)


def _processor(spec: Spec, tokenizer, lent=None):
    """A vision-language model's processor, as TRL loads it from the model folder (or the context's, lent), holding
    the run's tokenizer (the context's, with the script's tokens and pad token) in place of the folder's own."""
    from trl_doctor.facts.inputs.vision import load_processor

    processor = lent if lent is not None else load_processor(spec.processor_path)
    if tokenizer is not None and hasattr(processor, "tokenizer"):
        processor.tokenizer = tokenizer
    return processor


def _prompt_ids(tokenizer, row: dict) -> list[int]:
    if row.get("prompt") is None and isinstance(row.get("input_ids"), list):  # tokenized by the user's script
        return list(row["input_ids"])
    prompt = row.get("prompt")
    if prompt is None:
        raise KeyError("prompt")
    if isinstance(prompt, list):  # conversational
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer(prompt, padding=False)["input_ids"]


def _aux_model_path(path: str, spec: Spec) -> str:
    """A reward or value model for the step: the checkpoint itself with the real model, or its miniature
    twin (same class, vocabulary, score-head rows and special ids) saved beside the policy's twin."""
    if not spec.twin_aux:
        return path
    import hashlib
    import os

    import torch
    from transformers import AutoConfig, AutoTokenizer

    from trl_doctor.context.twin import TWIN_SEED, twin_config

    out = os.path.join(spec.work_dir, "aux-" + hashlib.sha1(path.encode()).hexdigest()[:10])
    if os.path.isdir(out):
        return out
    small = twin_config(AutoConfig.from_pretrained(path, local_files_only=True))
    torch.manual_seed(TWIN_SEED)
    _aux_twin(small, path).float().save_pretrained(out, safe_serialization=True)
    try:
        AutoTokenizer.from_pretrained(path, local_files_only=True).save_pretrained(out)
    except (OSError, ValueError):
        pass  # a checkpoint without its own tokenizer: TRL then fails as it would on the real one
    return out


def _aux_twin(small, path: str):
    """The twin saved as the checkpoint is saved, so that TRL's `num_labels=1` load meets what it meets on the real
    one: a classifier's score head keeps its real rows (2 rows against num_labels=1 is the real size mismatch); a
    causal LM (TRL's PPO example often points reward_model_path at the SFT model) stays a causal LM without a
    score head, which the load then gives a fresh 1-row head, with transformers' "newly initialized" warning."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from trl_doctor.facts.inputs.models import score_rows

    rows = score_rows(path)
    architectures = getattr(small, "architectures", None) or []
    if rows is None and architectures and not any("ForSequenceClassification" in a for a in architectures):
        try:
            return AutoModelForCausalLM.from_config(small)
        except ValueError:
            pass  # not a causal-LM class transformers knows: a classifier twin, as before
    if rows is not None and rows != small.num_labels:
        # the checkpoint's score head decides what loads (a config may leave num_labels at its default of 2 over
        # a 1-row head, which TRL's `num_labels=1` loads fine): the twin has the real head's rows
        small.num_labels = rows
    return AutoModelForSequenceClassification.from_config(small)


def _model_info(policy, spec: Spec) -> dict:
    total = sum(p.numel() for p in policy.parameters())
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    dtype = str(next(policy.parameters()).dtype).replace("torch.", "")
    return {"label": spec.model_label, "parameters": total, "trainable_parameters": trainable, "dtype": dtype,
            "class": type(policy).__name__}


def _name_kinds(named: dict) -> str:
    """A short description of which tensors are trainable (all, or the LoRA adapters...)."""
    names = list(named)
    lora = [n for n in names if "lora_" in n]
    if names and len(lora) == len(names):
        return f"{len(names)} LoRA adapter tensors"
    if lora:
        return f"{len(lora)} LoRA adapter tensors and {len(names) - len(lora)} others ({', '.join(n for n in names if 'lora_' not in n)[:200]})"
    return f"{len(names)} tensors"


class _GradNorms:
    """Records the global gradient norm before every optimizer step (TRL's PPO does not log one)."""

    def __init__(self):
        self.steps = 0
        self.last = None
        self._handle = None

    def __enter__(self):
        import torch
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        def hook(optimizer, args, kwargs):
            grads = [p.grad.detach().float().norm() for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            self.steps += 1
            self.last = float(torch.stack(grads).norm()) if grads else 0.0

        self._handle = register_optimizer_step_pre_hook(hook)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        return False


LOGPS_METHODS = ("_get_per_token_logps_and_entropies", "_get_per_token_logps")


def probe_logits(trainer, model, tokenizer) -> dict:
    """Call the trainer's own per-token log-prob function on the model exactly as training does, and record
    what the model was called with and how many sequence positions got vocabulary-sized logits."""
    import inspect

    import torch

    method_name = next((m for m in LOGPS_METHODS if hasattr(trainer, m)), None)
    if method_name is None:
        return {"skipped": f"{type(trainer).__name__} has none of {', '.join(LOGPS_METHODS)}"}
    head = model.get_output_embeddings()
    vocab = head.weight.shape[0] if head is not None else model.config.get_text_config().vocab_size
    batch, prompt_len, keep = 2, 6, 4
    gen = torch.Generator().manual_seed(0)
    special = set(tokenizer.all_special_ids)
    pool = torch.tensor([i for i in range(min(vocab, len(tokenizer))) if i not in special])
    input_ids = pool[torch.randint(len(pool), (batch, prompt_len + keep), generator=gen)]
    device = next(model.parameters()).device
    input_ids = input_ids.to(device)
    attention_mask = torch.ones_like(input_ids)
    seen: dict[str, Any] = {"call_kwargs": None, "vocab_positions": []}

    def pre_hook(module, args, kwargs):
        if seen["call_kwargs"] is None:
            seen["call_kwargs"] = sorted(k for k, v in kwargs.items() if v is not None)

    def out_hook(module, args, output):
        tensors = [output] if isinstance(output, torch.Tensor) else [getattr(output, "logits", None)]
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[-1] == vocab:
                seen["vocab_positions"].append(int(t.shape[1]))

    handles = [model.register_forward_pre_hook(pre_hook, with_kwargs=True)]
    handles += [m.register_forward_hook(out_hook) for m in model.modules()]
    method = getattr(trainer, method_name)
    try:
        with torch.no_grad():
            out = method(model, input_ids, attention_mask, keep)
    finally:
        for h in handles:
            h.remove()
    logps = out[0] if isinstance(out, tuple) else out
    params = inspect.signature(type(model).forward).parameters
    return {
        "method": f"{type(trainer).__name__}.{method_name}",
        "model_forward": f"{type(model).__name__}.forward",
        "forward_params": sorted(p for p in params if p in ("logits_to_keep", "num_logits_to_keep", "labels", "fused_lm_head")),
        "forward_has_var_kwargs": any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()),
        "call_kwargs": seen["call_kwargs"],
        "batch": batch,
        "sequence": prompt_len + keep,
        "logits_to_keep": keep,
        "vocab": vocab,
        "vocab_positions": seen["vocab_positions"],
        "logps_shape": list(logps.shape) if hasattr(logps, "shape") else None,
        "logps_finite": bool(torch.isfinite(logps).all()) if hasattr(logps, "shape") else None,
    }


def probe_error(trainer, model, exc: BaseException) -> dict:
    """What the probe records when the trainer's log-prob call raised on this model: the error, and what the model
    offers that the trainer reaches for (its forward's keywords, its output embeddings)."""
    import inspect

    method_name = next((m for m in LOGPS_METHODS if hasattr(trainer, m)), "?")
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        head = base.get_output_embeddings()
    except Exception:
        head = None
    params = inspect.signature(type(base).forward).parameters
    tb = traceback.extract_tb(exc.__traceback__)
    return {
        "method": f"{type(trainer).__name__}.{method_name}",
        "model_forward": f"{type(base).__name__}.forward",
        "error_type": type(exc).__name__,
        "error": " ".join(str(exc).split())[:500],
        "where": f"{tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name}" if tb else None,
        "output_embeddings": type(head).__name__ if head is not None else None,
        "forward_params": sorted(p for p in params if p in ("logits_to_keep", "num_logits_to_keep", "labels", "fused_lm_head")),
        "forward_has_var_kwargs": any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()),
    }


class _Forcing:
    """The hooks of the termination probe, and the decoding steps each generate call took."""

    def __init__(self):
        self.handles = []
        self.generated: list[int] = []
        self.flush = lambda: None
        self.skipped: str | None = None  # why the probe could not hook the model

    def remove(self):
        self.flush()
        self.flush = lambda: None
        for h in self.handles:
            h.remove()


def force_token(model, token_id, after: int, suppress_ids: list[int]):
    """Make generation emit `token_id` as the (after+1)-th completion token and no stop id before it: the
    termination probe. Only single-position logits (decoding steps) are touched, so the training forward
    passes see the model's own logits."""
    import torch

    if token_id is None:
        return _Forcing()
    head = model.get_output_embeddings()
    if head is None:
        # a model's own code may name its LM head otherwise and define no get_output_embeddings(): the step still
        # runs, only this probe has nothing to hook (whether the trainer itself needs the head is the logits probe's)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        forcing = _Forcing()
        forcing.skipped = (f"{type(base).__name__}.get_output_embeddings() returns None: the termination probe "
                           "cannot watch the logits")
        return forcing
    state = {"steps": 0}

    def start(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor) and ids.dim() == 2 and ids.shape[1] > 1:
            # a prefill (or a scoring pass): the next single-position logits start a completion
            if state["steps"]:
                forcing.generated.append(state["steps"])
            state["steps"] = 0

    def hook(module, args, output):
        if torch.is_grad_enabled() or not isinstance(output, torch.Tensor) or output.dim() != 3 or output.shape[1] != 1:
            return None  # training and scoring passes see the model's own logits
        out = output.clone()
        for sid in suppress_ids:
            out[:, -1, sid] = float("-inf")
        for row in range(out.shape[0]):
            # rows end at different lengths, so length-sensitive rewards still differ within a group
            if state["steps"] >= after + row % 3:
                out[row, -1, :] = float("-inf")
                out[row, -1, token_id] = 0.0
        state["steps"] += 1
        return out

    forcing = _Forcing()
    forcing.handles = [model.register_forward_pre_hook(start, with_kwargs=True), head.register_forward_hook(hook)]
    forcing.flush = lambda: forcing.generated.append(state["steps"]) if state["steps"] else None
    return forcing


def _recorded_object(obj, before, raised, after):
    """The recording wrapper of a callable object (a class instance with __call__): an object again, of a class of
    the same name whose __call__ is async exactly where the user's is, with the user's `__name__` only where the
    object has one. What TRL detects on it (inspect.iscoroutinefunction on the object, trl 1.13; is_async_callable,
    later; its __name__) is what it detects on the user's object: a release that cannot call it fails as the job
    would, never passes through a function wrapper the job does not have."""
    import inspect

    sync, coro = _recording(obj, before, raised, after)
    if inspect.iscoroutinefunction(type(obj).__call__):
        async def __call__(self, *args, **kwargs):
            return await coro(*args, **kwargs)
    else:
        def __call__(self, *args, **kwargs):  # type: ignore[misc]  # async exactly where the user's is
            return sync(*args, **kwargs)
    __call__.__signature__ = _signature_of(obj)
    cls = type(type(obj).__name__, (), {"__call__": __call__, "__module__": type(obj).__module__,
                                        "__qualname__": type(obj).__qualname__})
    wrapper = cls()
    try:
        wrapper.__name__ = obj.__name__  # only where the object has one: TRL names a reward by it
    except AttributeError:
        pass
    return wrapper


def _signature_of(obj):
    import inspect

    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return sig.replace(parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY), *sig.parameters.values()])


def _recorded(func, name, calls, call=None):
    """Wrap a reward function to record how TRL calls it and what it returns, keeping the name and signature
    TRL inspects. Problems are recorded before TRL trips over them, so the report names the cause. The checks
    are the ones the reward-functions rule runs without a model (trl_doctor/facts/rewards.py). `call` is how the
    installed trainer calls and reads reward functions: a lazy iterable it iterates is recorded (and handed on) as
    the list of its items, which is what that trainer builds from it."""
    import functools
    import inspect

    from trl_doctor.facts.rewards import as_trl_reads, bind_problem, is_async, new_stats, raised_info, record_values

    stats = calls.setdefault(name, new_stats())
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None

    def before(args, kwargs):
        problem = bind_problem(func, name, signature, args, kwargs)
        if problem is not None:
            stats["signature"] = problem

    def raised(exc):
        if "signature" not in stats:
            stats["raised"] = raised_info(exc, skip_files=(__file__,))

    def after(values, args, kwargs):
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        values = as_trl_reads(values, call)  # consumed here: TRL gets the items its own list() would have made
        record_values(stats, values, len(completions) if completions is not None else None)
        return values

    if not inspect.isfunction(func) and not inspect.ismethod(func) and not isinstance(func, functools.partial):
        return _recorded_object(func, before, raised, after)
    sync, coro = _recording(func, before, raised, after)
    # an async wrapper for an async function: a TRL that awaits reward functions (is_async_callable) must still see
    # one, and gets the scores; a TRL that does not gets a coroutine, as it would from the function itself
    return functools.wraps(func)(coro if is_async(func) else sync)


def _recording(func, before, raised, after):
    """(sync, async) callables that call `func` the way TRL would, recording the call, a raise and the values."""
    def sync(*args, **kwargs):
        before(args, kwargs)
        try:
            values = func(*args, **kwargs)
        except Exception as exc:
            raised(exc)
            raise
        return after(values, args, kwargs)

    async def coro(*args, **kwargs):
        before(args, kwargs)
        try:
            values = await func(*args, **kwargs)
        except Exception as exc:
            raised(exc)
            raise
        return after(values, args, kwargs)

    return sync, coro
