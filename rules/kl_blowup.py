"""TW006 kl-blowup: the KL to the reference exploded, or PPO's KL went negative

What it does
  Reads the KL the job logs: GRPO's `kl` (per token), PPO's and the PPO-style RLOO's
  `objective/kl` (per sequence, summed over its tokens); AsyncGRPO's `kl` is no KL to a reference
  (it has none): `skip`. It fails where the per-token KL stays above `max` (10 nats) for
  `patience` (3) steps, warns above `high` (1 nat), unless those were brief past phases (each
  under a tenth of the run, all under a fifth, five times as many logs after: noted in a pass);
  `objective/kl` is divided by the response length (the mean logged, else response_length: 53 when
  unknown, PPOConfig's default), so a token's KL is never overstated. A negative `objective/kl` is
  a warn: KL(pi || pi_ref) is never negative, its estimate is when the rollout was sampled from
  another distribution than the one scored. The estimate (a mean of log-ratios over a batch's
  sampled tokens) is noisy: it must average below -`negative` (0.01) nats a token over `window`
  (10) steps, 80% of its logs below 0 (a real PPO run at learning rate 0 logged -0.0003 a
  sequence; a healthy one, 4 completions a batch, 38% of its 200 logs below 0, 3 in a row at -0.02
  a token).
Why is this bad?
  A KL that explodes means the policy left the reference far behind: its text degenerates and the KL
  penalty dominates the reward (a learning rate too high, a reward being hacked). TRL's docs read a
  negative objective/kl as a bug in the rollout (generation temperature differing from the scoring
  one, or a response truncated after its eos).
Example
  {'kl': 37.5, 'loss': 1.5, ...} a few logs after {'kl': 0.02, ...}.
Fix safety
  Nothing to rewrite: lower the learning rate, raise beta, or find the reward being hacked.
  Thresholds: [tool.trl-doctor.watch.kl-blowup] max, high, negative, window, patience.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, fail, passed, rule, warn
from trl_doctor.facts.metrics import (brief_past_all, by_number, flagged, fmt, judged, limit, logs_for, optional, patience,
                                      range_of, series, span, streaks, too_little)
from trl_doctor.facts.launch.settings import config_value

SLUG = "kl-blowup"


@rule(id="TW006", slug=SLUG, title="KL exploded or went negative", trainers=ALL_TRAINERS,
      contexts=("watch",))
def judge(ctx):
    judged(ctx, SLUG)  # AsyncGRPO's `kl` is not to a reference (trl_doctor.facts.metrics)
    name, points = series(ctx, "kl", "objective/kl")
    n = patience(ctx, SLUG, 3)
    top, high = limit(ctx, SLUG, "max", 10.0), limit(ctx, SLUG, "high", 1.0)
    per_token = _per_token(ctx, name)
    for bound, verdict, words in ((top, fail, "exploded"), (high, warn, "is high")):
        runs = streaks(points, lambda p, bound=bound: per_token(p) > bound, n)
        if runs:
            run = runs[0]
            said = (f"{name} {words}: {fmt(run[0].value)} {span(run)} (above {fmt(bound)} nats a token): the policy "
                    "has left its reference far behind; lower the learning rate or raise beta")
            # high in short stretches the job got over (a warm-up transient, isolated spikes): no level, noted
            blip = brief_past_all(ctx, runs, name) if verdict is warn else None
            if blip is not None:
                yield passed(f"a brief past phase, over since: {said} ({blip})", **flagged(run, metric=name))
                return
            yield verdict(said, **flagged(run, metric=name))
            return
    if name == "objective/kl":
        below = limit(ctx, SLUG, "negative", 0.01)
        window = logs_for(ctx, limit(ctx, SLUG, "window", 10))
        run = _negative(points, per_token, window, below)
        if not run and (early := too_little(ctx, points, lambda p: per_token(p) < -below, window, f"{name} negative")):
            yield early
            return
        if run:
            yield warn(f"objective/kl is negative, {fmt(run[0].value)} {span(run)}: KL(policy || reference) is never "
                       "negative, so the rollout was scored with another distribution than it was sampled from "
                       "(a generation temperature differing from the trainer's, a response going on past its eos)",
                       **flagged(run, metric=name))
            return
    yield passed(f"{name} {range_of(points)}")


def _per_token(ctx, name: str):
    """The KL a token: GRPO's is one; PPO's objective/kl is summed over the response: divided by its mean length where
    the job logs one, else by the longest a response may be (so a token's KL is never overstated)."""
    if name == "kl":
        return lambda p: p.value
    _, lengths = optional(ctx, "completions/mean_length")
    by = by_number(lengths)
    longest = config_value(ctx, "response_length") or 53  # PPOConfig's default response_length
    return lambda p: p.value / (by.get(p.number) or longest)


NEGATIVE_SHARE = 0.8  # of a window's logs below 0: the noise of a small batch's estimate crosses 0 often, a bug rarely


def _negative(points, per_token, window: int, below: float):
    """The stretch whose windows of `window` logs average below -`below` a token with NEGATIVE_SHARE of them below 0:
    from the first such window's first negative log to the last such window's last one; None when no window is."""
    from statistics import fmean

    window = max(1, window)
    held = {i for i in range(window, len(points) + 1)  # i: the window ending before points[i]
            if fmean(per_token(p) for p in points[i - window:i]) < -below
            and sum(per_token(p) < 0 for p in points[i - window:i]) >= NEGATIVE_SHARE * window}
    if not held:
        return None
    first = last = min(held)
    while last + 1 in held:
        last += 1
    stretch = [p for p in points[first - window:last] if per_token(p) < 0]
    return stretch or None
