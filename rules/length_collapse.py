"""TW012 length-collapse: the completions collapsed to a few tokens

What it does
  Reads the mean completion length (`completions/mean_length`; `completion_length` on trl <= 0.16;
  PPO logs none: skip) and flags `patience` (5) steps in a row at or below
  `tokens` (8) and below `fraction` (25%) of its start (its first log, or its first 3's median). The
  finding names where the fall began (below half the start) and the entropy beside it.
Why is this bad?
  A policy that answers in a handful of tokens has stopped reasoning: an empty answer, a lone
  format tag, or the same short string each time. Rewards that pay for a format or punish length
  are the usual cause; with the entropy falling too it is a collapse, and it rarely recovers. A
  task whose answers were a few tokens from the start is not flagged (the fall is from its own
  start).
Example
  {'completions/mean_length': 3.2, 'reward': 0.1, 'frac_reward_zero_std': 0.9, ...} for the rest of
  a run that began at 180 tokens.
Fix safety
  Nothing to rewrite: read the completions (log_completions), check the format reward against the
  answer, lower the learning rate.
  Thresholds: [tool.trl-doctor.watch.length-collapse] tokens, fraction, patience.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, passed, rule, warn
from trl_doctor.facts.metrics import (carried, flagged, fmt, limit, onset, optional, patience, series, span,
                                      start_level, streaks, too_little)

SLUG = "length-collapse"


@rule(id="TW012", slug=SLUG, title="Completions collapsed to a few tokens", severity="warn", trainers=ALL_TRAINERS,
      contexts=("watch",))
def judge(ctx):
    name, points = series(ctx, "completions/mean_length")
    first = start_level(points)
    tokens, fraction = limit(ctx, SLUG, "tokens", 8), limit(ctx, SLUG, "fraction", 0.25)
    holds, needed = (lambda p: p.value <= tokens and p.value < fraction * first), patience(ctx, SLUG, 5)
    runs = streaks(points, holds, needed)
    what = f"{name} at most {fmt(tokens)} tokens"
    if not runs and (early := too_little(ctx, points, holds, needed, what)):
        yield early
        return
    if not runs:
        yield passed(f"{name} from {fmt(first)} to {fmt(points[-1].value)} over {len(points)} logs: no collapse to a "
                     "few tokens")
        return
    run = runs[0]
    began = onset(points, run, lambda p: p.value < 0.5 * first)
    since = f", falling since {began.at} (below half its start there)" if began.number < run[0].number else ""
    yield warn(f"{name} fell from {fmt(first)} to {fmt(run[0].value)} tokens {span(run)}{since}{_entropy(ctx, run)}: "
               "the policy answers in a few tokens (an empty answer, a lone tag, one short string); read its "
               "completions and check what the rewards pay for", **flagged(run, metric=name, began=began.at))


def _entropy(ctx, run) -> str:
    """`, with the entropy at 0.02 (from 0.6)` where the job logs one."""
    name, entropy = optional(ctx, "entropy", "policy/entropy_avg")
    if name is None:
        return ""
    at = list(carried(entropy, [p.number for p in run]).values())
    return f", with {name} at {fmt(sum(at) / len(at))} (from {fmt(start_level(entropy))})" if at else ""
