"""The github format written while the check runs: each `::error` / `::warning` annotation on stdout (flushed) as
its rule's result arrives, the settings in force and the summary when the check ends. A CI log shows a verdict
seconds after it is known instead of with the whole report (issue 22: a capacity verdict ready 10 s in was seen
at 26 s).

The lines are exactly those `trl_doctor.report.formats.render("github", report)` writes at once: the same functions
(`_github.annotation`, `_github.closing`) over the results cleaned the same way (`_safe.for_terminal`), in the same run
order. The table's own streaming is `_cli._Stream`; both have the same three calls (start, row, finish).
"""

from __future__ import annotations

import click


class GithubStream:
    early = True  # start() prints nothing: a launch command's check calls it before its capture too

    def __init__(self) -> None:
        self.cfg = None

    def start(self, cfg, settings: list[dict]) -> None:
        self.cfg = cfg  # a launch command's target names its file once captured: read at each row

    def row(self, result) -> None:
        from trl_doctor.report.formats import _github
        from trl_doctor.report.formats._safe import clean, for_terminal

        config = for_terminal(str(self.cfg.path)) if self.cfg is not None else ""  # where a result without a location points
        line = _github.annotation(clean(result, for_terminal), config)
        if line is not None:
            click.echo(line)  # click.echo flushes: the line is in the CI log now

    def finish(self, report) -> None:
        from trl_doctor.report.formats import _github
        from trl_doctor.report.formats._safe import clean_report, for_terminal

        click.echo("\n".join(_github.closing(clean_report(report, for_terminal))))
