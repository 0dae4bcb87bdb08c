"""TW001 zero-advantage: every group's rewards are equal: every advantage is 0, nothing is learned

What it does
  Flags `patience` (5) steps in a row where `frac_reward_zero_std` (trl >= 0.18) is at least `share`
  (0.99), or `reward_std` is 0 (trl <= 0.17, AsyncGRPO: the mean of the groups' spreads); PPO's
  mean score `objective/scores` repeating to 9 digits. A share averaging `mostly` (0.9) over
  `window` (10) steps (a quarter of a shorter log) is a warn, even where a few groups keep a
  spread. Where the ties sit at the run's best reward, with the entropy intact, the task is
  saturated: a warn that says so (near the best reward, also in a run that started there, for a
  windowed share or a stretch that is over); at its worst, nothing is rewarded: a fail. Fewer logs
  than the patience, each with loss 0 and grad_norm 0 too: every signal agrees, a warn. A stretch
  the run's own tie rate before it makes likely by chance (one prompt group a step ties often) is
  no failure, unless the reward fell to it from a good start (a collapse makes ties common).
Why is this bad?
  GRPO and RLOO learn from each reward relative to its group's: with equal rewards in every group
  the advantage is 0 and only the KL term's gradient is left (none with beta 0). Causes: a reward
  that always returns the same value (a format never matched, a failing parser), prompts too hard
  for the policy, num_generations 1-2. Ties at the top reward mean every completion is right: the
  batch teaches little and the task is too easy for the model now.
Example
  {'loss': 0.0, 'reward': 0.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0, ...} log after log.
  A phase that ended (the spread came back) is a warn; one that lasts to the newest log a fail.
Fix safety
  Nothing to rewrite: run the reward functions on a few completions (`trl-doctor check` calls them),
  raise num_generations or temperature, or train on prompts the policy solves sometimes.
  Thresholds: [tool.trl-doctor.watch.zero-advantage] share, patience; mostly, window (the warn).
"""

from __future__ import annotations

import math

from trl_doctor import ALL_TRAINERS, passed, rule, warn
from trl_doctor.facts.metrics import (CHANCE, brief_past, by_chance, by_number, carried, collapsed_entropy, fmt, streak_finding, flagged, kl_term, limit, near_best, ongoing, optional,
                                      patience, pending, reward_fell, reward_level, reward_std_meaning, series, span, streaks,
                                      too_little, window_logs, window_mean)

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
    # ties the run's own rate makes likely (one prompt a step, 2 generations), unless the reward fell to them
    chance = [r for r in runs if (expected := by_chance(points, r, holds)) is not None and expected >= CHANCE
              and not reward_fell(ctx, r)]
    runs = [r for r in runs if r not in chance]
    mostly = _mostly(ctx, points, needed) if not runs and name == "frac_reward_zero_std" else None
    if mostly:  # most of a stretch tied, a few groups keeping a spread: evidence a pending run at the end cannot undo
        yield _finding(ctx, mostly[1], mostly[0], warn_only=True)
        return
    if not runs and (agreed := _every_signal(ctx, points, holds, needed, what)):
        yield agreed
        return
    if not runs and (early := too_little(ctx, points, holds, needed, what)):
        yield early
        return
    if not runs and chance:
        rate = sum(1 for p in points if holds(p)) / len(points)
        yield passed(f"{what} in {fmt(100 * rate)}% of the logs, {span(chance[-1])} the longest stretch: as often as "
                     "ties this common come by chance (a step of few prompt groups ties often), not a failure")
        return
    if not runs:
        worst = max(p.value for p in points) if name == "frac_reward_zero_std" else min(p.value for p in points)
        yield passed(f"the rewards of some groups differ in every stretch of the log ({name}: "
                     f"{'at most' if name == 'frac_reward_zero_std' else 'at least'} {fmt(worst)} over {len(points)} logs)")
        return
    yield _finding(ctx, runs[-1], f"{what}, {span(runs[-1])}")


def _finding(ctx, run, what: str, warn_only: bool = False):
    """The finding for a stretch whose groups tied: saturation (tied at the log's best reward: the task is too easy,
    a warn) told apart from failure (tied at its worst, or where the log cannot tell: nothing is learned). Near the
    best reward, a stretch that is past or where a few groups kept a spread (`warn_only`) is a saturation
    even in a run that started near its best; a tie that lasts there needs the run to have learned its way up (a
    best held from the first log may be a format reward every completion earns)."""
    only = "the only gradient is the KL term's" if kl_term(ctx) else "the trainer has no KL term: the loss is 0"
    level = reward_level(ctx, run)
    over = not warn_only and not ongoing(ctx, run, _spread_metric(ctx))  # a stretch later logs ended
    # most groups tied, a few keeping a spread, near the best reward: saturated though the run started there
    if (level == "top" or (warn_only or over) and near_best(ctx, run)) and not collapsed_entropy(ctx, run):
        message = (f"{what}: saturated, the groups tie at or near the run's best reward (mean reward "
                   f"{_reward(ctx, run)}): "
                   f"every completion of a group earns the same top reward, so those batches teach little "
                   f"({only}); the task is too easy for the model now: train on harder prompts, or raise "
                   "num_generations so that a group holds a wrong answer")
        details = flagged(run, metric=_spread_metric(ctx), saturated=True)
        if over and (blip := brief_past(ctx, run, _spread_metric(ctx))) is not None:
            return passed(f"a brief past phase, over since: {message} ({blip})", **details)
        return warn(message, **details)
    mean = _reward(ctx, run)
    at = "" if level != "bottom" else f" at the run's lowest reward (mean reward {mean})" + (
        ": no completion is rewarded" if mean in ("0", "not logged") or mean.startswith("-") else "")
    cause = (f"every advantage is 0, so the policy learns nothing from its rewards ({only}); check that the reward "
             "functions can tell completions apart, or raise num_generations")
    if warn_only:
        return warn(f"{what}{at}: most of each batch taught nothing ({only}); raise num_generations or check the "
                    "rewards", **flagged(run, metric=_spread_metric(ctx)))
    return streak_finding(ctx, run, f"{what}{at}: {cause}",
                          f"{what}{at}, then the spread came back: those steps learned nothing",
                          brief_ok=level != "bottom",  # nothing rewarded (a cold start) is never a blip
                          metric=_spread_metric(ctx))


def _spread_metric(ctx) -> str:
    name, _ = optional(ctx, "frac_reward_zero_std")
    return name or "reward_std"


def _reward(ctx, run) -> str:
    _, rewards = optional(ctx, "reward", "objective/rlhf_reward")
    at = [v for v in carried(rewards, [p.number for p in run]).values() if math.isfinite(v)]
    return fmt(sum(at) / len(at)) if at else "not logged"


def _every_signal(ctx, points, holds, needed: int, what: str):
    """A warn where the newest logs tie every group for fewer than `needed` logs but every signal agrees at each of
    them: no group's rewards had a spread, the loss is 0 and the gradient norm is 0 (no KL term either): those steps
    changed nothing, a single log is evidence enough to say so (not yet a fail: the next logs decide whether it
    lasts)."""
    run = pending(points, holds, needed)
    if not run:
        return None
    loss, grad = by_number(optional(ctx, "loss")[1]), by_number(optional(ctx, "grad_norm")[1])
    if not all(loss.get(p.number) == 0 and grad.get(p.number) == 0 for p in run):
        return None
    return warn(f"{what} {span(run)}, with loss 0 and grad_norm 0 at each: every signal agrees that those steps "
                "changed nothing (every advantage 0, no KL term); the next logs decide whether it lasts: check that "
                "the reward functions can tell completions apart", **flagged(run, metric=_spread_metric(ctx)))


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


def _mostly(ctx, points, needed: int):
    """(words, the window's points) where the share of groups without spread averaged `mostly` (0.9) or more over
    `window` (10) steps' logs in a row (a quarter of a shorter log): most of the batch carried no signal, though never
    all of it for `patience` logs."""
    window = window_logs(ctx, limit(ctx, SLUG, "window", 10), points, needed)
    found = window_mean([p for p in points if math.isfinite(p.value)], window, limit(ctx, SLUG, "mostly", 0.9))
    if found is None:
        return None
    chunk, share = found
    return f"frac_reward_zero_std averaged {fmt(share)} {span(chunk)}: most groups' rewards had no spread", chunk
