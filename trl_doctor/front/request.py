"""One check call, as the command line and the Python API both make it: a `Request` (what was asked: the settings'
part, the worker's options, --fix / --diff / --unsafe-fixes, --static's TRL release), refused in one place when it
asks what cannot be done (`refuse`), and run in one place (`run`): the settings resolved once, the run (the worker,
or --static in this process), --fix and the re-check. The doors keep only what is theirs: the command line its
report files, streaming, progress and --diff's printing; the API the check of a trainer it was handed.
Light: no torch, transformers or TRL here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trl_doctor.errors import InputError
from trl_doctor.front.settings import Asked, Settings


@dataclass(frozen=True)
class Request:
    asked: Asked
    options: dict[str, Any] = field(default_factory=dict)  # trl_doctor.Options fields the caller set (device, ...)
    fix: bool = False
    diff: bool = False  # --diff: what --fix would change, nothing written
    unsafe_fixes: bool = False
    trl_version: str | None = None  # --static's TRL release
    fail_fast: bool = False  # --fail-fast: the worker stops at the first result that fails the check

    @property
    def fixing(self) -> bool:
        return self.fix or self.diff

    def refuse(self, launch: Any = None, trainer: bool = False) -> None:
        """An InputError (exit 2, one line) for what this call cannot do: --static on a launch command or a built
        trainer, or with --fix / --diff; --trl-version without --static."""
        if self.trl_version and not self.asked.static:
            raise InputError("--trl-version names the TRL release --static judges against: give --static too (the "
                             "full check reads the installed TRL)")
        if self.asked.static and (launch is not None or trainer):
            raise InputError("--static checks config files; a launch command runs its script (the repository's code) "
                             "to reach the trainer: drop --static, or check the script's recipe file")
        if self.asked.static and self.fixing:
            raise InputError("--fix and --diff need the full check (its fixes are planned and re-checked on the loaded "
                             "model and trainer): drop --static")

    def worker_options(self, settings: Settings, launch: Any = None):
        """The worker's trl_doctor.Options under `settings` (the target parsed there, once)."""
        from trl_doctor.front import settings as _settings

        return _settings.options_for(settings, unsafe_fixes=self.unsafe_fixes and self.fixing,
                                     launch=launch.to_json() if launch is not None else None,
                                     target_env=self.asked.target_env, **self.options)


class Subject:
    """What a launch command's report is about: the file that built the trainer, the trainer, the capture."""

    def __init__(self, path: str, trainer: str, command: str):
        self.path, self.trainer, self.command = path, trainer, command
        self.launch: dict | None = None


@dataclass
class Outcome:
    """One call's result: the settings it ran under, what was checked (a loaded config or a launch's Subject), the
    results, the settings in force as the report lists them, the files --fix wrote."""
    settings: Settings
    subject: Any
    results: list
    listed: list
    applied: list = field(default_factory=list)
    stream: Any = None  # what saw the check run (make_stream's), to be finished with the report
    will_run: dict | None = None  # what will run, as the worker read it (trl_doctor.facts.launch.will_run)

    def report(self):
        from trl_doctor.report.formats import Report

        launch = self.subject.launch if isinstance(self.subject, Subject) else None
        return Report.made(str(self.subject.path), self.subject.trainer, self.results, applied=self.applied,
                           launch=launch, settings=self.listed, fail_on=self.settings.fail_on,
                           will_run=self.will_run)


def run(request: Request, config: Path | None, launch: Any = None, *,
        make_stream: Callable[[Settings], Any] | None = None, on_progress: Callable | None = None) -> Outcome:
    """Check `config` (a checked path) or `launch` (a parsed LaunchCommand) as `request` asks: resolved settings,
    one run, and with --fix the fixes written and the check run again (--diff writes nothing). `make_stream(settings)`
    may give what sees the check as it runs (or None): its `start(subject, listed)` is called once what is checked
    is known (also before a launch's capture when its `early` is true), `row(result)` as each result arrives."""
    from trl_doctor.front.settings import fix_and_recheck, resolve

    settings = resolve(request.asked, config)
    options = request.worker_options(settings, launch)
    stream = make_stream(settings) if make_stream is not None else None
    on_result = stream.row if stream is not None else None
    if request.fail_fast:
        from trl_doctor.supervisor.failfast import stop_at_first_failure

        on_result = stop_at_first_failure(on_result, settings.fail_on)

    heard: dict = {}

    def will_run(plan: dict) -> None:  # the last run's word (after --fix, the fixed job's)
        heard["will_run"] = plan
        show = getattr(stream, "will_run", None)
        if show is not None:
            show(plan)

    def once() -> tuple:
        return _run_once(request, settings, options, config, launch, stream, on_result, on_progress, will_run)

    subject, results, listed = once()
    applied: list = []
    if request.fix:
        subject, results, listed, applied = fix_and_recheck(subject, results, listed, request.unsafe_fixes, once)
    return Outcome(settings, subject, results, listed, applied, stream, heard.get("will_run"))


def _run_once(request: Request, settings: Settings, options, config, launch, stream, on_result, on_progress,
              on_will_run=None):
    """(what was checked, results, the settings in force) of one run: a launch command's script in the worker,
    --static in this process against the request's TRL release, or a config file in the worker."""
    from trl_doctor.front.settings import require_stack, run_config

    if launch is not None:
        from trl_doctor.supervisor.session import run_check

        require_stack()
        subject = Subject(launch.script or launch.cwd, "?", launch.text)
        if getattr(stream, "early", False):
            stream.start(subject, list(settings.in_force))

        def captured(info: dict) -> None:
            subject.path = (info.get("constructed_at") or "").rsplit(":", 1)[0] or subject.path
            subject.trainer, subject.launch = info["trainer"], info
            if stream is not None:
                stream.start(subject, list(settings.in_force))

        results = run_check(None, settings.rules, options, on_result=on_result, on_progress=on_progress,
                            on_capture=captured, on_will_run=on_will_run)
        return subject, results, list(settings.in_force)
    if settings.static:
        from trl_doctor.static.front import check_config_static

        cfg, results, listed = check_config_static(config, settings, options, request.trl_version)
        if stream is not None:
            stream.start(cfg, listed)
            for r in results:
                stream.row(r)
        return cfg, results, listed
    from trl_doctor.context.config import load_config

    cfg = load_config(config)  # light: a bad config is exit 2 before any worker starts
    if stream is not None:
        stream.start(cfg, settings.listed(settings.suppressor(cfg.path)))
    results, listed = run_config(cfg.path, settings, options, on_result=on_result, on_progress=on_progress,
                                 on_will_run=on_will_run)
    return cfg, results, listed
