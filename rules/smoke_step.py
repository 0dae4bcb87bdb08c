"""TD006 smoke-step: one tiny, real training step of the installed TRL trainer before the long job.

What it does
    Runs the installed TRL's own trainer for one step with the config's settings, models, rewards,
    tokenizer, precision, LoRA and first rows, made tiny (`num_generations: 2`, 8-token completions,
    no saving, trackers or vLLM), in a child process under --smoke-timeout; on the CPU on twins (2
    layers), on a GPU the real model when it fits with 10% margin. Checks finite loss and grad norm,
    trained parameters changed and frozen ones not, one float (or None) per completion from each
    reward call; a hang, segfault or OOM kill fails with its stage. `--sample N` (default 2 after a
    real-model GPU step; not in CI) scores the real model's completions.

Why is this bad?
    Many failures show only once the trainer runs, often an hour in: a reward function that raises,
    returns the wrong count or strings, or lacks `**kwargs`; no `prompt` column; a template that
    breaks on the data; bf16 below compute capability 8.0; PPO without a value model; OOM at the
    first backward. Two need the real model and never crash (docs/coverage.md: C7, E5): completions
    that all run to `max_completion_length` (clipped_ratio 1.0, reward 0, trl#5697), and groups
    whose completions all get one reward, so GRPO's advantages, loss and gradient are zero
    (frac_reward_zero_std 1.0, trl#3857).  CI runs trl 1.16.0 (GRPO, RLOO; PPO fails naming
    trl==1.12.0), 1.12.0 (PPO), 0.15.2 + transformers 4.48.3 (GRPO, PPO, PPO-style RLOO); RLOO with
    reward functions before 0.22 fails naming the release.

Example
    reward_funcs: [rewards.raising_reward]   # reads kwargs["answer"]; the dataset has no answer
    -> fail: reward function rewards.raising_reward raised KeyError: 'answer' at rewards.py:10: ...

Fix safety
    No automatic fix: the report names the cause (reward function and line, columns, dtype, device,
    the memory estimate beside an OOM) with TRL's error trimmed to the user's frames; the sample's
    findings: raise `max_completion_length` or fix the eos, graded rewards, diverse sampling.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from trl_doctor import fail, Finding, Location, manual, passed, rule, skip, TRAINERS, Unavailable, warn

from trl_doctor.facts.trainer_run import MAX_COMPLETION, trainer_gap, trainer_run
from trl_doctor.facts.trainer_run.heard import known_warning
from trl_doctor.facts.inputs.text import config_relative


@rule(
    id="TD006",
    slug="smoke-step",
    title="One real training step of the installed trainer succeeds",
    trainers=TRAINERS,
    needs=("trainer_run",),
    static_skip="it trains one step",
)
def check(ctx):
    if not ctx.options.smoke:
        yield from _built_without_step(ctx)
        return
    gap = trainer_gap(ctx)
    if gap:
        yield fail(gap)
        return
    run = trainer_run(ctx)
    details = dict(run.details)
    if run.outcome == "timeout":
        advice = ("the real-model sample (--sample N) ran past it: lower N or raise --smoke-timeout"
                  if _last_stage(run) == "sample" else "raise --smoke-timeout if the machine is just slow")
        yield fail(f"the smoke step did not finish within --smoke-timeout {run.limit:g}s (stage: "
                   f"{_last_stage(run)}); {advice}", **details, log_tail=run.log_tail)
        return
    if run.outcome == "crashed":
        yield fail(f"the smoke step's process died with exit status {run.code} at stage {_last_stage(run)} "
                   f"({run.cause or _signal(run.code)}) before reporting", **details, log_tail=run.log_tail)
        return
    if run.outcome == "failed":
        error = run.error
        message, extra = explain_failure(error, run.spec.to_json(), ctx)
        yield with_heard([fail(message, **details, **extra, traceback=error.get("traceback", ""))], error.get("heard"))
        return
    result = dict(run.result["train"])
    result["trainer"] = run.result["trainer"]
    result["import_s"] = run.result["import_s"]
    result["model"] = run.result.get("model", {})
    findings = list(_judge(result, details, ctx, run.spec.sample if run.spec is not None else {},
                           run.result.get("sample")))
    yield with_heard(findings[:1], run.result.get("heard"))
    yield from findings[1:]


# the trainer's own construction (trl_doctor.facts.trainer_run.protocol.STAGES): what fails before it (the reward
# functions, the models, the dataset) other rules judge
_CONSTRUCTION = ("trainer init with Liger on", "trainer init")


def _built_without_step(ctx):
    """--no-smoke takes no step, but the probes still build the trainer (logits-contract, eos-termination): where that
    construction fails (TRL's own refusal of the launch's settings), the job fails there too, and this rule says why
    (logits-contract sends the reader here)."""
    try:
        run = None if trainer_gap(ctx) else trainer_run(ctx)
    except Unavailable:
        run = None
    if run is None or run.outcome != "failed" or run.last_stage not in _CONSTRUCTION:
        yield skip("disabled with --no-smoke")
        return
    error = run.error
    message, extra = explain_failure(error, run.spec.to_json(), ctx)
    raised = error.get("raised_at")
    yield with_heard([fail(f"{message} (--no-smoke: no step was taken; the trainer the probes build could not be "
                           "built)", **dict(run.details), **extra, **({"raised at": raised} if raised else {}))],
                     error.get("heard"))


def with_heard(verdict: list, heard: list | None) -> Finding:
    """The step's verdict with what TRL, transformers, accelerate or PEFT warned while its trainer was built and
    stepped (their words and place; data/known_warnings.yaml's noise left out): a pass becomes a warn naming the first
    of them, every one under `library warnings`."""
    (found,) = verdict
    said = [f"{i['library']}: {i['message']} ({i['where']})" for i in heard or ()
            if not known_warning(i["library"], i["message"])]
    if not said:
        return found
    details = {**found.details, "library warnings": said}
    if found.status.value != "pass":
        return replace(found, details=details)
    more = f"; {len(said) - 1} more under library warnings" if len(said) > 1 else ""
    return warn(f"{found.message}; but {said[0]}{more}", fix=found.fix, location=found.location, **details)


def explain_failure(error: dict, spec: dict, ctx) -> tuple[str, dict]:
    """The failed run's message, naming the cause a user must fix, and extra details."""
    stage = error.get("stage") or "?"
    text = f"{error.get('error_type')}: {error.get('error')}"
    for name, s in error.get("rewards", {}).items():
        problem = _reward_problem(name, s, ctx)
        if problem:
            return problem, {"failed at stage": stage, "error": text}
    columns = spec.get("columns") or []
    if error.get("error_type") == "KeyError" and "prompt" in (error.get("error") or "") and "prompt" not in columns:
        return (f"the dataset has no `prompt` column (columns: {', '.join(columns) or 'none'}): "
                f"{spec.get('trainer', '').upper()} builds every batch from `prompt`; rename the column or map the "
                "rows to {\"prompt\": ...} before training", {"failed at stage": stage, "error": text})
    if _is_oom(error):
        extra = {"failed at stage": stage, "error": text}
        extra.update(oom_details(ctx))
        return (f"out of memory during the {stage} stage on the {spec.get('device')} with {spec.get('model_label')}: "
                f"{error.get('error')}", extra)
    dtype = _dtype_problem(error, spec)
    if dtype:
        return dtype, {"failed at stage": stage, "error": text}
    if stage == "trainer init with Liger on":  # the step runs without Liger; TRL's checks of it ran on a build with it
        return (f"{spec.get('trainer', '').upper()}Trainer refuses the launch's Liger settings at "
                f"construction ({text}): the job stops before its first step (the step itself runs without Liger, "
                "which needs a GPU and liger-kernel)", {"failed at stage": stage})
    return f"the {stage} stage failed: {text}", {"failed at stage": stage}


def _reward_problem(name: str, s: dict, ctx) -> str | None:
    from trl_doctor.facts.rewards import reward_problem

    return reward_problem(name, s, ctx.version("trl"), lambda path: config_relative(ctx, path))


def _is_oom(error: dict) -> bool:
    text = f"{error.get('error_type')} {error.get('error')}"
    return any(m in text for m in ("OutOfMemoryError", "out of memory", "can't allocate memory", "MemoryError"))


def _dtype_problem(error: dict, spec: dict) -> str | None:
    text = (error.get("error") or "")
    low = text.lower()
    precision = spec.get("precision", "")
    if ("bf16" in low or "bfloat16" in low) and "bf16=True" in precision:
        return (f"bf16 is requested ({precision}) but the {spec.get('device')} cannot do it: {text}; set bf16: false "
                "(and fp16: true on a pre-Ampere GPU) or run on a GPU with compute capability 8.0 or higher")
    if ("fp16" in low or "half" in low or "float16" in low) and "fp16=True" in precision:
        where = "a CPU" if spec.get("device") == "cpu" else f"the {spec.get('device')}"
        return f"fp16 is requested ({precision}) but it cannot run on {where}: {text}; set fp16: false (or bf16 on a GPU that has it)"
    return None


def oom_details(ctx) -> dict:
    """The memory estimate shown beside an out-of-memory error."""
    from trl_doctor.facts.trainer_run import smoke_estimate_details

    try:
        return smoke_estimate_details(ctx)
    except Exception as exc:  # the estimate is context for the error, never a second failure
        return {"memory estimate": f"not available ({type(exc).__name__}: {exc})"}


def _last_stage(run) -> str:
    return run.last_stage or "start-up"


def _signal(code: int) -> str:
    import signal

    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return "a crash in native code" if code else "no result written"


def _judge(result, run_details, ctx, plan=None, sample=None):
    details = dict(run_details)
    model = result.get("model") or {}
    details.update({
        "trainer": result["trainer"],
        "model class": model.get("class"),
        "parameters": f"{model.get('parameters', 0):,} ({model.get('trainable_parameters', 0):,} trainable, {model.get('dtype')})",
        "step_s": result["step_s"],
        "import_s": result["import_s"],
        "loss": result["loss"],
        "grad_norm": result["grad_norm"],
        "optimizer steps": result.get("optimizer_steps"),
        "trainable": result.get("trainable_names"),
        "updated tensors": f"{result['updated_tensors']}/{result['trainable_tensors']}",
        "peak host MB": result["peak_host_mb"],
    })
    if "peak_gpu_mb" in result:
        details["peak GPU MB"] = result["peak_gpu_mb"]
    if "LoRA" in (result.get("trainable_names") or "") and result["updated_tensors"] < result["trainable_tensors"]:
        details["adapters"] = ("lora_A tensors get no gradient in the first step while lora_B is still zero (PEFT's "
                               "initialisation); the lora_B tensors moved, and no frozen weight did")
    lengths = result.get("generate_steps") or []
    if result.get("completion_mean_length") is not None:
        details["completion mean length"] = result["completion_mean_length"]
    if result.get("termination_probe_skipped"):
        details["termination probe"] = f"skipped: {result['termination_probe_skipped']}"
    elif result.get("clipped_ratio") is not None:
        # the step's completions come from the twin (or are cut at 8 tokens) with the end token forced: they test
        # TRL's masking, never whether the real model stops
        details["step completions ending before the limit"] = (
            f"{(1 - result['clipped_ratio']) * 100:.0f}% (the termination probe forces the end-of-turn token from "
            f"token {result.get('forced_after', 3) + 1} on; not evidence about the real model's completions)")
    elif lengths:
        details["decoding steps per generate call"] = lengths
    for name, s in result["rewards"].items():
        scored = s["scores"] - s["nonfinite"]
        mean = s["sum"] / scored if scored else None
        details[f"reward {name}"] = (f"{s['calls']} calls, {s['completions']} completions, mean {mean:.3f}, min {s['min']}, "
                                     f"max {s['max']}, {s['none']} None" if mean is not None else
                                     f"{s['calls']} calls, no numeric scores")
    rollouts = (result.get("agent_calls") or {}).get("rollout_func")  # None: the script passed no rollout_func
    if rollouts is not None:
        details["rollout_func"] = f"called {rollouts} times in the step"
    if result.get("reward_model_score") is not None:
        details["reward model mean score"] = result["reward_model_score"]
    problems = []
    if result["global_steps"] < 1:
        problems.append("the trainer finished without taking an optimizer step")
    for key in ("loss", "grad_norm"):
        v = result[key]
        if v is None or not math.isfinite(v):
            problems.append(f"{key} is {v}")
    flat = result.get("frac_reward_zero_std") == 1 or result.get("reward_std") == 0
    if result["updated_tensors"] == 0 and flat and not result["grad_norm"]:
        # every group scored its completions alike: the advantages, hence the gradient, are zero by design
        details["gradient flow"] = ("not verified: every group of the step's completions got identical rewards, so "
                                    "its gradient is zero")
    elif result["updated_tensors"] == 0:
        problems.append(f"no trainable parameter changed ({result['trainable_tensors']} trainable tensors)")
    if result["frozen_changed"]:
        problems.append(f"frozen parameters changed: {', '.join(result['frozen_changed'])}")
    for name, s in result["rewards"].items():
        problem = _reward_problem(name, s, ctx)
        if problem:
            problems.append(problem)
        elif s["calls"] == 0:
            problems.append(f"reward function {name} was never called")
        elif s["nonfinite"]:
            problems.append(f"reward function {name} returned {s['nonfinite']} non-finite scores (NaN or inf)")
    if rollouts == 0 and result["global_steps"] >= 1:
        vllm = "with vLLM" if ctx.config.get("use_vllm") else "with transformers (use_vllm is off)"
        problems.append(f"the script's rollout_func was never called: trl {ctx.version('trl')} generated the step's "
                        f"completions itself, {vllm}, so the job trains on the model's own samples and its rollout "
                        "never runs (trl 0.25-0.27 call rollout_func only when generating with vLLM; later releases "
                        "on every generation)")
    found, note, sampled = sample_findings(plan or {}, sample, ctx)
    details.update(sampled)
    findings = [replace(f, details=dict(details)) for f in found]  # the step's details, then the sample's
    if problems:
        yield fail("the smoke step ran but " + "; ".join(problems), **details)
        yield from findings
        return
    where = f"on the {details['device']} with the {details['model']}"
    twin = details["model"].startswith("miniature twin")
    if "gradient flow" in details:
        whose = ("the twin's random-weight completions (they say nothing about the real model's rewards)" if twin
                 else "its 8-token completions")
        yield passed(f"{result['trainer']} took 1 step {where} in {result['step_s']:.1f}s, but every group of "
                     f"{whose} got identical rewards, so no gradient flowed in this step{note}", **details)
    else:
        yield passed(
            f"{result['trainer']} took 1 step {where} in {result['step_s']:.1f}s: loss {result['loss']:.4g}, "
            f"grad norm {result['grad_norm']:.4g}, {details['updated tensors']} trainable tensors updated{note}",
            **details,
        )
    yield from findings


def sample_findings(plan: dict, sample: dict | None, ctx) -> tuple[list[Finding], str, dict[str, Any]]:
    """The real-model sample's findings (C7: every completion cut at max_completion_length; E5: no group with any
    reward spread; without the step's details), a note for the step's own message, and the sample's details. Only
    the real model's completions are evidence here: without a sample nothing is said about them."""
    details: dict[str, Any] = {}
    if not plan:
        details["real-model completions"] = ("not sampled: the step's completions come from the twin or are cut at "
                                             f"{MAX_COMPLETION} tokens, so they show nothing about where the real model "
                                             "stops or how its rewards spread; --sample N samples N prompts with it")
        return [], "", details
    if plan.get("refused"):
        details["real-model sample"] = f"not run ({plan.get('why')}): {plan['refused']}"
        return [], f"; real-model sample not run: {plan['refused']}", details
    if sample is None:
        return [], "", details
    if sample.get("error"):
        details["real-model sample"] = f"stopped after {sample.get('seconds')}s: {sample['error']}"
        return [], f"; the real-model sample could not run: {sample['error']}", details
    model = plan.get("model")
    size = _size(sample["parameters"])
    n, groups, cap = sample["prompts"], sample["num_generations"], sample["max_completion_length"]
    total = sample["completions"]
    eos = f"{plan.get('eos_token')!r} (id {plan.get('eos_token_id')})"
    details["real-model sample"] = (
        f"{model} ({size} parameters, {sample['dtype']}, {sample['device']}): {n} prompt(s) x {groups} completions in "
        f"{sample['seconds']:.1f}s (load {sample['load_s']:.1f}s, generate {sample['generate_s']:.1f}s, rewards "
        f"{sample['score_s']:.1f}s); {plan.get('why')}")
    details["real-model completions"] = (
        f"{sample['hit_cap']}/{total} ran to max_completion_length {cap} without the eos {eos}; lengths "
        f"{sample['min_length']}-{sample['max_length']} (mean {sample['mean_length']})")
    if sample.get("examples"):
        details["real-model completion (end)"] = repr(sample["examples"][0])
    if plan.get("use_vllm"):
        details["real-model sample note"] = ("sampled with transformers' generate, as TRL's non-vLLM path; vLLM samples "
                                             "with the same settings but its own stop ids")
    for name, s in sample["rewards"].items():
        scored = s["scores"] - s["nonfinite"]
        details[f"real-model reward {name}"] = (f"mean {s['sum'] / scored:.3f}, min {s['min']}, max {s['max']}, "
                                                f"{s['none']} None" if scored else "no numeric scores")
    if sample.get("group_rewards") is not None:
        details["real-model group rewards"] = sample["group_rewards"]
    findings = []
    timing = f"({model}, {size} parameters, sampled in {sample['seconds']:.1f}s)"
    for name, s in sample["rewards"].items():
        problem = _reward_problem(name, s, ctx)
        if problem:
            findings.append(fail(f"on the real model's completions {problem} {timing}"))
    if total and sample["hit_cap"] == total:
        how = ("the template ends the assistant turn with it" if plan.get("conversational") else "the prompts are plain text")
        findings.append(warn(
            f"all {total} completions the real model sampled for {n} prompt(s) ran to max_completion_length {cap} "
            f"without the eos {eos} {timing}: in training every one is cut (completions/clipped_ratio 1.0), answers past "
            f"the cap never reach the reward, and the run can learn nothing; raise max_completion_length, or make the "
            f"model end with {plan.get('eos_token')} (check eos_token and the chat template; {how})",
            manual(f"raise max_completion_length above {cap} (and vLLM's max model length with it), or fix the eos so "
                   "the model's completions end; mask_truncated_completions: true keeps cut completions out of the loss"),
            Location(str(ctx.config.path), "max_completion_length")))
    spreads = [s for s in sample.get("group_std") or [] if s is not None]
    if spreads and sample["zero_spread_groups"] == len(spreads):
        cut = " (all cut at the cap, so alike)" if total and sample["hit_cap"] == total else ""
        temperature = (plan.get("generation") or {}).get("temperature")
        findings.append(warn(
            f"every one of the {len(spreads)} group(s) of {groups} real-model completions{cut} got identical rewards "
            f"({_first(sample['group_rewards'])}) {timing}: GRPO's group-normalised advantages are then 0, so the loss and the "
            f"gradient are 0 (frac_reward_zero_std 1.0) and the run learns nothing from these prompts; give partial "
            f"credit in the reward, raise temperature ({temperature}), or use easier prompts",
            manual("make the reward graded (partial credit) so completions of one prompt score differently, sample more "
                   "diversely (temperature), and watch reward_std and grad_norm rather than the loss")))
    found = [f for f in findings if f.status.value != "pass"]
    note = "" if found else (f"; the real model's {total} sampled completions: {sample['hit_cap']} cut at "
                             f"max_completion_length {cap}, {sample['zero_spread_groups']}/{len(spreads)} groups "
                             f"with no reward spread, in {sample['seconds']:.1f}s")
    return findings, note, details


def _first(groups: list, shown: int = 3) -> str:
    """The first groups' rewards, for a one-line message (the details list them all)."""
    text = ", ".join(str(g) for g in groups[:shown])
    return f"[{text}{', ...' if len(groups) > shown else ''}]"


def _size(parameters: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if parameters >= scale:
            return f"{parameters / scale:.{2 if unit == 'B' else 1}f}{unit}"
    return str(parameters)


