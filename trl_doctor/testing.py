"""The in-process harness for rules, as ruff's `test_path` is for its rules: one rule on one case file, in the
calling process, on a context the rule declares, giving what `trl-doctor check CASE --select RULE --diff` gives.

    from trl_doctor.testing import judge

    judged = judge("fixtures/pad-token/bad_gpt2_nopad.yaml", "pad-token")       # the full check's context
    judged.status, judged.result, judged.diff                                   # 'warn', the Result, --diff's text
    judge(case, "pad-token", context="static")                                  # --static's context
    judge_rules(case, "batch-geometry,pad-token", smoke=False)                   # several, as one check

The full context is what the check's worker builds (the config read through TRL's parser, the facts, the rule with
its `prepare`; each result through the channel's encoding), the static one what `check --static` runs in the printing
process; the project's settings and the config's inline suppressions apply as they do in the check, and the caller's
environment is quieted as the command line quiets its own (the hub offline, trackers disabled, warnings off: for the
rest of the process). What the worker adds around the rules stays with the worker and its own tests: no process is
started here, so there is no memory limit, network namespace or guard, supervision of user code, or note of the
files and processes user code left (a case's reward module runs here, unfenced: the harness is for the project's own
fixtures and a plugin author's, not for a repository under check). A rule that reads the trainer run would run the trainer here too,
without the worker's time limit: the project's tests judge those cases through the command, in a worker of their own.

Light at import: the check's modules load on the first `judge`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from trl_doctor.types import Result

CONTEXTS = ("full", "static")
# what the command line asks of the check as a whole (trl_doctor.front.settings.Asked): --no-smoke is smoke=False,
# --target 1xT4 target="1xT4", --target-env, --fail-on, --isolated, --allow-host
ASKED = ("smoke", "target", "target_env", "fail_on", "isolated", "allow_hosts")  # (unsafe_fixes=True: --unsafe-fixes)


@dataclass(frozen=True)
class Judged:
    """One rule's result on one case: the Result as the report holds it, the check's exit status and the diff --diff
    prints for the check (empty: none; --static writes none), and the context it was judged in."""

    case: Path
    context: str
    result: Result
    code: int
    diff: str

    @property
    def status(self) -> str:
        return self.result.status.value

    def as_dict(self) -> dict[str, Any]:
        """The result as the json format gives it."""
        from trl_doctor.report.formats import result_dict

        return result_dict(self.result)


def judge(case: str | Path, rule: str, context: str = "full", **options: Any) -> Judged:
    """`rule` (its id or slug) on the config file `case`, in `context` ("full" or "static"). `options` are what the
    command line's options set: the check's settings (ASKED: `smoke=False` for `--no-smoke`, `target="1xT4"`) and
    trl_doctor.Options fields (`sample=2` for `--sample 2`); the command line's json format leaves sampling off, and
    so does this unless asked."""
    judged = judge_rules(case, rule, context, **options)
    if len(judged) != 1:
        raise ValueError(f"{rule!r} names {len(judged)} rules: name one rule")
    return judged[0]


def judge_rules(case: str | Path, select: str | Iterable[str], context: str = "full",
                **options: Any) -> list[Judged]:
    """The rules `select` names (as --select takes them: ids or slugs, comma-separated or a list) on `case`, in one
    context as one check judges them, each in run order; every one carries the check's exit status."""
    from trl_doctor.context.config import checked_path
    from trl_doctor.front.settings import Asked, options_for, resolve
    from trl_doctor.types import exit_status

    if context not in CONTEXTS:
        raise ValueError(f"context {context!r}: one of {', '.join(CONTEXTS)}")
    path = checked_path(str(case), str(case))
    unsafe = bool(options.pop("unsafe_fixes", False))
    asked = Asked.of(select=select, static=context == "static",
                     **{key: options.pop(key) for key in ASKED if key in options})
    settings = resolve(asked, path)
    # as the front door's Request.worker_options makes them: --target-env travels to the worker too
    worker_options = options_for(settings, unsafe_fixes=unsafe, target_env=asked.target_env,
                                 **{"sample": 0, **options})
    run = _static if context == "static" else _full
    results = run(path, settings, worker_options)
    code = exit_status(results, settings.fail_on)
    diff = "" if context == "static" else _diff(results, unsafe)
    return [Judged(Path(case), context, r, code, diff) for r in results]


def _full(path: Path, settings, options) -> list:
    """The worker's run of a config file's rules (trl_doctor.worker.main), here: each result through the channel's
    encoding and its checks, as the printing process receives it, then the inline suppressions."""
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context
    from trl_doctor.engine import run_rules
    from trl_doctor.protocol import decode_result, encode_result
    from trl_doctor.runtime.quiet import quiet_environment
    from trl_doctor.worker.main import typed_as_trl

    quiet_environment()
    suppress = settings.suppressor(path)
    with Context(typed_as_trl(load_config(path)), options) as ctx:
        return [suppress(decode_result(encode_result(r))) for r in run_rules(settings.rules, ctx)]


def _static(path: Path, settings, options) -> list:
    from trl_doctor.static.front import check_config_static
    from trl_doctor.runtime.quiet import quiet_environment

    quiet_environment()  # as the command line does before either context
    return check_config_static(path, settings, options)[1]


def _diff(results: list, unsafe: bool) -> str:
    """What --diff prints for the check (--unsafe-fixes: `unsafe`): the fixes that apply, planned together, as one
    unified diff cleaned for a terminal (nothing is written)."""
    from trl_doctor.fix import fixer
    from trl_doctor.report.formats._safe import for_terminal

    text = fixer.diff_of(results, unsafe)
    return for_terminal(text) if text else ""
