"""What will run: the job as the installed TRL will run it, stated at the head of the report (issue 60, item 4).

Not a verdict: the settings in force that decide what the job does and costs, read from the config object the
installed TRL builds (`config_value`: its own defaults and `__post_init__` applied) and the launch as the doctor reads
it (`launch`): processes and GPUs, how completions are generated, the loss in force (its type and aggregation, beta
and whether a reference model loads, the importance-sampling ratio's level and caps), steps per generation, optimizer
steps and checkpoints, evaluation, logging and trackers. A line whose values the config cannot give (a key the
release does not have, a value TRL refuses) is left out, never guessed; nothing here raises.

`what_will_run(ctx)` -> `WillRun` (a title and ordered {what: text} lines), or None where there is nothing to say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from trl_doctor.errors import InputError, Unavailable
from trl_doctor.facts.launch.launcher import launch, process_count
from trl_doctor.facts.launch.phases import report_to
from trl_doctor.facts.launch.settings import config_fields, config_value, vllm_placement
from trl_doctor.facts.trl.installed import ppo_style, trainer_mentions

_ABSENT = object()


@dataclass(frozen=True)
class WillRun:
    title: str  # "trl 1.16.0's GRPOConfig, as it resolves this config"
    lines: dict[str, str] = field(default_factory=dict)  # {what: text}, in the order shown


def what_will_run(ctx) -> WillRun | None:
    """The job as the installed TRL will run it (see the module's doc), or None without the installed TRL's config
    class (a context that cannot say)."""
    try:
        config_class, _ = config_fields(ctx)
    except (Unavailable, InputError):
        return None
    if not config_class:
        return None
    value = _reader(ctx)
    lines: dict[str, str] = {}
    for what, describe in (("processes", _processes), ("generation", _generation), ("loss", _loss),
                           ("steps", _steps), ("checkpoints", _checkpoints), ("evaluation", _evaluation),
                           ("logging", _logging)):
        try:
            text = describe(ctx, value)
        except Exception:  # a value TRL refuses (trainer-config's finding) or of a shape this code has not met: the
            text = None    # line is left out, never guessed, and the check goes on
        if text:
            lines[what] = text
    return WillRun(f"trl {ctx.version('trl')}'s {config_class}, as it resolves this config", lines)


def _reader(ctx) -> Callable[[str], Any]:
    """value(key): the value the trainer will see, or _ABSENT where the release has no such key or TRL refuses it."""
    def value(key: str) -> Any:
        try:
            return config_value(ctx, key, _ABSENT)
        except (Unavailable, InputError):
            return _ABSENT
    return value


def _given(v: Any) -> bool:
    return v is not _ABSENT and v is not None


def _every(n: Any, unit: str = "steps") -> str:
    """"every 10 steps", "every step"."""
    return f"every {unit[:-1]}" if _text(n) == "1" else f"every {_text(n)} {unit}"


def _text(v: Any) -> str:
    """An enum's value (SaveStrategy.STEPS -> steps), a float without noise, anything else as str."""
    v = getattr(v, "value", v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _processes(ctx, value) -> str | None:
    la = launch(ctx)
    text = process_count(la.processes) + (f": {la.processes_from}" if "(" in la.processes_from else
                                          f" ({la.processes_from})")
    if la.machines > 1:
        text += f" over {la.machines} machines"
    if la.gpus:
        names = sorted({str(g.get("name", "GPU")) for g in la.gpus})
        where = "the launch machine's (--target)" if la.target else "visible here"
        text += f"; GPUs {where}: {len(la.gpus)} x {', '.join(names)}"
    return text


def _generation(ctx, value) -> str | None:
    if ctx.trainer == "ppo":
        n = value("response_length")
        return f"the policy's own generate, at most {n} tokens a response" if _given(n) else None
    if value("use_vllm") is True:
        mode, _ = vllm_placement(ctx)
        if mode == "colocate":
            how = (f"vLLM colocated in each training process: vllm_gpu_memory_utilization "
                   f"{_text(value('vllm_gpu_memory_utilization'))} of its GPU")
            tp = value("vllm_tensor_parallel_size")
            if _given(tp) and tp != 1:
                how += f", tensor parallel {tp}"
        elif mode == "server":
            url = value("vllm_server_base_url")
            if not _given(url):
                url = f"{_text(value('vllm_server_host'))}:{_text(value('vllm_server_port'))}"
            how = f"a vLLM server ({url}; `trl vllm-serve`, started apart from this job)"
        elif mode == "device":
            how = f"vLLM on its own GPU (vllm_device {_text(value('vllm_device'))})"
        else:
            how = "vLLM"
    else:
        paged = value("use_transformers_paged")
        how = "transformers' generate inside the trainer" + (" (paged)" if paged is True else "") + " (use_vllm off)"
    counts = []
    gens, longest = value("num_generations"), value("max_completion_length")
    if _given(gens):
        counts.append(f"{gens} completions a prompt")
    if _given(longest):
        counts.append(f"each at most {longest} tokens")
    temperature = value("temperature")
    if _given(temperature):
        counts.append(f"temperature {_text(temperature)}")
    return how + (": " + ", ".join(counts) if counts else "")


def _loss(ctx, value) -> str | None:
    if ctx.trainer == "ppo":
        parts = [f"{k} {_text(value(k))}" for k in ("kl_coef", "cliprange", "vf_coef", "cliprange_value", "num_ppo_epochs")
                 if _given(value(k))]
        return "PPO's clipped policy and value losses: " + ", ".join(parts) if parts else None
    parts = []
    loss_type = value("loss_type")
    parts.append(f"loss_type {_text(loss_type)!r}" if _given(loss_type) else
                 "each completion's token mean, averaged over completions (this release has no loss_type)")
    scale = value("scale_rewards")
    if _given(scale):
        parts.append(f"advantages scaled by {_scale_words(scale)} (scale_rewards {_text(scale)!r})")
    beta = value("beta")
    if _given(beta):
        parts.append(_beta_words(ctx, float(beta), value("use_peft") is True))
    level = value("importance_sampling_level")
    eps, eps_high = value("epsilon"), value("epsilon_high")
    if _given(eps):
        high = eps_high if _given(eps_high) else eps
        ratio = f"{_text(level)}-level ratio" if _given(level) else "ratio"
        parts.append(f"{ratio} clipped to [{1 - float(eps):g}, {1 + float(high):g}]")
    delta = value("delta")
    if _given(delta):
        parts.append(f"ratio capped at {_text(delta)} (delta)")
    if value("use_vllm") is True and value("vllm_importance_sampling_correction") is True:
        mode, cap = value("vllm_importance_sampling_mode"), value("vllm_importance_sampling_cap")
        words = "vLLM's sampling corrected by importance weights"
        if _given(mode):
            words += f" ({_text(mode)}"
            words += f", cap {_text(cap)})" if _given(cap) else ")"
        parts.append(words)
    return "; ".join(parts)


def _scale_words(scale: Any) -> str:
    scale = _text(scale)
    return {"group": "each group's std", "batch": "the batch's std", "none": "nothing", "True": "each group's std",
            "False": "nothing"}.get(scale, scale)


def _beta_words(ctx, beta: float, use_peft: bool) -> str:
    if beta == 0.0:
        if trainer_mentions(ctx.trainer, "self.beta == 0.0"):  # trl >= 0.16 skips the reference at beta 0
            return "beta 0: no KL term, no reference model loads"
        return "beta 0: no KL term (this release still loads a reference model)"
    peft = use_peft or _peft_given(ctx)
    ref = "the reference is the base model under the adapter (no copy)" if peft else "a reference model loads (a copy of the policy)"
    return f"beta {beta:g}: a KL term; {ref}"


def _peft_given(ctx) -> bool:
    live = getattr(ctx, "live", None)
    return bool(live is not None and getattr(live, "peft_config", None) is not None)


def _steps(ctx, value) -> str | None:
    if ppo_style(ctx.trainer):
        return _rollout_steps(ctx, value)
    parts = []
    per, acc = value("per_device_train_batch_size"), value("gradient_accumulation_steps")
    spg, iters = value("steps_per_generation"), value("num_iterations")
    if _given(acc) and int(acc) > 0:
        # micro-batches a generated batch feeds: steps_per_generation (trl >= 0.18; before it, each micro-batch was
        # generated for), each num_iterations times
        feeds = (spg if _given(spg) else 1) * (iters if _given(iters) else 1)
        bits = ", ".join(f"{k} {v}" for k, v in (("steps_per_generation", spg), ("num_iterations", iters),
                                                  ("gradient_accumulation_steps", acc)) if _given(v))
        every = feeds / int(acc)
        parts.append(("one generation per optimizer step" if every == 1 else
                      f"one generation per {every:g} optimizer steps" if every > 1 else
                      f"{1 / every:g} generations per optimizer step") + f" ({bits})")
    if _given(per) and _given(acc):
        procs = launch(ctx).processes
        parts.append(f"{per * procs * acc} completions an optimizer step ({per} per device x "
                     f"{process_count(procs)} x {acc} accumulated)")
    total = optimizer_steps(ctx, value)
    if total is not None:
        parts.append(total[1])
    return "; ".join(parts) or None


def _rollout_steps(ctx, value) -> str | None:
    """PPO's loop (and the RLOO trainer's before trl 0.22): a rollout of per_device x accumulation x mini-batches
    completions a process, each trained on for num_ppo_epochs passes of its mini-batches; total_episodes (else the
    epochs over the rows) decide how many rollouts, as the trainer's own `num_total_batches`."""
    per, acc = value("per_device_train_batch_size"), value("gradient_accumulation_steps")
    if not (_given(per) and _given(acc)):
        return None
    minis, epochs = value("num_mini_batches"), value("num_ppo_epochs")
    minis = int(minis) if _given(minis) else 1
    procs = launch(ctx).processes
    batch = per * acc * minis * procs
    text = (f"{batch} completions a rollout ({per} per device x {process_count(procs)} x {acc} accumulated x "
            f"{minis} mini-batch{'es' if minis != 1 else ''})")
    if _given(epochs):
        text += f", each trained on for {epochs} epoch{'s' if epochs != 1 else ''} of its mini-batches"
    episodes = value("total_episodes")
    if not _given(episodes):
        try:
            rows = len(ctx.dataset)
        except Exception:
            return text
        episodes = int(float(value("num_train_epochs")) * rows)
    rollouts = math.ceil(int(episodes) / batch)
    updates = rollouts * (int(epochs) if _given(epochs) else 1) * minis
    return text + f"; {rollouts} rollouts ({episodes} episodes): {updates} optimizer steps"


def optimizer_steps(ctx, value) -> tuple[int, str] | None:
    """(the optimizer steps the job takes, in words): max_steps where set, else the epochs over the training rows as
    a GRPO-style trainer counts them (every prompt `num_generations` times, `num_iterations` passes), None where it
    cannot be told (PPO's episodes, no dataset at hand)."""
    if ppo_style(ctx.trainer):  # its own loop: _rollout_steps; transformers' save and eval steps count rollouts
        return None
    max_steps = value("max_steps")
    if _given(max_steps) and int(max_steps) > 0:
        return int(max_steps), f"{int(max_steps)} optimizer steps (max_steps)"
    epochs = value("num_train_epochs")
    per, acc, gens = (value(k) for k in ("per_device_train_batch_size", "gradient_accumulation_steps",
                                         "num_generations"))
    try:
        rows = len(ctx.dataset)
    except Exception:  # no dataset at hand (a streamed one, a load that fails: dataset-schema says so)
        return None
    if not (_given(epochs) and _given(per) and _given(acc)):
        return None
    gens = gens if _given(gens) else 1
    iters = value("num_iterations")
    iters = iters if _given(iters) else 1
    per_step = per * launch(ctx).processes * acc
    per_epoch = max(1, (rows * gens * iters) // per_step)
    total = math.ceil(per_epoch * float(epochs))
    return total, (f"about {total} optimizer steps ({_text(epochs)} epochs over {rows} rows, each prompt "
                   f"{gens} times{f', {iters} passes' if iters != 1 else ''})")


def _checkpoints(ctx, value) -> str | None:
    strategy = value("save_strategy")
    if not _given(strategy):
        return None
    strategy = _text(strategy)
    if strategy == "no":
        return "none during training (save_strategy 'no')"
    if strategy == "steps":
        every = value("save_steps")
        text = _every(every)
        try:
            total = optimizer_steps(ctx, value)
        except Exception:  # a value the count needs that TRL refuses: the checkpoints stand without it
            total = None
        if total is not None and _given(every) and float(every) >= 1:
            count = total[0] // int(float(every))
            text += (f": {count} in {total[0]} steps" if count else
                     f": none within the job's {total[0]} steps (only what the script saves at its end)")
    else:
        text = f"every {strategy}"
    limit = value("save_total_limit")
    text += f", the last {limit} kept" if _given(limit) else ", every one kept"
    if value("save_only_model") is True:
        text += ", model only (no optimizer state: not resumable)"
    out = ctx.config.raw.get("output_dir")  # as written: the check runs its trainer in a folder of its own
    if isinstance(out, str) and out and not _checks_own(out):
        text += f", in {out}"
    return text


def _checks_own(path: str) -> bool:
    """Whether `path` is inside this check's own folder (where a capture sends a script's output_dir)."""
    import os

    from trl_doctor.runtime.tmp import DIR_ENV

    own = os.environ.get(DIR_ENV)
    return own is not None and os.path.abspath(path).startswith(os.path.abspath(own).rstrip("/") + "/")


def _evaluation(ctx, value) -> str | None:
    strategy = value("eval_strategy")
    if not _given(strategy):
        strategy = value("evaluation_strategy")  # transformers < 4.41's name
    if not _given(strategy):
        return None
    strategy = _text(strategy)
    if strategy == "no":
        return "none (eval_strategy 'no')"
    text = _every(value("eval_steps")) if strategy == "steps" else f"every {strategy}"
    best = value("metric_for_best_model")
    if value("load_best_model_at_end") is True:
        text += f"; the best checkpoint by {_text(best)} is loaded at the end"
    return text


def _logging(ctx, value) -> str | None:
    every = value("logging_steps")
    text = _every(every) if _given(every) else ""
    if value("report_to") is _ABSENT:
        return text or None
    trackers = report_to(ctx)  # for a launch, the trackers its script asked for (the capture turns them off)
    said = ", ".join(trackers) if trackers else "no tracker"
    return f"{text} to {said}" if text else said
