"""The run loop: runs rules over a context and folds each rule's findings into one Result.

A rule that does not apply to the trainer, or whose needs the context cannot provide, is `skip` with the
reason; a rule that crashes is `error` with its message, and the other rules still run. Only an input
error (the config or its files cannot be read) stops the run: the CLI turns it into exit status 2.

One loop for every context, on a floor of its own below all its users: the check's worker (`worker/main.py`),
`--static` in the printing process (`static/`) and the in-process check of a built trainer (`front/api.py`,
DoctorCallback). It imports the context and, lazily, the one fact a rule's `needs` can name (`trainer_config`) and
the facts' words for why a rule does not judge an opt-in trainer (`facts.trl.async_grpo`); never a rule.
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from trl_doctor.vocabulary import OTHER_TRAINER
from trl_doctor.context.context import Context
from trl_doctor.errors import InputError, Unavailable
from trl_doctor.registry import Rule
from trl_doctor.context.locations import locate
from trl_doctor.types import Finding, Fix, Location, Result, Status, manual
from trl_doctor.vocabulary import OPT_IN_TRAINERS, judges

if TYPE_CHECKING:
    from trl_doctor.interface import CheckContext


def run_rule(rule: Rule, ctx: CheckContext, skipped: str | None = None) -> Result:
    """The rule's one judgment over `ctx` as a Result: `skip` where it does not apply (another trainer; `skipped`
    says why the context cannot hold it), the findings folded, a crash as `error`. The full context first builds
    what the rule `needs`; an InputError (the user's input is bad) ends the check."""
    start = time.perf_counter()

    def result(status: Status, message: str, details: dict | None = None, fix: Fix | None = None,
               location: Location | None = None) -> Result:
        return Result(rule.id, rule.slug, rule.title, status, message, details or {}, fix,
                      round(time.perf_counter() - start, 3), location)

    if not judges(rule.trainers, ctx.trainer):
        return result(Status.SKIP, _not_applicable(rule, ctx))
    if skipped is not None:
        return result(Status.SKIP, skipped)
    try:
        for need in rule.needs if ctx.kind == "full" else ():
            build_need(ctx, need)
        findings = list(rule.check(ctx))
    except InputError:
        raise
    except Unavailable as exc:
        return result(Status.SKIP, str(exc))
    except Exception as exc:
        if out_of_space(exc):  # the doctor's own scratch space is full: no rule's finding, the one line of exit 2
            raise InputError(no_space_words(exc)) from None
        return _crashed(exc, result, ctx)
    if not findings:
        return result(Status.ERROR, "the rule returned no finding")
    return fold(rule, findings, result, ctx.config.path)


def _crashed(exc: BaseException, result, ctx) -> Result:
    if isinstance(exc, MemoryError) or _is_out_of_memory(exc):
        return result(Status.FAIL, *_out_of_memory(exc, ctx))
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return result(Status.ERROR, f"the rule crashed: {type(exc).__name__}: {exc}",
                  {"traceback": "".join(tb[-6:]).rstrip()})


def out_of_space(exc: BaseException | None) -> bool:
    """Whether `exc` (or what it was raised from) is a full disk: OSError ENOSPC/EDQUOT, or a library's error that
    says so in its words (safetensors' SafetensorError is no OSError)."""
    import errno

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(exc)[:2000] or "Disk quota exceeded" in str(exc)[:2000]:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def no_space_words(exc: BaseException) -> str:
    import tempfile

    return (f"no space left on the disk of the check's scratch folder ({tempfile.gettempdir()}): the check writes a "
            "small model twin and its trainer step's outputs there; free space, or point TMPDIR at a disk that has "
            f"some ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")


def build_need(ctx, need: str) -> None:
    """Build what a rule's `needs` names before it runs (raises Unavailable or InputError when it cannot be): one of
    the context's inputs (tokenizer, model_config, generation_config, meta_model, twin, dataset) or the fact
    trainer_config. `trainer_run` is only an ordering need: the rule reads the run itself and reports why it could
    not run."""
    if need == "trainer_run":
        return
    if need == "trainer_config":
        from trl_doctor.facts.trl.trainer_config import trainer_config

        trainer_config(ctx)
        return
    ctx.need(need)


def _not_applicable(rule: Rule, ctx: CheckContext) -> str:
    if ctx.trainer in OPT_IN_TRAINERS:
        from trl_doctor.facts.trl.async_grpo import not_judged

        return not_judged(rule.slug)
    if ctx.trainer != OTHER_TRAINER:
        return f"applies to {', '.join(rule.trainers)}, not {ctx.trainer}"
    cls = getattr(ctx.live, "trainer_cls", None)
    name = cls.__qualname__ if cls is not None else "the script's trainer"
    return (f"not checked: {name} is not a trainer trl-doctor checks ({rule.slug} judges "
            f"{', '.join(t.upper() for t in rule.trainers)} trainers and their subclasses)")


def _is_out_of_memory(exc: BaseException) -> bool:
    """torch's out-of-memory (torch.OutOfMemoryError, a RuntimeError; older releases raise a plain RuntimeError
    saying so), recognized without importing torch."""
    return type(exc).__name__ == "OutOfMemoryError" or (
        isinstance(exc, RuntimeError) and any(w in str(exc)[:300].lower() for w in ("out of memory", "can't allocate memory")))


def _out_of_memory(exc: BaseException, ctx: Context) -> tuple[str, dict]:
    """A finding about memory: what this rule needed did not fit, and what the check's worker may use."""
    from trl_doctor.runtime.limits import describe

    limit = describe(ctx.options.memory_limit)
    what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return (f"ran out of memory: the model and settings this rule probes need more memory than the check's worker has "
            f"(limit: {limit}); the job will need at least as much, or --max-memory raises the check's limit",
            {"error": what, "memory limit": limit})


def fold(rule: Rule, findings: list[Finding], result: Callable[..., Result], config_path: Any = None) -> Result:
    """One Result from a rule's findings: the worst finding's status, message, details and location
    (see `trl_doctor.context.locations.locate`; `config_path` is the config file, preferred when a fix edits several
    files), the others listed under `also`, and their fixes merged by `merge_fixes`."""
    worst = max(findings, key=lambda f: f.status.rank)
    details: dict[str, Any] = dict(worst.details)
    others = [f for f in findings if f is not worst and f.status is not Status.PASS]
    if others:
        details["also"] = [f"{f.status.value}: {f.message}" for f in others]
    fix = merge_fixes([f.fix for f in findings if f.fix is not None])
    return result(worst.status, worst.message, details, fix, locate(worst, config_path))


_RESTRICTION = {"safe": 0, "unsafe": 1, "manual": 2}


def merge_fixes(fixes: list[Fix]) -> Fix | None:
    """One Fix from several, so that a result carries one.

    The applicability is the most restrictive present (manual > unsafe > safe), with one exception that
    keeps edits from disappearing: a manual part (which has no edits) never turns appliable parts into
    instructions. When manual and appliable parts mix, the merged Fix holds every appliable edit, takes the
    most restrictive applicability among the appliable parts, and its description ends with the manual
    parts' instructions after "by hand: ". Only fixes that are all manual merge into a manual Fix.
    """
    if not fixes:
        return None
    if len(fixes) == 1:
        return fixes[0]
    by_hand = [f for f in fixes if f.applicability == "manual"]
    appliable = [f for f in fixes if f.applicability != "manual"]
    if not appliable:
        return manual("; ".join(f.description for f in by_hand))
    description = "; ".join(f.description for f in appliable)
    if by_hand:
        description += "; by hand: " + "; ".join(f.description for f in by_hand)
    level = max((f.applicability for f in appliable), key=_RESTRICTION.__getitem__)
    return Fix(description, tuple(e for f in appliable for e in f.edits), applicability=level)


def each_result(rules: Iterable[Rule], ctx: Context, starting: Callable[[Rule], None] | None = None) -> Iterator[Result]:
    """The rules' Results over one context, each as soon as it is known, after every rule's `prepare` has had its
    head start; `starting(rule)` is called before each rule runs. The one run loop of the worker and of the
    in-process check (a trainer passed to the API, DoctorCallback). An InputError ends it (exit status 2)."""
    rules = list(rules)
    for rule in rules:
        if rule.prepare is not None and judges(rule.trainers, ctx.trainer):
            try:
                rule.prepare(ctx)
            except Exception:
                pass  # preparation is only a head start; the check itself reports real problems
    for rule in rules:
        if starting is not None:
            starting(rule)
        yield run_rule(rule, ctx)


def run_rules(rules: Iterable[Rule], ctx: Context) -> list[Result]:
    return list(each_result(rules, ctx))

