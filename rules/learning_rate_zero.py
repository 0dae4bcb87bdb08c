"""TW009 learning-rate-zero: the learning rate is 0 while steps remain: the job trains nothing

What it does
  Flags `patience` (2) steps in a row whose `learning_rate` (PPO: `lr`) is 0 while the job still has
  steps to go: it is running (the job's own callback, --follow), the log continues after them, the
  job's max_steps lies beyond them, or (max_steps unknown) the log holds no end of the job. A
  schedule reaches 0 only at its last step, so a 0 there is healthy.
Why is this bad?
  Every optimizer step multiplies its update by the learning rate: at 0 the weights never change,
  while the job spends its whole budget generating and scoring. Causes: learning_rate 0 or a typo
  (1e-60), a schedule whose decay ends before max_steps (num_train_epochs and max_steps
  disagreeing), warmup_steps beyond the run's length, a scheduler restarted from a checkpoint at its
  end.
Example
  {'learning_rate': 0.0, 'loss': 0.0003, ...} from the first log.
Fix safety
  Nothing to rewrite: set learning_rate, and make the schedule's length the run's (max_steps).
  Thresholds: [tool.trl-doctor.watch.learning-rate-zero] patience.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, fail, passed, rule
from trl_doctor.facts.metrics import range_of, flagged, history, patience, series, span, streaks, too_little

SLUG = "learning-rate-zero"


@rule(id="TW009", slug=SLUG, title="Learning rate 0 while steps remain", trainers=ALL_TRAINERS,
      contexts=("watch",))
def judge(ctx):
    name, points = series(ctx, "learning_rate", "lr")
    logs = history(ctx)
    last = logs.logs[-1].number

    def remains(p) -> bool:  # the job has steps after this log
        if getattr(ctx, "running", False) or p.number < last:
            return True
        if logs.max_steps and p.step is not None:
            return p.step < logs.max_steps
        return not logs.ended  # no max_steps known and no end logged: a job stopped or still going, not finished

    holds, needed = (lambda p: p.value == 0 and remains(p)), patience(ctx, SLUG, 2)
    runs = streaks(points, holds, needed)
    if not runs and (early := too_little(ctx, points, holds, needed, f"{name} 0 while steps remain")):
        yield early
        return
    if not runs:
        yield passed(f"{name} above 0 while steps remain ({range_of(points)})")
        return
    run = runs[0]
    yield fail(f"{name} is 0 {span(run)} while the job has steps to go: the weights do not change; set "
               "learning_rate, and make the schedule's length the run's (max_steps)", **flagged(run, metric=name))
