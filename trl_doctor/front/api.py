"""The Python API: `trl_doctor.check(subject, **options) -> Report`, and the gate inside a job,
`trl_doctor.DoctorCallback`.

`subject` is a config file (a path), a launch command (a list of strings: `["python", "train.py", ...]`) or a
trainer the caller already built. A path or a command is checked as the command line checks it: in the one
heavy worker, so that the user's code cannot take the caller down. A trainer object lives in the caller's
process, so its check runs there, on the trainer's own objects (the static rules; the trainer run only when
`smoke=True`).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from trl_doctor.report.formats import Report


def check(subject: Any, /, *, select: str | Sequence[str] = (), ignore: str | Sequence[str] = (), fail_on: str | None = None,
          smoke: bool | None = None, isolated: bool = False, static: bool = False, trl_version: str | None = None,
          fix: bool = False, unsafe_fixes: bool = False, **options: Any) -> Report:
    """Check a config file, a launch command or a built trainer, with the settings the command line takes
    (`select="TD001,pad-token"` or a list, the project's `[tool.trl-doctor]`, the config's inline suppressions;
    none of those two with `isolated`), through the command line's own path (trl_doctor.front.request): `static=True`
    is `check --static` (a config file judged from files, against `trl_version` or the installed TRL), `fix=True` is
    `--fix` (with `unsafe_fixes`: `--unsafe-fixes`), the report then saying what was written. `options` are
    trl_doctor.Options fields (device, trust_remote_code, smoke_timeout, num_processes, load_weights,
    script_timeout, target, target_env, allow_hosts: other machines the check may contact, as --allow-host)."""
    from trl_doctor.context.config import checked_path
    from trl_doctor.front.request import Request, run
    from trl_doctor.front.settings import Asked, resolve

    trainer = _is_trainer(subject)
    command = isinstance(subject, (list, tuple))
    request = Request(Asked.of(select=select, ignore=ignore, fail_on=fail_on, smoke=smoke,
                               target=options.pop("target", None), static=static, isolated=isolated,
                               target_env=options.pop("target_env", "auto"),
                               allow_hosts=options.pop("allow_hosts", ())),
                      options, fix=fix, unsafe_fixes=unsafe_fixes, trl_version=trl_version)
    request.refuse(launch=subject if command else None, trainer=trainer)
    if fix and trainer:
        raise ValueError("fix=True writes the files a config or a launch command names; a built trainer holds its own "
                         "objects: check its config file instead")
    if trainer:
        settings = resolve(request.asked, None)
        trainer_kind, results, launch = _check_trainer(subject, settings.rules, request.worker_options(settings))
        return Report.made(launch["command"], trainer_kind, results, launch=launch, settings=settings.in_force,
                           fail_on=settings.fail_on)
    if command:
        from trl_doctor.capture.command import parse_command

        return run(request, None, parse_command(tuple(str(a) for a in subject))).report()
    return run(request, checked_path(str(subject), str(subject))).report()


def _is_trainer(target: Any) -> bool:
    return not isinstance(target, (str, os.PathLike, list, tuple)) and hasattr(target, "args") \
        and hasattr(target, "model")


def _check_trainer(trainer: Any, rules: list, options) -> tuple[str, list, dict]:
    """Run the rules in this process on a trainer that is already built."""
    from trl_doctor.context.context import Context
    from trl_doctor.capture.report import describe
    from trl_doctor.capture.to_config import from_trainer

    with _accelerate_state_kept():
        cfg, live = from_trainer(trainer)
        with Context(cfg, options, live) as ctx:
            results = _run_rules(ctx, rules, options.smoke)
    return cfg.trainer, results, describe(cfg, live).as_dict()


def _run_rules(ctx, rules: list, smoke: bool) -> list:
    """The rules over a context in this process; the trainer run (probes and step) only with `smoke`."""
    from trl_doctor.engine import run_rules
    from trl_doctor.errors import InputError
    from trl_doctor.capture.report import adapt

    try:
        results = run_rules([r for r in rules if smoke or r.group != "trainer run"], ctx)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    return [adapt(r, ctx.config, ctx.live) for r in results]


class _accelerate_state_kept:
    """Keep the job's accelerate state: building a TrainingArguments (as rules do) resets accelerate's shared
    state, which the trainer the check runs inside still needs."""

    def __enter__(self):
        try:
            from accelerate.state import AcceleratorState, GradientState, PartialState
        except ImportError:
            self.saved = {}
            return self
        self.saved = {cls: dict(cls._shared_state) for cls in (PartialState, AcceleratorState, GradientState)}
        return self

    def __exit__(self, *exc):
        for cls, state in self.saved.items():
            cls._shared_state.clear()
            cls._shared_state.update(state)
