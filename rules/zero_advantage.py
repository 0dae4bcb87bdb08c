"""TW001 zero-advantage: every group's rewards are equal: every advantage is 0, nothing is learned

What it does
  Reads `frac_reward_zero_std` (trl >= 0.18: the share of prompt groups whose rewards have no
  spread) and flags `patience` (5) steps in a row where it is at least `share` (0.99: every group).
  On a release without it (trl <= 0.17) `reward_std` is the mean of the groups' spreads, and 0 says
  the same, as in AsyncGRPO's logs (each trained sample's group spread, averaged). `rewards/<f>/std`
  is one function's spread over the whole batch, not the group spread: it is not read. PPO (and the
  PPO-style RLOO of trl <= 0.21) logs only the batch's mean score, `objective/scores`: the same
  value to 9 digits for `patience` steps in a row says the reward model scores every completion
  alike (a real model's mean over a new batch never repeats).
Why is this bad?
  GRPO and RLOO learn from each reward relative to its group's: with equal rewards in every group
  the advantage is 0, and the only gradient left is the KL term's (none with beta 0). The job spends
  its budget generating and learns nothing. Causes: a reward that always returns the same value (a
  format it never matches, a parser that fails), prompts too hard or too easy for the policy,
  num_generations 1-2. Users write their own abort callbacks for this ("10 steps of zero reward
  spread"); 5 steps (2 logs at logging_steps 10) is the default: a job with no rewarded completion
  in 5 steps rarely recovers.
Example
  {'loss': 0.0, 'reward': 0.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0, ...} log after log.
  A phase that ended (the spread came back) is a warn; one that lasts to the newest log is a fail. A
  share averaging `mostly` (0.9) over `window` (10) logs is a warn: most of each batch taught
  nothing.
Fix safety
  Nothing to rewrite: run the reward functions on a few completions (`trl-doctor check` calls them),
  raise num_generations or temperature, or train on prompts the policy solves sometimes.
  Thresholds: [tool.trl-doctor.watch.zero-advantage] share, patience; mostly, window (the warn).
"""

from __future__ import annotations

import math

from trl_doctor import ALL_TRAINERS, passed, rule, warn
from trl_doctor.facts.metrics import (fmt, streak_finding, flagged, kl_term, limit, logs_for, optional, patience,
                                      reward_std_meaning, series, span, streaks, too_little, window_mean)

SLUG = "zero-advantage"


@rule(id="TW001", slug=SLUG, title="Every group's rewards equal: zero advantage", trainers=ALL_TRAINERS,
      contexts=("watch",))
def judge(ctx):
    name, points = optional(ctx, "frac_reward_zero_std")
    share = limit(ctx, SLUG, "share", 0.99)
    if name is not None:
        holds = lambda p: p.value >= share
        what = f"frac_reward_zero_std >= {fmt(share)}: no group's rewards had any spread"
    elif (found := optional(ctx, "reward_std"))[0] is not None:
        name, points = found
        holds = lambda p: abs(p.value) <= 1e-8
        what = f"reward_std 0 ({reward_std_meaning(ctx)}): no group had any spread"
    else:
        yield from _same_score(ctx)
        return
    needed = patience(ctx, SLUG, 5)
    runs = streaks(points, holds, needed)
    if not runs and (early := too_little(ctx, points, holds, needed, what)):
        yield early
        return
    if not runs and name == "frac_reward_zero_std":
        mostly = _mostly(ctx, points)
        if mostly:
            yield warn(mostly[0], **mostly[1])
            return
    if not runs:
        worst = max(p.value for p in points) if name == "frac_reward_zero_std" else min(p.value for p in points)
        yield passed(f"the rewards of some groups differ in every stretch of the log ({name}: "
                     f"{'at most' if name == 'frac_reward_zero_std' else 'at least'} {fmt(worst)} over {len(points)} logs)")
        return
    run = runs[-1]
    only = "the only gradient is the KL term's" if kl_term(ctx) else "the trainer has no KL term: the loss is 0"
    cause = (f"every advantage is 0, so the policy learns nothing from its rewards ({only}); check that the reward "
             "functions can tell completions apart, or raise num_generations")
    yield streak_finding(ctx, run, f"{what}, {span(run)}: {cause}",
                         f"{what}, {span(run)}, then the spread came back: those steps learned nothing", metric=name)


def _same_score(ctx):
    """PPO's reading: `objective/scores`, the batch's mean reward-model score, repeating exactly."""
    name, points = series(ctx, "frac_reward_zero_std", "reward_std", "objective/scores")
    same = {q.number for p, q in zip(points, points[1:]) if _equal(p.value, q.value) for q in (p, q)}
    runs = streaks(points, lambda p: p.number in same, patience(ctx, SLUG, 5))
    if not runs:
        yield passed(f"{name} changes from log to log ({len(points)} logs): the reward model tells completions apart")
        return
    run = runs[-1]
    what = (f"{name} is {fmt(run[0].value)} in every log {span(run)}: the reward model gives every completion the "
            "same score")
    yield streak_finding(ctx, run, f"{what}, so the advantages hold no reward signal (only the KL penalty's and the "
                         "value model's) and nothing is learned from the reward; check the reward model's head and its "
                         "inputs", f"{what}, then the scores began to differ: those steps learned nothing from the reward",
                         metric=name)


def _equal(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _mostly(ctx, points):
    """(message, details) where the share of groups without spread averaged `mostly` (0.9) or more over `window`
    (10) logs in a row: most of the batch carried no signal, though never all of it for `patience` logs."""
    window, mostly = logs_for(ctx, limit(ctx, SLUG, "window", 10)), limit(ctx, SLUG, "mostly", 0.9)
    found = window_mean([p for p in points if math.isfinite(p.value)], window, mostly)
    if found is None:
        return None
    chunk, share = found
    return (f"frac_reward_zero_std averaged {fmt(share)} {span(chunk)}: most groups' rewards had no spread, so "
            "most of each batch taught nothing; raise num_generations or check the rewards",
            flagged(chunk, metric="frac_reward_zero_std"))
