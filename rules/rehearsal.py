"""TD025 rehearsal: the later phases run in miniature: trackers, evaluation, checkpoint, resume

What it does
  After the smoke step, the trainer it built runs the phases the job's settings call for, with
  the job's settings and the twin's sizes, in the check's own folder: the `report_to` trackers
  started offline with the job's own arguments, as `train()` starts them, and one log;
  `trainer.evaluate()` where the job evaluates (the metrics it logs, `metric_for_best_model`
  looked up in them as transformers does); `_save_checkpoint` with the job's `save_only_model`
  and `save_total_limit`; one more step resumed from that checkpoint; `save_model()`. A phase
  that raises fails in the trainer's own words, naming the phase; each phase's time is reported.
Why is this bad?
  Most jobs that die after their first step die in a phase the first step never runs: a tracker
  that cannot take the job's arguments at train() (TensorBoard writes them as JSON: a
  torch.dtype in model_init_kwargs stops it, after the model has loaded), the first evaluation
  (a metric it never logs, an eval set it cannot batch), the first checkpoint, a resume after a
  restart, the final save. Each costs the time before it.
Example
  metric_for_best_model: reward_mean
  -> fail: best model: KeyError: The `metric_for_best_model` training argument is set to
     'eval_reward_mean', which is not found in the evaluation metrics ...
Fix safety
  Nothing is rewritten: the trainer's words name the setting.
"""

from __future__ import annotations

from trl_doctor import fail, passed, rule, skip
from trl_doctor.facts.trainer_run import trainer_run


@rule(id="TD025", slug="rehearsal", title="The job's later phases run in miniature: trackers, evaluation, "
      "best model, checkpoint, resume, final save", trainers=("grpo", "rloo"), needs=("trainer_run",), fixable="never",
      static_skip="it runs the installed trainer")
def check(ctx):
    if not ctx.options.smoke:
        yield skip("the smoke step is off (--no-smoke): the rehearsal runs after it")
        return
    run = trainer_run(ctx)
    if run.outcome != "ok" or not (run.result or {}).get("train"):
        yield skip(f"the smoke step did not finish ({run.outcome}): smoke-step says why; the later phases follow it")
        return
    phases = run.result["train"].get("rehearsal")
    if not phases:
        yield skip("no later phase rehearsed: this trainer runs its own loop (PPO, the PPO-style RLOO of trl <= "
                   "0.21), which takes no resume and has no evaluation of transformers' kind")
        return
    times = {p["phase"]: f"{p['s']}s" for p in phases}
    failed = [p for p in phases if p["ok"] is False]
    details = {"phases": times, **{f"{p['phase']} metrics": p["metrics"] for p in phases if p.get("metrics")}}
    for p in phases:
        if p["phase"] == "push to hub" and p.get("repo"):  # how far the push ran before the network, and with what
            details["push to hub"] = {k: p[k] for k in ("repo", "stopped at", "files") if k in p}
    unknown = {p["phase"]: p["why"] for p in phases if p["ok"] is None}
    if unknown:  # the doctor's own folder was full: no verdict on those phases, said
        details["not rehearsed"] = unknown
    if any("gpu_peak_mb" in p for p in phases):  # the real model on a GPU: what each phase took there
        details["peak GPU MB per phase"] = {p["phase"]: p["gpu_peak_mb"] for p in phases if "gpu_peak_mb" in p}
    if any(p["phase"] == "trackers" and "not JSON serializable" in p.get("error", "") for p in failed):
        details["to fix"] = ("the job's arguments hold an object a tracker cannot write as JSON (a torch.dtype in "
                             "model_init_kwargs: give its name, \"bfloat16\"; a quantization config: its dict), or "
                             "take that tracker out of report_to")
    if failed:
        yield fail("; ".join(_failure(p) for p in failed)
                   + f" ({run.result['trainer']} rehearsed it on {run.spec.model_label if run.spec else 'the twin'})",
                   **details)
        return
    ran = [p for p in phases if p["ok"]]
    if not ran:
        yield skip("no later phase could be rehearsed: " + "; ".join(f"{k}: {v}" for k, v in unknown.items()),
                   **details)
        return
    timed = ", ".join(f"{p['phase']} {p['s']}s" for p in ran)
    left_out = f"; not rehearsed: {'; '.join(_why_not(k, v) for k, v in unknown.items())}" if unknown else ""
    yield passed(f"{', '.join(p['phase'] for p in ran)} ran as the job will run them ({timed}){left_out}", **details)


def _failure(phase: dict) -> str:
    """A failed phase in the trainer's words, and when the job meets it."""
    if phase["phase"] == "trackers":
        where = phase.get("stopped at")
        who = f"report_to {where}" if where and where != "log" else "the first log"
        return (f"trackers ({who}): {phase['error']} (the job stops there at train(), after the model has loaded, "
                f"before its first step)")
    return f"{phase['phase']}: {phase['error']} (the job reaches it after its steps)"


def _why_not(phase: str, why: str) -> str:
    if "ran out of space" in why:
        return f"{phase} (the check's own folder ran out of space)"
    return f"{phase} ({why})"
