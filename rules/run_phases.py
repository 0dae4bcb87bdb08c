"""TD024 run-phases: the later phases can run: resume, evaluation, best model, trackers, checkpoints

What it does
  Reads what stops a job after its first step: `resume_from_checkpoint` (TRL's scripts pass it to
  train()) naming no checkpoint transformers can load, or True with none in output_dir; with
  `eval_strategy`, a config whose dataset has no `dataset_test_split` (TRL's scripts take it);
  `load_best_model_at_end` / `save_strategy: best` without `metric_for_best_model`, on an RL
  trainer's loss (a warn), or on a metric the installed trainer never logs (read from its source);
  a `report_to` tracker with no credentials and not offline (wandb, comet_ml, neptune), or not
  installed in the launch's Python; `push_to_hub` with no hub token or with HF_HUB_OFFLINE (these
  on the launch machine only: where no GPU is here, said as not judged); the first checkpoint
  (weights and, unless `save_only_model`, optimizer states) larger than the free space at
  `output_dir`. Paths of another machine are not judged.
Why is this bad?
  Each stops the job after its model loaded, or hours in: "Can't find a valid checkpoint at ...",
  KeyError at the first evaluation, wandb's "api_key not configured (no-tty)" at train(), a
  tracker's "requires X to be installed" or the hub's 401 when the trainer is constructed, a first
  save that fills the disk. GRPO's loss is about beta x KL: keeping the lowest-loss checkpoint
  keeps no better policy.
Example
  load_best_model_at_end: true, metric_for_best_model: reward_mean
  -> fail: not a metric the installed trainer logs in an evaluation (did you mean eval_reward?)
Fix safety
  Nothing is rewritten: each finding names the setting to change.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, fail, manual, passed, rule, warn
from trl_doctor.facts.launch import phases


@rule(id="TD024", slug="run-phases", title="The job's later phases can run: resume, evaluation, best model, "
      "trackers, the first checkpoint", trainers=ALL_TRAINERS, fixable="never",
      static_skip="it reads the launch's folders, credentials and free disk, and the installed trainer's metrics")
def check(ctx):
    found = [f for f in (phases.resume(ctx), phases.evaluation(ctx), phases.best_model(ctx)) if f is not None]
    found += phases.trackers(ctx) + phases.trackers_missing(ctx)
    hub = phases.hub(ctx)
    if hub is not None:
        found.append(hub)
    size = phases.checkpoint_bytes(ctx)
    space = phases.disk(ctx, size)
    if space is not None:
        found.append(space)
    if not found:
        first = f"; the first checkpoint about {phases._gib(size)}, with room for it" if size else ""
        elsewhere = phases.credentials_elsewhere(ctx)
        yield passed(f"resume, evaluation, best model, trackers and hub settings hold up to the job's later "
                     f"phases{first}" + (f"; {elsewhere}" if elsewhere else ""))
        return
    worst = fail if any(f.status == "fail" for f in found) else warn
    details: dict = {}
    for f in found:  # two findings of one phase (a tracker without credentials, another not installed) both kept
        key = f.phase if f.phase not in details else f"{f.phase} ({sum(k.startswith(f.phase) for k in details) + 1})"
        details[key] = f.details or f.status
    yield worst("; ".join(f"{f.phase}: {f.message}" for f in found), manual("; ".join(f.fix for f in found)),
                **details)
