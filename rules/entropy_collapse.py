"""TW005 entropy-collapse: the policy's entropy collapsed: it samples nearly the same tokens every time

What it does
  Reads the per-token entropy the job logs (`entropy`, trl >= 0.20; PPO's `policy/entropy_avg`) and
  flags `patience` (5) steps in a row below `floor` (0.1 nats) and below `fraction` (20%) of its
  start (its first log, or the median of its first 3 if higher): a drop from the policy's own
  start, not a low value a peaked model had from step 1. The finding names where the fall began
  (below half the start).
Why is this bad?
  Once the entropy is near 0 every completion of a group is the same, the rewards stop differing and
  the policy stops exploring: the reward plateaus (DAPO, arXiv:2503.14476, sec. 3.1; Cui et al.,
  "The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617). A warn: the job still trains.
Example
  {'entropy': 0.012, ...} after {'entropy': 0.85, ...} at the first log.
Fix safety
  Nothing to rewrite: raise temperature, clip higher (epsilon_high), lower the learning rate, or add
  an entropy bonus.
  Thresholds: [tool.trl-doctor.watch.entropy-collapse] floor, fraction, patience.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, passed, rule, warn
from trl_doctor.facts.metrics import (flagged, fmt, limit, onset, patience, series, span, start_level, streaks,
                                      too_little)

SLUG = "entropy-collapse"


@rule(id="TW005", slug=SLUG, title="Entropy collapsed", severity="warn", trainers=ALL_TRAINERS,
      contexts=("watch",))
def judge(ctx):
    name, points = series(ctx, "entropy", "policy/entropy_avg")
    first = start_level(points)
    floor, fraction = limit(ctx, SLUG, "floor", 0.1), limit(ctx, SLUG, "fraction", 0.2)
    holds, needed = (lambda p: p.value < floor and p.value < fraction * first), patience(ctx, SLUG, 5)
    runs = streaks(points, holds, needed)
    if not runs and (early := too_little(ctx, points, holds, needed, f"{name} below {fmt(floor)} nats")):
        yield early
        return
    if not runs:
        yield passed(f"{name} from {fmt(first)} to {fmt(points[-1].value)} over {len(points)} logs: no collapse")
        return
    run = runs[0]
    began = onset(points, run, lambda p: p.value < 0.5 * first)
    since = f", falling since {began.at} (below half its start there)" if began.number < run[0].number else ""
    yield warn(f"{name} fell from {fmt(first)} to {fmt(run[0].value)} {span(run)} (below {fmt(floor)} nats and "
               f"{fmt(fraction * 100)}% of its start){since}: the policy samples nearly the same tokens each time, so "
               "its completions stop differing and it stops exploring", **flagged(run, metric=name, began=began.at))
