"""The settings of a check, resolved for the front door (trl_doctor.front.request) that the command line, the Python
API and DoctorCallback all come through.

`Asked` is what the caller asked (select, ignore, fail-on, smoke, target, static, isolated); `resolve` joins it
with the project's config (`[tool.trl-doctor]` / `.trl-doctor.toml`, nearest the checked config; none with
`isolated`) into `Settings`: the rules to run, the verdict threshold, and `in_force`, every setting that narrows or
silences the check with where it comes from, which every report lists, so that a change to the project's config
cannot silence a CI gate unseen. `run_config` is the run itself: the worker, then the config's inline
suppressions (`# trl-doctor: ignore[...]`, also off with `isolated`). Light: no torch, transformers or TRL here.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from trl_doctor.errors import InputError
from trl_doctor.report.formats import COMMAND_LINE
from trl_doctor.options import DEFAULTS

STACK = ("torch", "transformers", "trl")


@dataclass(frozen=True)
class Asked:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str | None = None
    smoke: bool | None = None
    target: str | None = None
    static: bool = False
    isolated: bool = False
    target_env: str = DEFAULTS.target_env  # --target-env: only with a target
    allow_hosts: tuple[str, ...] = ()  # --allow-host: other machines the check may contact

    @classmethod
    def of(cls, *, select: str | Iterable[str] | None = (), ignore: str | Iterable[str] | None = (),
           fail_on: str | None = None, smoke: bool | None = None, target: str | None = None, static: bool = False,
           isolated: bool = False, target_env: str = DEFAULTS.target_env,
           allow_hosts: str | Iterable[str] | None = ()) -> "Asked":
        """What the caller asked, from the command line's options or the API's keywords alike: rule names as either
        takes them (`names`), and no trainer run under --static (it judges from files)."""
        return cls(select=names(select), ignore=names(ignore), fail_on=fail_on, smoke=False if static else smoke,
                   target=target, static=static, isolated=isolated, target_env=target_env,
                   allow_hosts=(allow_hosts,) if isinstance(allow_hosts, str) else tuple(allow_hosts or ()))


def names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Rule names as the command line takes them: `"TD001,pad-token"`, `"TD001 TD002"`, or a list of such."""
    items = [value] if isinstance(value, str) else list(value or ())
    return tuple(n for item in items for n in str(item).replace(" ", ",").split(",") if n)


@dataclass(frozen=True)
class Settings:
    rules: list
    fail_on: str
    smoke: bool
    target: str | None
    isolated: bool
    in_force: tuple[dict, ...]  # {"setting", "rules" or "value", "source"}: what narrows or silences the check
    static: bool = False  # --static: judged from files in this process (trl_doctor.static), no worker
    target_gpus: tuple[dict, ...] | None = None  # the GPUs `target` describes, parsed here once
    allow_hosts: tuple[str, ...] = ()  # the other machines the check may contact, as HOST or HOST:PORT

    def suppressor(self, config: Path | None):
        """The config's inline suppressions, or none with --isolated."""
        from trl_doctor.front.suppress import Suppressor

        return Suppressor(None if self.isolated else config)

    def listed(self, suppressor) -> list[dict]:
        """`in_force` plus the inline suppressions of the config checked."""
        return [*self.in_force, *suppressor.in_force()]


def resolve(asked: Asked, config: Path | None) -> Settings:
    """The settings for checking `config` (a launch command's: None, the project found from the current folder)."""
    from trl_doctor.front.project import ProjectConfig, find_project_config
    from trl_doctor.registry import all_rules, run_order, select_rules

    project = ProjectConfig() if asked.isolated else find_project_config(Path(config).parent if config else Path.cwd())
    source = project.source()
    select, ignore, fail_on = _chosen(asked, project, config)
    target = asked.target or project.target
    gpus = _gpus(target)
    if not target and asked.target_env != "auto":
        from trl_doctor.errors import InputError

        raise InputError("--target-env says whose Python environment a --target launch runs in: give --target too "
                         "(without it, the launch machine is this one when it has GPUs)")
    # lazy: this process lists and reports the rules; it runs only --static's, each module imported at its first call
    chosen = select_rules(all_rules(lazy=True), select[0], [n for group, _ in ignore for n in group])
    rules = run_order([r for r in chosen if r.preflight])  # the watch's rules judge logs, not a setup
    if select[0] and chosen and not rules:
        from trl_doctor.errors import InputError

        raise InputError(f"{', '.join(r.slug for r in chosen)}: watch rules judge a job's logged metrics, not a setup: "
                         "`trl-doctor watch PATH` (or DoctorCallback(watch=True))")
    smoke = asked.smoke if asked.smoke is not None else (project.smoke if project.smoke is not None else True)
    hosts = _allowed_hosts([(asked.allow_hosts, COMMAND_LINE), (project.allow_hosts, source)])
    in_force = _in_force(asked, select, ignore, fail_on, hosts) + ((() if asked.static else _network(hosts)))
    return Settings(rules, fail_on[0], smoke, target, asked.isolated, in_force, asked.static, gpus,
                    tuple(dict.fromkeys(host for host, _ in hosts)))


def _chosen(asked: Asked, project, config: Path | None) -> tuple:
    """(select, ignore groups, fail-on), each with where it comes from: the command line's (or the API's) over the
    project config's."""
    source = project.source()
    select = (asked.select, COMMAND_LINE) if asked.select else (project.select, source)
    ignore = [(asked.ignore, COMMAND_LINE), (project.ignore, source)]
    if config is not None:
        ignore.append((tuple(project.ignores_for(config)), f"{source} per-file-ignores"))
    fail_on = (asked.fail_on, COMMAND_LINE) if asked.fail_on else (project.fail_on or "fail", source if project.fail_on else None)
    return select, ignore, fail_on


def _gpus(target: str | None) -> tuple[dict, ...] | None:
    """The GPUs a target names, parsed once, here: a bad --target (or project target) is exit 2 before anything runs."""
    if not target:
        return None
    from trl_doctor.context.target import target_gpus

    return tuple(target_gpus(target))


def resolve_watch(asked: Asked, where: Path) -> tuple[Settings, dict]:
    """`trl-doctor watch`'s settings, by the same request and precedence as `check`'s (`resolve`): the project config
    found from `where` (the watched folder, or the current one for a server), select/ignore/fail-on from the command
    line over the project's, the target's GPUs (a finding's cost in GPU-hours). The project's `select` narrows the
    watch only where it names watch rules (a preflight selection is not one). Also the project's watch thresholds."""
    from trl_doctor.front.project import ProjectConfig, find_project_config
    from trl_doctor.registry import all_rules
    from trl_doctor.watch.judge import watch_rules

    project = ProjectConfig() if asked.isolated else find_project_config(where)
    select, ignore, fail_on = _chosen(asked, project, None)
    every = all_rules("watch", lazy=True)
    if not asked.select and not watch_rules(project.select, rules=every):
        select = ((), None)
    rules = watch_rules(select[0], [n for group, _ in ignore for n in group], rules=every)
    target = asked.target or project.target
    in_force = list(_in_force(asked, select, ignore, fail_on))
    if target:
        in_force.append({"setting": "target", "value": target,
                         "source": COMMAND_LINE if asked.target else project.source()})
    if project.path is not None and project.watch:
        in_force.append({"setting": "watch thresholds", "value": ", ".join(sorted(project.watch)),
                         "source": project.source()})
    settings = Settings(rules, fail_on[0], False, target, asked.isolated, tuple(in_force), target_gpus=_gpus(target))
    return settings, project.watch


def _allowed_hosts(groups) -> list[tuple[str, str]]:
    """(HOST[:PORT] as the guard takes it, where it was given) for every allowed host; a malformed one is exit 2."""
    from trl_doctor.runtime.network import parse_host

    out = []
    for entries, where in groups:
        for entry in entries:
            try:
                out.append((str(parse_host(entry)), where))
            except ValueError as exc:
                option = "--allow-host" if where == COMMAND_LINE else f"{where}: allow-hosts"
                raise InputError(f"{option}: {exc}") from None
    return out


def _network(hosts) -> tuple[dict, ...]:
    """The network guard in force for the check's processes where the system cannot hold them in a network namespace
    of their own (trl_doctor.runtime.netns); nothing where it can (the default, said in docs/safety.md)."""
    from trl_doctor.runtime import netns
    from trl_doctor.runtime.network import parse_hosts, this_machine

    isolation = netns.probe(parse_hosts(host for host, _ in hosts))
    if isolation.namespace:
        return ()
    source = {"environment": "environment", "system": "this system"}.get(isolation.cause)
    if source is None:  # allow-host: where the first host of another machine was allowed
        source = next((where for host, where in hosts if not this_machine(parse_hosts([host])[0].host)), COMMAND_LINE)
    return ({"setting": "network", "value": isolation.words(), "source": source},)


def _in_force(asked: Asked, select, ignore, fail_on, hosts=()) -> tuple[dict, ...]:
    out: list[dict[str, Any]] = []
    if asked.isolated:
        out.append({"setting": "isolated", "value": "project config and inline suppressions not read",
                    "source": COMMAND_LINE})
    if select[0]:
        out.append({"setting": "select", "rules": list(select[0]), "source": select[1]})
    out += [{"setting": "ignore", "rules": list(group), "source": where} for group, where in ignore if group]
    if fail_on[1] is not None:
        out.append({"setting": "fail-on", "value": fail_on[0], "source": fail_on[1]})
    out += [{"setting": "allow-host", "value": host, "source": where} for host, where in hosts]
    return tuple(out)


def missing_stack() -> list[str]:
    """torch, transformers, trl: those this Python cannot import (looked up, not imported)."""
    missing = []
    for name in STACK:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def require_stack() -> None:
    """Exit 2 with what to do when the ML stack is absent (a pre-commit hook's own environment has none): every
    rule reads the installed torch, transformers and TRL, so without them nothing could be checked."""
    missing = missing_stack()
    if missing:
        raise InputError(
            f"cannot check: {', '.join(missing)} not installed in this Python ({sys.executable}); the rules read the "
            "installed torch, transformers and TRL. Install them here (pip install \"trl-doctor[ml]\"), or in "
            "pre-commit use the `trl-doctor-system` hook (language: system, the environment you train with)")


def run_config(path: Path, settings: Settings, options, on_result: Callable | None = None,
               on_progress: Callable | None = None, on_will_run: Callable | None = None) -> tuple[list, list[dict]]:
    """(results with the inline suppressions applied, the settings in force) of checking the config at `path`."""
    from trl_doctor.supervisor.session import run_check

    require_stack()
    suppress = settings.suppressor(path)
    results = run_check(path, settings.rules, options, on_progress=on_progress,
                        on_result=(lambda r: on_result(suppress(r))) if on_result else None, on_will_run=on_will_run)
    return [suppress(r) for r in results], settings.listed(suppress)


def fix_and_recheck(cfg, results: list, listed: list, unsafe_fixes: bool, again: Callable[[], tuple]):
    """--fix (or the API's fix=True): the fixes the results offer that apply (safe ones; unsafe ones too with
    `unsafe_fixes`), written under the folders' locks (finishing a killed --fix, planning again), then the check again
    (`again()` -> (cfg, results, listed)), the rules the fix cured marked as fixed by it. (cfg, results, listed, the
    files written with their backups)."""
    from dataclasses import replace

    from trl_doctor.fix import fixer as _fixer

    fixes = [r.fix for r in results if r.fix and r.fix.applies(unsafe_fixes)]
    written = _fixer.apply(_fixer.plan(fixes), fixes, cfg)
    if not (fixes or written):  # re-checked too when a concurrent --fix already made the changes
        return cfg, results, listed, []
    applied = [{"file": str(p), "backup": str(b) if b else None} for p, b in written]
    fixed = {r.id: r.fix for r in results if r.fix in fixes}
    cfg, results, listed = again()
    results = [  # a rule the fix cured reports the fix it was cured by, as applied
        replace(r, fix=fixed[r.id], fix_applied=True)
        if r.id in fixed and (r.fix is None or r.status.value in ("pass", "skip")) else r
        for r in results
    ]
    return cfg, results, listed, applied


def options_for(settings: Settings, **fields: Any):
    """The worker's Options under these settings."""
    from trl_doctor.options import Options

    return Options(smoke=settings.smoke, target=settings.target, target_gpus=settings.target_gpus,
                   allow_hosts=settings.allow_hosts, **fields)
