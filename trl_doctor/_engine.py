"""Runs rules over a context and folds each rule's findings into one Result.

A rule that does not apply to the trainer, or whose needs the context cannot provide, is `skip` with the
reason; a rule that crashes is `error` with its message, and the other rules still run. Only an input
error (the config or its files cannot be read) stops the run: the CLI turns it into exit status 2.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Iterable

from ._context import Context
from ._errors import InputError, Unavailable
from ._registry import Rule
from ._types import AppliedFix, Finding, Fix, Result, Status


def run_rule(rule: Rule, ctx: Context) -> Result:
    start = time.perf_counter()

    def result(status: Status, message: str, details: dict | None = None, fix: Fix | None = None) -> Result:
        applied = AppliedFix(fix.description, False, fix.unsafe, tuple(sorted({e.path for e in fix.edits}))) if fix else None
        return Result(rule.id, rule.slug, rule.title, status, message, details or {}, applied,
                      round(time.perf_counter() - start, 3), fix)

    if ctx.trainer not in rule.trainers:
        return result(Status.SKIP, f"applies to {', '.join(rule.trainers)}, not {ctx.trainer}")
    try:
        for need in rule.needs:
            ctx.need(need)
        findings = list(rule.check(ctx))
    except InputError:
        raise
    except Unavailable as exc:
        return result(Status.SKIP, str(exc))
    except Exception as exc:
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return result(Status.ERROR, f"the rule crashed: {type(exc).__name__}: {exc}",
                      {"traceback": "".join(tb[-6:]).rstrip()})
    if not findings:
        return result(Status.ERROR, "the rule returned no finding")
    return fold(rule, findings, result)


def fold(rule: Rule, findings: list[Finding], result: Callable[..., Result]) -> Result:
    worst = max(findings, key=lambda f: f.status.rank)
    details: dict[str, Any] = dict(worst.details)
    others = [f for f in findings if f is not worst and f.status is not Status.PASS]
    if others:
        details["also"] = [f"{f.status.value}: {f.message}" for f in others]
    fixes = [f.fix for f in findings if f.fix is not None]
    fix = None
    if fixes:
        fix = fixes[0] if len(fixes) == 1 else Fix(
            "; ".join(f.description for f in fixes),
            tuple(e for f in fixes for e in f.edits),
            any(f.unsafe for f in fixes),
        )
    return result(worst.status, worst.message, details, fix)


def run_rules(rules: Iterable[Rule], ctx: Context, progress: Callable[[Rule], None] | None = None) -> list[Result]:
    rules = list(rules)
    for rule in rules:
        if rule.prepare is not None and ctx.trainer in rule.trainers:
            try:
                rule.prepare(ctx)
            except Exception:
                pass  # preparation is only a head start; the check itself reports real problems
    out = []
    for rule in rules:
        if progress is not None:
            progress(rule)
        out.append(run_rule(rule, ctx))
    return out


def summarize(results: Iterable[Result]) -> dict[str, int]:
    summary = {s.value: 0 for s in (Status.PASS, Status.WARN, Status.FAIL, Status.SKIP, Status.ERROR)}
    for r in results:
        summary[r.status.value] += 1
    return summary


def exit_status(results: Iterable[Result], fail_on: str = "fail") -> int:
    bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if fail_on == "warn" else set())
    return 1 if any(r.status in bad for r in results) else 0
