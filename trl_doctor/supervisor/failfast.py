"""--fail-fast: a check ends at its first verdict that makes the exit status 1 (a `fail` or `error`, a `warn` too
with --fail-on warn; a suppressed one never), as `pytest -x` ends at its first failure.

The result callback raises `Stopped` as soon as such a result arrives; the supervisor (trl_doctor.supervisor.session.run_check)
then stops the worker and its whole process tree at once, wherever it is (a static rule, the trainer run's step),
and reports every rule not reported yet as `skip` with NOT_RUN. The report is then written once, in every format
asked, as for any other check. With several configs the first config that fails ends the call: the configs after
it are not checked (the CLI names them on stderr).

Light: no torch, transformers or TRL.
"""

from __future__ import annotations

from typing import Callable

from trl_doctor.types import Result, Status

NOT_RUN = "not run: --fail-fast"


class Stopped(Exception):
    """A result decided the exit status under --fail-fast: the check stops here."""

    def __init__(self, result: Result):
        super().__init__(f"{result.id} {result.rule}: {result.status.value}")
        self.result = result


def stop_at_first_failure(on_result: Callable[[Result], None] | None, fail_on: str) -> Callable[[Result], None]:
    """`on_result` (when given) for each result, then `Stopped` when the result fails the check."""
    from trl_doctor.types import fails

    def seen(r: Result) -> None:
        if on_result is not None:
            on_result(r)
        if fails(r, fail_on):
            raise Stopped(r)

    return seen


def not_run(rule) -> Result:
    """A rule the check did not reach because an earlier verdict ended it."""
    return Result(rule.id, rule.slug, rule.title, Status.SKIP, NOT_RUN, {}, None, 0.0)
