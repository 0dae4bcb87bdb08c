"""TW008 grad-spike: the gradient norm spikes far above its running level, again and again

What it does
  Marks a spike where `grad_norm` is at least `factor` (10) times the median of the norms above
  `floor` (1e-3) among the `window` (20) logs before it (once 5 such logs are there: a level of 0,
  where most steps had no gradient, is no scale to spike over), and warns when the log has `count`
  (3) spikes or more. Logs with no reward spread (and the steps that train on their batch) are left
  out: their gradient is the KL term's alone, far below a policy-gradient step's. One spike is
  common in healthy runs (and max_grad_norm clips it): it is listed, not flagged.
Why is this bad?
  Repeated spikes precede divergence: the loss jumps, the KL grows, and a NaN often follows. The
  10x-median test is the spike detector large-model training reports use (e.g. OLMo 2,
  arXiv:2501.00656, sec. 3.2). A warn: the job still trains.
Example
  {'grad_norm': 48.2, ...} where the 20 logs before had a median of 0.9, three times in the log.
Fix safety
  Nothing to rewrite: lower the learning rate, set max_grad_norm (1.0), warm up longer.
  Thresholds: [tool.trl-doctor.watch.grad-spike] factor, window, floor, count.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from statistics import median

from trl_doctor import ALL_TRAINERS, passed, rule, skip, warn
from trl_doctor.facts.metrics import finite, flagged, fmt, kl_term, limit, no_spread, series

SLUG = "grad-spike"


@rule(id="TW008", slug=SLUG, title="Repeated gradient-norm spikes", severity="warn",
      trainers=ALL_TRAINERS, contexts=("watch",))
def judge(ctx):
    _, grad = series(ctx, "grad_norm")
    factor, floor = limit(ctx, SLUG, "factor", 10.0), limit(ctx, SLUG, "floor", 1e-3)
    window, count = int(limit(ctx, SLUG, "window", 20)), int(limit(ctx, SLUG, "count", 3))
    # no policy-gradient signal: the KL term's gradient alone, or none (AsyncGRPO's), also at the steps that train on a
    # tied generation
    silent = no_spread(ctx, [p.number for p in grad])
    values = [p for p in grad if finite(p.value) and p.number not in silent]
    spikes, ordered = [], []  # `ordered`: the window's values above the floor, sorted (a running median)
    for i, p in enumerate(values):
        if len(ordered) >= 5:  # a level needs a scale: the median of the window's non-zero norms, never 0
            level = median(ordered)
            if p.value >= factor * level and p.value > floor:
                spikes.append((p, level))
        if p.value > floor:
            insort(ordered, p.value)
        if i >= window and values[i - window].value > floor:
            del ordered[bisect_left(ordered, values[i - window].value)]
    scaled = sum(1 for p in values if p.value > floor)
    if scaled <= 5 + count - 1:  # no running median before the 6th non-zero log: not one spike could be judged yet
        only = "only the KL term's gradient" if kl_term(ctx) else "no gradient at all: the trainer has no KL term"
        why = f" (the others had no reward spread: {only})" if silent else ""
        zeros = f", {len(values) - scaled} of them {fmt(floor)} or less" if scaled < len(values) else ""
        yield skip(f"{len(values)} grad_norm logs to judge{zeros}{why}: spikes are measured against the median of "
                   f"the non-zero norms before them, from the 6th on; {5 + count} are needed to see {count}")
        return
    if len(spikes) < count:
        listed = f"; {len(spikes)} spike(s): " + ", ".join(f"{fmt(p.value)} at {p.at}" for p, _ in spikes) if spikes else ""
        yield passed(f"grad_norm without repeated spikes over {len(values)} logs{listed}")
        return
    shown = ", ".join(f"{fmt(p.value)} at {p.at} (median {fmt(level)})" for p, level in spikes[:4])
    yield warn(f"grad_norm spiked {len(spikes)} times to {fmt(factor)}x or more its running median: {shown}; repeated "
               "spikes precede divergence: lower the learning rate or set max_grad_norm",
               **flagged([p for p, _ in spikes], metric="grad_norm"))
