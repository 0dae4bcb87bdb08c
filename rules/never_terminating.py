"""TW002 never-terminating: the completions never end: every one runs to the length limit

What it does
  Flags `patience` (5) steps in a row where `completions/clipped_ratio` is at least `share`
  (0.99) or `completions/mean_terminated_length` is 0 (trl >= 0.17), PPO's `val/num_eos_tokens` 0,
  or, on trl <= 0.16, where `completion_length` equals the job's max_completion_length (known in the
  job, or from --config; without either, a mean that sits at one whole number, the highest it
  reaches, log after log, is that limit: only completions all cut there average a whole number
  again and again). It names the preflight's eos-termination verdict when the job has one.
Why is this bad?
  A completion that never emits its end-of-turn token is cut at max_completion_length: each costs
  the whole budget, format rewards never match, and the policy learns from truncated text. The usual
  cause is an eos the generation does not stop at (a chat model's <|im_end|> or <|eot_id|> missing
  from generation_config.json's eos_token_id), or a base model with a chat template it never
  learned. Where the completions ended at the start and then stopped ending, the stop tokens work:
  the policy stopped emitting them (it drifted, or a reward pays for length), and the finding says
  so.
Example
  {'completions/clipped_ratio': 1.0, 'completions/mean_terminated_length': 0.0, ...} from the first
  log.
Fix safety
  Nothing to rewrite from the log: `trl-doctor check` (eos-termination, generation-settings) finds
  and fixes the stop tokens; or mask_truncated_completions / a larger max_completion_length.
  Averaging `mostly` (0.9) over `window` (100) steps (a quarter of a shorter log) without such a
  streak: a warn. Where the reward rose steadily through the stretch (10 logs or more, Mann-Kendall
  z >= 3), the job learns at that length (a continuation task's fixed length): a pass that says so.
  Thresholds: [tool.trl-doctor.watch.never-terminating] share, patience; mostly, window.
"""

from __future__ import annotations

import math

from trl_doctor import ALL_TRAINERS, passed, rule, warn
from trl_doctor.facts.metrics import (range_of, reward_rising, streak_finding, fmt, limit, optional, patience, preflight,
                                      series, span, streaks, too_little, flagged, window_logs, window_mean)
from trl_doctor.facts.launch.settings import config_value

SLUG = "never-terminating"


@rule(id="TW002", slug=SLUG, title="Completions never end: all run to the length limit",
      trainers=ALL_TRAINERS, contexts=("watch",))
def judge(ctx):
    share = limit(ctx, SLUG, "share", 0.99)
    longest = config_value(ctx, "max_completion_length") or config_value(ctx, "response_length")
    name, points = optional(ctx, "completions/clipped_ratio")
    if name is not None:
        holds, what = (lambda p: p.value >= share), f"completions/clipped_ratio >= {fmt(share)}"
    elif (found := optional(ctx, "val/num_eos_tokens"))[0] is not None:
        name, points = found
        holds, what = (lambda p: p.value <= 0), "val/num_eos_tokens 0: no response held an eos token"
    else:
        name, points = series(ctx, "completions/mean_length")
        inferred = "" if longest else _pinned_limit(ctx, points)
        if inferred:
            longest, inferred = inferred
        if not longest:
            from trl_doctor import Unavailable

            raise Unavailable("this release logs only the mean completion length, and it never sits at one whole "
                              "number as a limit does: give the recipe (--config) so that its max_completion_length "
                              "is known")
        holds, what = (lambda p: p.value >= longest - 1e-6), f"every completion {longest} tokens long{inferred}"
    needed = patience(ctx, SLUG, 5)
    runs = streaks(points, holds, needed)
    if not runs and name == "completions/clipped_ratio" and (mostly := _mostly(ctx, points, longest, needed)):
        chunk = [p for p in points if mostly[1]["since_log"] <= p.number <= mostly[1]["until_log"]]
        if (learning := _learning_anyway(ctx, chunk)) is not None:
            yield passed(f"{mostly[0]}; but {learning}", **mostly[1])
            return
        yield warn(mostly[0], **mostly[1])  # most of a stretch cut at the limit: a pending run at the end is no less
        return
    if not runs and (early := too_little(ctx, points, holds, needed, what)):
        yield early
        return
    if not runs:
        yield passed(f"completions end before the limit ({name} {range_of(points)})")
        return
    run = runs[-1]
    limit_words = f" (max_completion_length {longest})" if longest else ""
    if (learning := _learning_anyway(ctx, run)) is not None:
        yield passed(f"{what}, {span(run)}: every completion ran to the length limit{limit_words}; but {learning}",
                     **flagged(run, metric=name))
        return
    found = preflight(ctx, "eos-termination")
    before = f"; the preflight's eos-termination said {found[0]}: {found[1]}" if found and found[0] != "pass" else ""
    ended = [p for p in points if p.number < run[0].number and not holds(p)]
    if ended:  # they ended before: the stop tokens work, the policy stopped emitting them
        message = (f"{what}, {span(run)}: the completions never end and all run to the length limit{limit_words}; "
                   f"they ended until {ended[-1].at}, so the stop tokens work and the policy stopped emitting them "
                   "(a policy drifting from its reference: see kl-blowup and entropy-collapse; or a reward that pays "
                   "for length)")
    else:
        message = (f"{what}, {span(run)}: the completions never end and all run to the length limit{limit_words}; "
                   f"check the stop tokens (`trl-doctor check`: eos-termination){before}")
    yield streak_finding(ctx, run, message, message.replace("never end", "did not end") + ", before they began to end",
                         metric=name)


def _learning_anyway(ctx, run) -> str | None:
    """Where the reward rose steadily through the stretch cut at the limit, why that is no failure, in words (None
    where it did not, or where the preflight found the stop tokens broken): the job learns at this length, as a
    continuation task whose fixed length is its design does (an IMDb review continued for 32 tokens, never ended)."""
    rose = reward_rising(ctx, run)
    found = preflight(ctx, "eos-termination")
    if rose is None or (found and found[0] == "fail"):
        return None
    return (f"{rose}: the job learns at this length (a task whose length cap is its design, or answers read from the "
            "cut text); raise max_completion_length if its answers must finish")


def _mostly(ctx, points, longest, needed: int):
    """(message, details) where the share of completions cut at the limit averaged `mostly` (0.9) over `window` (100)
    steps' logs (a quarter of a shorter log): nearly every completion ran to the limit, though no streak of logs
    reached `share` (a few ended in each)."""
    window = window_logs(ctx, limit(ctx, SLUG, "window", 100), points, needed)
    found = window_mean([p for p in points if math.isfinite(p.value)], window, limit(ctx, SLUG, "mostly", 0.9))
    if found is None:
        return None
    chunk, share = found
    limit_words = f" (max_completion_length {longest})" if longest else ""
    return (f"completions/clipped_ratio averaged {fmt(share)} {span(chunk)}: nearly every completion ran to the length "
            f"limit{limit_words} and was cut; check the stop tokens (`trl-doctor check`: eos-termination) or raise "
            "max_completion_length", flagged(chunk, metric="completions/clipped_ratio"))


def _pinned_limit(ctx, points) -> tuple[int, str] | None:
    """(the limit, words) where trl <= 0.16's mean completion length sits at one whole number, the highest it ever
    reaches, for `patience` logs: a mean over a batch's completions is a whole number again and again only when every
    completion has that length, the limit they were cut at (`completion_length` 128.0 at 99 logs of 100)."""
    values = [p.value for p in points if math.isfinite(p.value)]
    if not values:
        return None
    top = max(values)
    if top < 1 or top != int(top):
        return None
    at = [p for p in points if p.value == top]
    if len(at) < max(3, patience(ctx, SLUG, 5)):
        return None
    return int(top), (f" (the mean length is exactly {int(top)} at {len(at)} of {len(points)} logs and never more: "
                      "the limit every completion was cut at)")
