"""TW010 reward-hacking: one reward rises while another falls as the completions shrink

What it does
  With two reward functions or more (`rewards/<f>/mean`; `rewards/<f>` on trl <= 0.16) and the mean
  completion length, it compares the log's start (its first tenth) with its last third (`min_logs`:
  12 logs at least): a warn when one reward rose and another fell, each by `effect` (0.75) standard
  deviations of its logged values, while the mean completion length fell by `shrink` (20%) or more.
Why is this bad?
  The policy has found the cheaper reward: it gains on one function (a format, a length bonus) by
  giving up the other (correctness), and shorter completions are how it does so. The total reward
  still rises, so the curve everyone watches looks healthy. A warn: whether the trade is wanted is
  the author's call.
Example
  rewards/format_reward/mean 0.2 -> 0.95, rewards/accuracy_reward/mean 0.4 -> 0.1,
  completions/mean_length 310 -> 42.
Fix safety
  Nothing to rewrite: look at the completions (log_completions), reweigh the functions
  (reward_weights), make the format reward conditional on the answer.
  Thresholds: [tool.trl-doctor.watch.reward-hacking] effect, shrink, min_logs.
"""

from __future__ import annotations

from statistics import fmean, pstdev

from trl_doctor import Unavailable, passed, rule, warn
from trl_doctor.facts.metrics import fmt, history, limit, series

SLUG = "reward-hacking"


@rule(id="TW010", slug=SLUG, title="A reward rises while another falls as completions shrink", severity="warn",
      trainers=("grpo", "rloo", "other"), contexts=("watch",))
def judge(ctx):
    names = sorted(n for n in history(ctx).names() if n.startswith("rewards/") and n.endswith("/mean"))
    if len(names) < 2:
        raise Unavailable(f"needs two reward functions' logged means or more; the log has {len(names)}")
    _, lengths = series(ctx, "completions/mean_length")
    if len(lengths) < int(limit(ctx, SLUG, "min_logs", 12)):
        raise Unavailable(f"needs {int(limit(ctx, SLUG, 'min_logs', 12))} logs or more to see a trend; the log has {len(lengths)}")
    effect, shrink = limit(ctx, SLUG, "effect", 0.75), limit(ctx, SLUG, "shrink", 0.2)
    moves = {name: _move(series(ctx, name)[1]) for name in names}
    up = sorted((n for n, m in moves.items() if m >= effect), key=lambda n: -moves[n])  # the largest moves first
    down = sorted((n for n, m in moves.items() if m <= -effect), key=lambda n: moves[n])
    first, last = _thirds([p.value for p in lengths])
    shrank = first > 0 and (first - last) / first >= shrink
    if up and down and shrank:
        yield warn(f"{_name(up[0])} rose while {_name(down[0])} fell (by {fmt(moves[up[0]])} and {fmt(-moves[down[0]])} "
                   f"standard deviations, the log's start to its last third) as the mean completion length fell from "
                   f"{fmt(first)} to {fmt(last)}: the policy may be trading one reward for the other; read its completions",
                   metric=up[0], since_log=lengths[len(lengths) * 2 // 3].number)
        return
    yield passed(f"no reward traded against another with shrinking completions over {len(lengths)} logs "
                 f"({', '.join(f'{_name(n)} {fmt(m)} sd' for n, m in moves.items())})")


def _thirds(values: list[float]) -> tuple[float, float]:
    """The start (the first tenth of the log, at least 2 logs) and the end (the last third)."""
    start, end = max(2, len(values) // 10), max(1, len(values) // 3)
    return fmean(values[:start]), fmean(values[-end:])


def _move(points) -> float:
    """How far the last third's mean moved from the first third's, in standard deviations of all logged values."""
    values = [p.value for p in points]
    spread = pstdev(values) if len(values) > 1 else 0.0
    first, last = _thirds(values)
    return 0.0 if spread == 0 else (last - first) / spread


def _name(metric: str) -> str:
    return metric.split("/")[1]
