"""Facts about a job's logged metrics, for the watch rules (the `watch` context, trl_doctor.interface).

A watch rule reads a quantity by the names the releases gave it (`series(ctx, "frac_reward_zero_std")`), finds where a
condition held for enough logs in a row (`streak`), and reads its thresholds through `limit`, which the project config
can change (`[tool.trl-doctor.watch.<slug>]`, or `[watch.<slug>]` in .trl-doctor.toml). Outside the watch context
these facts are unavailable (the rule is `skip`).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, NamedTuple

from trl_doctor.errors import Unavailable


class Point(NamedTuple):
    """One logged value: the log it came from (`at`: "step 40" or "log 4"), its number in the log, its step."""

    at: str
    number: int
    step: int | None
    value: float


def history(ctx):
    """The watched job's logs (trl_doctor.watch.history.History); Unavailable outside the watch."""
    found = getattr(ctx, "history", None)
    if found is None:
        raise Unavailable("judged on a job's logged metrics: `trl-doctor watch PATH` or DoctorCallback(watch=True)")
    return found


def series(ctx, *names: str) -> tuple[str, list[Point]]:
    """The first of `names` the job logged, and its values, oldest first; Unavailable naming them when it logged none."""
    logs = history(ctx)
    for name in names:
        points = logs.column(name)
        if points:
            return name, points
    raise Unavailable(f"the log has no {' or '.join(names)}")


def optional(ctx, *names: str) -> tuple[str, list[Point]] | tuple[None, list[Point]]:
    """`series`, or (None, []) when the job logged none of `names`."""
    try:
        return series(ctx, *names)
    except Unavailable:
        return None, []


def by_number(points: Iterable[Point]) -> dict[int, float]:
    return {p.number: p.value for p in points}


def streak(points: list[Point], holds: Callable[[Point], bool], patience: int) -> list[Point] | None:
    """The first run of at least `patience` consecutive logged values for which `holds` is true (extended to its
    end), or None. Its first point is where the failure starts."""
    run: list[Point] = []
    for p in points:
        if holds(p):
            run.append(p)
        else:
            if len(run) >= patience:
                return run
            run = []
    return run if len(run) >= max(patience, 1) else None


def streaks(points: list[Point], holds: Callable[[Point], bool], patience: int) -> list[list[Point]]:
    """Every run of at least `patience` consecutive logged values for which `holds` is true, oldest first."""
    out: list[list[Point]] = []
    run: list[Point] = []
    for p in points:
        if holds(p):
            run.append(p)
            continue
        if len(run) >= patience:
            out.append(run)
        run = []
    if len(run) >= max(patience, 1):
        out.append(run)
    return out


def ongoing(ctx, run: list[Point]) -> bool:
    """Whether `run` lasts to the newest log: the failure is still going on (a run that ended is a past phase)."""
    logs = history(ctx).logs
    return bool(logs) and run[-1].number == logs[-1].number


def finite(value: float) -> bool:
    return math.isfinite(value)


def near(a: float, b: float, rel: float = 1e-3, abs_: float = 1e-6) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def limit(ctx, slug: str, name: str, default: float) -> float:
    """A watch rule's threshold: the project config's `[watch.<slug>] <name> = ...` when set, else `default` (the
    rule's docstring says where each default comes from)."""
    table = (getattr(ctx, "thresholds", None) or {}).get(slug) or {}
    value = table.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return value


def patience(ctx, slug: str, default: int = 3) -> int:
    """How many logs in a row a condition must hold before a rule flags it (`[watch.<slug>] patience`)."""
    return max(1, int(limit(ctx, slug, "patience", default)))


def fmt(value: float) -> str:
    """A metric value as a finding prints it."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 1e-3:
        return f"{value:.3g}"
    return f"{value:.4g}"


def range_of(points: list[Point]) -> str:
    """`0.1 to 0.5 over 8 logs`: what a pass says it saw."""
    finite_values = [p.value for p in points if math.isfinite(p.value)] or [p.value for p in points]
    return f"{fmt(min(finite_values))} to {fmt(max(finite_values))} over {len(points)} logs"


def span(run: list[Point]) -> str:
    """`from step 4 to step 12 (5 logs)`."""
    if len(run) == 1:
        return f"at {run[0].at}"
    return f"from {run[0].at} to {run[-1].at} ({len(run)} logs)"


def flagged(run: list[Point], **more) -> dict:
    """The details a watch finding carries: where it starts and ends (the log numbers the sparklines and the plot
    mark; `logs` lists them where they are apart, as a rule's spikes are)."""
    numbers = [p.number for p in run]
    apart = numbers != list(range(numbers[0], numbers[0] + len(numbers)))
    return {"since": run[0].at, "since_log": numbers[0], "until_log": numbers[-1], **({"logs": numbers} if apart else {}),
            **more}


def streak_finding(ctx, run: list[Point], now: str, past: str, **details):
    """A streak's finding: a fail saying `now` while it lasts to the newest log, a warn saying `past` when later logs
    ended it (a past phase: those steps are lost, the job is not failing now)."""
    from trl_doctor.types import fail, warn

    if ongoing(ctx, run):
        return fail(now, **flagged(run, **details))
    return warn(past, **flagged(run, **details))


def marked(details) -> set[int]:
    """The log numbers a finding's details flag (see `flagged`)."""
    if details.get("logs"):
        return set(details["logs"])
    if "since_log" in details:
        return set(range(details["since_log"], details.get("until_log", details["since_log"]) + 1))
    return set()


def preflight(ctx, slug: str) -> tuple[str, str] | None:
    """(status, message) of the preflight check's rule `slug` on this job, when the watch has that report."""
    found = (getattr(ctx, "preflight", None) or {}).get(slug)
    return (found["status"], found["message"]) if found else None
