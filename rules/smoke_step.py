"""TD006 smoke-step: one tiny, real training step of the installed TRL trainer before the long job.

What goes wrong
    Many failures only show once the trainer runs: a reward function that raises or returns the wrong
    number of scores, a dataset column the trainer does not find, a chat template that breaks on the
    data, a dtype the device cannot do, a pad token the trainer cannot pad with. On a GPU job they show up
    after the model has loaded, often an hour in.

How it is detected
    The installed TRL's own trainer (GRPOTrainer or RLOOTrainer) is built with the config's own settings,
    reward functions, tokenizer (with `added_tokens`) and the first rows of the config's dataset,
    overriding only what makes it tiny: one optimizer step, two generations of one prompt, 8-token
    completions, no saving, no reporting, output in a temporary folder. On the CPU the model is the
    miniature twin (same architecture class, tokenizer and special ids, 2 layers, tiny width), so the
    step runs the real code path of the architecture in seconds. The step runs in a child process with a
    time limit (--smoke-timeout): a hang, a crash or an out-of-memory becomes a `fail` with the error.

    Checked after the step: it finished one optimizer step, the loss and grad norm are finite, the
    trainable parameters changed and frozen ones did not, and every reward function returned one finite
    number (or None) per completion.

Versions
    Works with the trainer classes the installed TRL has. The PPO step is not implemented yet (skip).

What the fix does
    No automatic fix: the report quotes the error, trimmed to the user's own frames where there are any.
"""

from __future__ import annotations

import math
import os

from trl_doctor import fail, passed, rule, skip

from ._trainer_run import start, trainer_run


@rule(
    id="TD006",
    slug="smoke-step",
    title="One real training step of the installed trainer succeeds",
    trainers=("grpo", "rloo", "ppo"),
    prepare=start,
)
def check(ctx):
    if not ctx.options.smoke:
        yield skip("disabled with --no-smoke")
        return
    if ctx.trainer == "ppo":
        yield skip("the PPO smoke step is not implemented yet")
        return
    from trl_doctor._trl import trainer_class

    if trainer_class(ctx.trainer) is None:
        yield fail(f"trl {ctx.version('trl')} has no {ctx.trainer.upper()} trainer")
        return
    if not ctx.config.reward_funcs and not ctx.config.get("reward_model_name_or_path"):
        yield fail("the config names no `reward_funcs` and no `reward_model_name_or_path`: the trainer has nothing to score completions with")
        return
    run = trainer_run(ctx)
    details = dict(run["details"])
    if run["outcome"] == "timeout":
        yield fail(f"the smoke step did not finish within --smoke-timeout {run['limit']:g}s", **details, log_tail=run["log_tail"])
        return
    if run["outcome"] == "crashed":
        yield fail(f"the smoke step's process died with exit status {run['code']} (signal or crash) before reporting",
                   **details, log_tail=run["log_tail"])
        return
    if run["outcome"] == "failed":
        result = run["error"]
        stage = result.get("stage") or "?"
        raised = [(name, s["raised"]) for name, s in result.get("rewards", {}).items() if "raised" in s]
        if raised:
            name, r = raised[0]
            yield fail(f"reward function {name} raised {r['error']} at {_short(r['where'], ctx)}: `{r['line']}`", **details,
                       traceback=result.get("traceback", ""))
            return
        yield fail(f"the {stage} stage failed: {result.get('error_type')}: {result.get('error')}", **details,
                   traceback=result.get("traceback", ""))
        return
    result = dict(run["result"]["train"])
    result["trainer"] = run["result"]["trainer"]
    result["import_s"] = run["result"]["import_s"]
    yield from _judge(result, details, ctx)


def _judge(result, details, ctx):
    details = dict(details)
    details.update({
        "trainer": result["trainer"],
        "step_s": result["step_s"],
        "import_s": result["import_s"],
        "loss": result["loss"],
        "grad_norm": result["grad_norm"],
        "completion mean length": result["completion_mean_length"],
        "clipped ratio": result["clipped_ratio"],
        "updated tensors": f"{result['updated_tensors']}/{result['trainable_tensors']}",
        "peak host MB": result["peak_host_mb"],
    })
    if "peak_gpu_mb" in result:
        details["peak GPU MB"] = result["peak_gpu_mb"]
    for name, s in result["rewards"].items():
        mean = s["sum"] / max(1, s["scores"] - s["nonfinite"]) if s["scores"] else None
        details[f"reward {name}"] = (f"{s['calls']} calls, {s['completions']} completions, mean {mean:.3f}, min {s['min']}, max {s['max']}"
                                     if mean is not None else f"{s['calls']} calls, no numeric scores")
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
        details["gradient flow"] = "not verified: every group's rewards were identical, so the step's gradient is zero"
    elif result["updated_tensors"] == 0:
        problems.append(f"no trainable parameter changed ({result['trainable_tensors']} trainable tensors)")
    if result["frozen_changed"]:
        problems.append(f"frozen parameters changed: {', '.join(result['frozen_changed'])}")
    for name, s in result["rewards"].items():
        if s["calls"] == 0:
            problems.append(f"reward function {name} was never called")
        elif s["nonfinite"]:
            problems.append(f"reward function {name} returned {s['nonfinite']} non-finite or non-numeric scores")
        elif s["scores"] + s["none"] != s["completions"]:
            problems.append(f"reward function {name} returned {s['scores'] + s['none']} scores for {s['completions']} completions")
    if problems:
        yield fail("the smoke step ran but " + "; ".join(problems), **details)
        return
    if "gradient flow" in details:
        yield passed(f"{result['trainer']} took 1 step on the {details['device']} in {result['step_s']:.1f}s, but every "
                     "group's rewards were identical, so no gradient flowed (rewards need variance within a group)", **details)
        return
    yield passed(
        f"{result['trainer']} took 1 step on the {details['device']} in {result['step_s']:.1f}s: loss {result['loss']:.4g}, "
        f"grad norm {result['grad_norm']:.4g}, {details['updated tensors']} tensors updated",
        **details,
    )


def _short(path: str, ctx) -> str:
    base = str(ctx.config.base_dir)
    return os.path.relpath(path, base) if path.startswith(base) else path
