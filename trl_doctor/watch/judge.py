"""The watch's engine: the watch rules' judgments over one context, as Results (the engine's run_rule: timing,
folding, a crash as `error`, a fact the log lacks as `skip`), the report, and the terminal's sparklines."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Iterable

from trl_doctor.types import Result

# drawn under the table when logged, besides each metric a rule flagged
SHOWN = ("reward", "frac_reward_zero_std", "reward_std", "completions/clipped_ratio", "completions/mean_length",
         "val/num_eos_tokens", "loss", "kl", "objective/kl", "entropy", "policy/entropy_avg", "grad_norm",
         "learning_rate", "lr", "policy/clipfrac_avg")


def watch_rules(select: Iterable[str] = (), ignore: Iterable[str] = (), rules: list | None = None) -> list:
    """The rules with a watch judgment, narrowed by select/ignore (ids or slugs of any rule: a preflight rule's name
    is looked up in the whole registry, which is imported only then)."""
    from trl_doctor.registry import RegistryError, all_rules, select_rules

    try:
        chosen = select_rules(all_rules("watch") if rules is None else rules, select, ignore)
    except RegistryError:
        chosen = select_rules(all_rules(), select, ignore)
    return [r for r in chosen if "watch" in r.contexts]


def judge(ctx, rules: list) -> list[Result]:
    return [_costed(_judged(r, ctx), ctx.history) for r in rules]


def _judged(rule, ctx) -> Result:
    """One watch rule's result. A watch rule reads logged metrics, not the user's files, so an InputError it raises
    is its own crash (a plugin's), an `error` like any other, never the end of the watch."""
    from trl_doctor.engine import run_rule
    from trl_doctor.errors import InputError
    from trl_doctor.types import Status

    try:
        return run_rule(rule, ctx)
    except InputError as exc:
        return Result(rule.id, rule.slug, rule.title, Status.ERROR, f"the rule crashed: InputError: {exc}", {}, None, 0.0)


def _costed(result: Result, history) -> Result:
    """A warn or fail with what the failure has cost since it began and what stopping now saves, in optimizer steps
    and, where the job logs its step time (TRL's `step_time`) or its runtime, in hours (details["cost"])."""
    if result.status.value not in ("warn", "fail") or "since_log" not in result.details or not history.logs:
        return result
    by_number = {log.number: log for log in history.logs}
    start, newest = by_number.get(result.details["since_log"]), history.logs[-1]
    if start is None or start.step is None or newest.step is None:
        return result
    lost = newest.step - start.step + history.steps_per_log()
    words = f"{lost} optimizer steps so far (the logs from {start.at} on)"
    per_step = _seconds_per_step(history)
    if per_step:
        words += f" (~{_duration(lost * per_step)}{_gpu_hours(history, lost * per_step)})"
    if history.max_steps and history.max_steps > newest.step and not history.ended:
        left = history.max_steps - newest.step
        words += f"; stopping now saves the {left} steps left of max_steps {history.max_steps}"
        if per_step:
            words += f" (~{_duration(left * per_step)}{_gpu_hours(history, left * per_step)})"
    return replace(result, details={**result.details, "cost": words})


def _gpu_hours(history, seconds: float) -> str:
    gpus = history.gpus
    return f", {gpus * seconds / 3600:.3g} GPU-hours on {gpus} GPU{'s' if gpus > 1 else ''}" if gpus else ""


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _seconds_per_step(history) -> float | None:
    """Seconds an optimizer step takes: the median of TRL's logged `step_time` (trl >= 1.x), else None."""
    times = sorted(p.value for p in history.column("step_time")[-50:] if p.value > 0)
    return times[len(times) // 2] if times else None


def report(ctx, results: list[Result], settings: list | None = None, fail_on: str = "fail"):
    """The watch's report, in the formats `check` writes. Its environment is this process's Python and packages,
    read once (no GPU probe: the watch judges the job's logs, not this machine)."""
    from trl_doctor.report.formats import Report
    from trl_doctor.types import summarize
    from trl_doctor.version import __version__

    return Report(__version__, str(ctx.history.source), ctx.trainer, environment(), results, summarize(results),
                  settings=list(settings or ()), fail_on=fail_on)


@lru_cache(maxsize=1)
def environment() -> dict:
    import platform
    import sys

    from trl_doctor.context.env import PACKAGES, package_version

    return {"python": platform.python_version(), "executable": sys.executable,
            "packages": {name: package_version(name) for name in PACKAGES}}


def sparklines(history, results: list[Result]) -> str:
    """The table format's coda: each watched metric as a one-line sparkline, first and last value, the flagged logs
    marked `^` under it with the rules that flagged them."""
    from trl_doctor.facts.metrics import fmt, marked
    from trl_doctor.watch.spark import WIDTH, marks, sparkline

    flagged: dict[str, tuple[set[int], list[str]]] = {}
    for r in results:
        metric, logs = r.details.get("metric"), marked(r.details)
        if metric and logs and r.status.value in ("fail", "warn"):
            numbers, ids = flagged.setdefault(metric, (set(), []))
            numbers.update(logs)
            ids.append(f"{r.id} {r.status.value}")
    names = history.names()
    shown = [m for m in SHOWN if m in names] + sorted(m for m in flagged if m not in SHOWN and m in names)
    if not shown:
        return ""
    import shutil

    from trl_doctor.report.formats._safe import for_terminal

    logs = history.logs
    columns = {m: history.column(m) for m in shown}
    ends = {m: f"{fmt(c[0].value)} -> {fmt(c[-1].value)}" for m, c in columns.items()}
    cols = max(60, shutil.get_terminal_size((80, 24)).columns)  # COLUMNS, else the terminal's, else 80
    width = min(max(len(for_terminal(m, one_line=True)) for m in shown), 28)
    bars = max(8, min(WIDTH, cols - 2 - width - 2 - 2 - max(len(e) for e in ends.values())))
    lines = [f"\nmetrics over {len(logs)} logs ({logs[0].at} to {logs[-1].at}):"]
    for metric, column in columns.items():
        values = [p.value for p in column]
        name = for_terminal(metric, one_line=True)  # a metric's name is the job's text: no escape reaches the terminal
        name = name if len(name) <= width else name[:width - 1] + "…"
        lines.append(f"  {name:<{width}}  {sparkline(values, bars)}  {ends[metric]}"[:cols])
        if metric in flagged:
            numbers, ids = flagged[metric]
            index = {p.number: k for k, p in enumerate(column)}
            under = marks(len(values), {index[n] for n in numbers if n in index}, bars)
            lines.append(f"  {'':<{width}}  {under:<{bars}}  {', '.join(ids)}"[:cols].rstrip())
    return "\n".join(lines) + "\n"
