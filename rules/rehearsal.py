"""TD025 rehearsal: the later phases run in miniature: evaluation, best model, checkpoint, resume

What it does
  After the smoke step, the trainer it built runs the phases the job's settings call for, with
  the job's settings and the twin's sizes, in the check's own folder: `trainer.evaluate()` where
  the job evaluates (the metrics it logs, `metric_for_best_model` looked up in them as
  transformers does), `_save_checkpoint` with the job's `save_only_model` and `save_total_limit`,
  one more step resumed from that checkpoint, and `save_model()`. A phase that raises fails in the
  trainer's own words, naming the phase; each phase's time is reported.
Why is this bad?
  Most jobs that die after their first step die in a phase the first step never runs: the first
  evaluation (a metric it never logs, an eval set it cannot batch), the first checkpoint, a resume
  after a restart, the final save. Each costs the hours before it.
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


@rule(id="TD025", slug="rehearsal", title="The job's later phases run in miniature: evaluation, best model, "
      "checkpoint, resume, final save", trainers=("grpo", "rloo"), needs=("trainer_run",), fixable="never",
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
    unknown = {p["phase"]: p["why"] for p in phases if p["ok"] is None}
    if unknown:  # the doctor's own folder was full: no verdict on those phases, said
        details["not rehearsed"] = unknown
    if any("gpu_peak_mb" in p for p in phases):  # the real model on a GPU: what each phase took there
        details["peak GPU MB per phase"] = {p["phase"]: p["gpu_peak_mb"] for p in phases if "gpu_peak_mb" in p}
    if failed:
        yield fail("; ".join(f"{p['phase']}: {p['error']}" for p in failed)
                   + f" (the job reaches it after its steps; {run.result['trainer']} rehearsed it on "
                     f"{run.spec.model_label if run.spec else 'the twin'})", **details)
        return
    ran = [p for p in phases if p["ok"]]
    if not ran:
        yield skip("no later phase could be rehearsed: " + "; ".join(f"{k}: {v}" for k, v in unknown.items()),
                   **details)
        return
    timed = ", ".join(f"{p['phase']} {p['s']}s" for p in ran)
    left_out = f"; not rehearsed: {', '.join(unknown)} (the check's own folder ran out of space)" if unknown else ""
    yield passed(f"{', '.join(p['phase'] for p in ran)} ran as the job will run them ({timed}){left_out}", **details)
