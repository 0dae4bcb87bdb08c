"""The `trl-doctor` command line. Only click and the light engine modules are imported here; torch,
transformers and trl are imported by the context loaders when a rule first needs them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ._version import __version__

EXIT_INPUT = 2


def _input_error(message: str) -> "click.exceptions.Exit":
    click.echo(f"trl-doctor: error: {message}", err=True)
    return click.exceptions.Exit(EXIT_INPUT)


def _names(value: str | None) -> list[str]:
    return [v for v in (value or "").replace(" ", ",").split(",") if v]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trl-doctor")
def main() -> None:
    """Preflight checks for RL fine-tuning with TRL (GRPO, RLOO, PPO): run before you spend a GPU-day.

    \b
    Exit status: 0 nothing failed; 1 a rule failed or errored (or warned, with --fail-on warn);
    2 the config or one of its inputs cannot be read.
    """


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("target", nargs=-1, required=True)
@click.option("--fix", is_flag=True, help="Apply the safe fixes, then check again.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that rewrite model weights.")
@click.option("--diff", "show_diff", is_flag=True, help="Print what --fix would change as a unified diff; change nothing.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "junit", "github", "sarif"]), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), help="Write the report to this file.")
@click.option("--select", help="Only these rules: ids (TD001) or slugs (pad-token), comma-separated.")
@click.option("--ignore", help="Skip these rules: ids or slugs, comma-separated.")
@click.option("--smoke/--no-smoke", default=None, help="Run the one-step training smoke test (default: on).")
@click.option("--static", "static_only", is_flag=True, help="Only the static rules: no trainer run (no probes, no step), for pre-commit.")
@click.option("--smoke-timeout", type=float, default=300.0, show_default=True, help="Seconds the trainer run (probes and smoke step) may take, counted from its start in the worker.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--trust-remote-code", is_flag=True, help="Allow the model's own Python code (auto_map) to run.")
@click.option("--num-processes", type=click.IntRange(min=1), default=None,
              help="Training processes of the launch (accelerate's --num_processes); default: the config's accelerate settings, else the visible GPUs.")
@click.option("--fail-on", type=click.Choice(["fail", "warn"]), default=None, help="Lowest status that makes the exit status 1 (default: fail).")
@click.option("--target", "target_gpus", help="The launch machine's GPUs, e.g. 8xH100-80GB, 4xA100-40GB, 1xA10G, 2xL4, 1xT4: the GPU verdicts judge them instead of this machine's.")
@click.option("--target-env", type=click.Choice(["this", "other"]), default="this", show_default=True,
              help="With --target: whether the launch machine's Python environment is this one (flash-attn, bitsandbytes, deepspeed and liger-kernel installed here are judged as the launch's) or another (they are not judged).")
@click.option("--load-weights", is_flag=True, help="With a launch command: let the script load real weights (default: models on the meta device).")
@click.option("--script-timeout", type=float, default=300.0, show_default=True, help="Seconds a launch command's script may take to construct its trainer.")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks: a launch command's script that fails before its trainer, and any unexpected stop of the check.")
@click.option("--user-code-timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True, help="Seconds the user's code (importing a reward module, one reward call, rendering the chat template) may run before it is stopped.")
@click.option("--sample", type=click.IntRange(min=0), default=None, metavar="N",
              help="After the smoke step, sample num_generations completions for N dataset prompts with the real model and score them: completions cut at max_completion_length, groups with no reward spread (default: 2 on a GPU where the real model fits, else off; 0: off).")
@click.option("--max-memory", type=click.FloatRange(min=0), default=None, help="GiB of address space the check's worker may use where it uses no CUDA (default: 85% of physical memory; 0: no limit).")
def check(target, fix, unsafe_fixes, show_diff, fmt, output, select, ignore, smoke, smoke_timeout, device, trust_remote_code,
          num_processes, fail_on, target_gpus, load_weights, script_timeout, verbose, static_only, user_code_timeout,
          max_memory, sample, target_env):
    """Check CONFIG files (TRL CLI configs, JSON or YAML; globs too), or what a launch command's script gives its
    trainer.

    \b
    trl-doctor check recipe.yaml
    trl-doctor check recipes/*.yaml other.yaml
    trl-doctor check [OPTIONS] -- python train.py ARGS
    trl-doctor check [OPTIONS] -- accelerate launch [ACCELERATE OPTIONS] train.py ARGS
    trl-doctor check [OPTIONS] -- trl grpo --config recipe.yaml

    A launch command runs the user's script (user code) in the check's worker until it constructs a TRL trainer
    (GRPO, RLOO, PPO or a subclass), with models on the meta device and no training, saving, hub or tracker;
    the rules then check exactly what that trainer was given."""
    from ._worker import quiet_environment

    quiet_environment()  # the worker's own rules, for anything this process loads too (the config, a hub id)
    from ._errors import InputError
    from ._registry import RegistryError

    if static_only:
        smoke = False
    try:
        launch = _launch(target)
        configs = [] if launch else _configs(target)
        if len(configs) > 1:
            raise click.exceptions.Exit(_check_many(
                configs, fix, unsafe_fixes, show_diff, fmt, output, select, ignore, smoke, smoke_timeout, device,
                trust_remote_code, fail_on, num_processes, target_gpus, static_only))
        code = _check(None if launch else configs[0], fix, unsafe_fixes, show_diff, fmt, output, select, ignore, smoke,
                      smoke_timeout, device, trust_remote_code, fail_on, num_processes,
                      launch=launch, load_weights=load_weights, script_timeout=script_timeout, verbose=verbose,
                      target=target_gpus, static=static_only)
    except (InputError, RegistryError) as exc:
        raise _input_error(str(exc)) from None
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: the worker's processes and the check's folder are gone
        from ._interrupt import exit_code, signal_name

        click.echo(f"trl-doctor: interrupted ({signal_name(exc)}): the check was stopped", err=True)
        raise click.exceptions.Exit(exit_code(exc)) from None
    except (click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # the doctor's own bug, met on some input: one line, the traceback only with -v
        if verbose:
            import traceback

            traceback.print_exc()
        raise _input_error(_unexpected(exc, target, verbose)) from None
    raise click.exceptions.Exit(code)


def _unexpected(exc: Exception, target: tuple[str, ...], verbose: bool) -> str:
    what = " ".join(target)
    if isinstance(exc, RecursionError):
        return f"{what}: an input is nested too deeply to check"
    if isinstance(exc, MemoryError):
        return f"{what}: an input is too large to check in this machine's memory"
    loop = _symlink_loop(exc)
    if loop:
        return f"{loop}: a symbolic link loop (the link leads back to itself), not a file or folder"
    text = str(exc).splitlines()[0][:300] if str(exc) else ""
    hint = "" if verbose else " (-v shows the traceback)"
    return f"{what}: the check stopped on {type(exc).__name__}: {text}{hint}"


def _symlink_loop(exc: Exception) -> str | None:
    """The path of a symbolic link loop `exc` reports (pathlib's RuntimeError before Python 3.13, ELOOP after)."""
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return str(exc.filename)
    text = str(exc)
    if isinstance(exc, RuntimeError) and text.startswith("Symlink loop from "):
        return text[len("Symlink loop from "):].strip("'\"")
    return None


def _launch(target: tuple[str, ...]):
    """The launch command TARGET names, or None when it is one config file."""
    from .capture.command import is_launch_command, parse_command

    return parse_command(target) if is_launch_command(target) else None


def _configs(args: tuple[str, ...]) -> list[str]:
    """The config files named, globs expanded (`recipes/**/*.yaml`); a glob that matches nothing is an input error."""
    import glob

    out: list[str] = []
    for arg in args:
        if any(c in arg for c in "*?[") and not Path(arg).exists():
            found = sorted(glob.glob(arg, recursive=True))
            if not found:
                from ._errors import InputError

                raise InputError(f"{arg}: no config file matches")
            out += [f for f in found if f not in out]
        elif arg not in out:
            out.append(arg)
    return out


def _check_many(configs, fix, unsafe_fixes, show_diff, fmt, output, select, ignore, smoke, smoke_timeout, device,
                trust_remote_code, fail_on, num_processes, target, static=False) -> int:
    """Each config checked in turn (a worker each), one combined report and exit status: 2 when a config could not
    be read (its one line on stderr, the others still checked), else 1 when any failed."""
    from ._errors import InputError
    from ._formats._combine import combine

    collected: list[tuple[str, dict]] = []
    errors: list[str] = []
    worst = 0
    for config in configs:
        try:
            code = _check(config, fix, unsafe_fixes, show_diff, fmt, None, select, ignore, smoke, smoke_timeout, device,
                          trust_remote_code, fail_on, num_processes, target=target, collect=collected, static=static)
        except InputError as exc:
            click.echo(f"trl-doctor: error: {exc}", err=True)
            errors.append(str(exc))
            continue
        worst = max(worst, code)
    text = combine(fmt, [t for t, _ in collected], [s for _, s in collected], errors)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
    return EXIT_INPUT if errors else worst


def _check(config, fix, unsafe_fixes, show_diff, fmt, output, select, ignore, smoke, smoke_timeout, device, trust_remote_code, fail_on,
           num_processes=None, launch=None, load_weights=False, script_timeout=300.0, verbose=False, target=None,
           collect: list | None = None, static: bool = False) -> int:
    from dataclasses import replace

    from . import _fixer
    from ._config import load_config
    from ._context import Options
    from ._engine import exit_status
    from ._project import find_project_config
    from ._registry import all_rules, run_order, select_rules
    from ._session import run_check
    from ._suppress import Suppressor

    # the project's settings ([tool.trl-doctor] / .trl-doctor.toml, nearest the config), under the command line's
    from ._config import checked_path

    project = find_project_config(checked_path(str(config), str(config)).parent if config else Path.cwd())
    chosen = _names(select) or list(project.select)
    ignored = _names(ignore) + list(project.ignore) + project.ignores_for(Path(config) if config else None)
    fail_on = fail_on or project.fail_on or "fail"
    smoke = smoke if smoke is not None else (project.smoke if project.smoke is not None else True)
    target = target or project.target
    if target:  # a bad --target (or project target) is exit 2 before any worker starts
        from ._target import target_gpus

        target_gpus(target)
    rules = run_order(select_rules(all_rules(), chosen, ignored))
    if static:  # the trainer-run group (the probes and the step) stays out
        rules = [r for r in rules if r.group != "trainer run"]
    options = Options(device=device, trust_remote_code=trust_remote_code, smoke=smoke, smoke_timeout=smoke_timeout,
                      unsafe_fixes=unsafe_fixes and (fix or show_diff), num_processes=num_processes,
                      launch=launch.to_json() if launch else None, load_weights=load_weights,
                      script_timeout=script_timeout, verbose=verbose, target=target, **_worker_limits())
    progress = _progress() if _progress_wanted() else None
    color = output is None and fmt == "table" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    stream = _Stream(rules, color, progress) if fmt == "table" and output is None and not (fix or show_diff) \
        and collect is None and _streaming_wanted() else None

    def run_once():
        if launch is not None:
            target = _Target(launch.script or launch.cwd, "?", launch.text)

            def captured(info: dict) -> None:
                target.path = (info.get("constructed_at") or "").rsplit(":", 1)[0] or target.path
                target.trainer, target.launch = info["trainer"], info
                if stream is not None:
                    stream.start(target)

            results = run_check(None, rules, options, on_result=stream.row if stream else None, on_progress=progress,
                                on_capture=captured)
            return target, results
        cfg = load_config(config)  # light: a bad config is exit 2 before any worker starts
        if stream is not None:
            stream.start(cfg)
        suppress = Suppressor(cfg.path)  # `# trl-doctor: ignore[rule]` on a key's line
        results = run_check(cfg.path, rules, options, on_progress=progress,
                            on_result=(lambda r: stream.row(suppress(r))) if stream else None)
        return cfg, [suppress(r) for r in results]

    cfg, results = run_once()
    applied_files: list[dict] = []
    if fix or show_diff:
        fixes = [r.pending_fix for r in results if r.pending_fix and r.pending_fix.applies(unsafe_fixes)]
        changes = _fixer.plan(fixes)
        if show_diff:
            _clear(progress)
            text = _fixer.unified_diff(changes)
            click.echo(text if text else "trl-doctor: no fix would change any file", nl=False, err=not text)
            if not text:
                click.echo("", err=True)
            if output:
                _write_report(fmt, cfg, results, [], output, color=False)
            return exit_status(results, fail_on)
        written = _fixer.apply(changes, fixes, cfg)  # under the folders' locks: finishes a killed --fix, plans again
        if fixes or written:  # re-checked too when a concurrent --fix already made the changes
            applied_files = [{"file": str(p), "backup": str(b) if b else None} for p, b in written]
            fixed_ids = {r.id: r.fix for r in results if r.pending_fix in fixes}
            cfg, results = run_once()
            results = [
                replace(r, fix=replace(fixed_ids[r.id], applied=True)) if r.id in fixed_ids and (r.fix is None or r.status.value in ("pass", "skip")) else r
                for r in results
            ]
    _clear(progress)
    if stream is not None:
        stream.finish(_report(cfg, results, applied_files))
    elif collect is not None:
        report = _report(cfg, results, applied_files)
        collect.append((_render(fmt, report, color), report.summary))
    else:
        _write_report(fmt, cfg, results, applied_files, output, color)
    return exit_status(results, fail_on)


def _worker_limits() -> dict:
    """--user-code-timeout, --max-memory, --sample and --target-env, from the command's parameters (every config of
    one call shares them)."""
    ctx = click.get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    return {"user_code_timeout": params.get("user_code_timeout", 60.0), "max_memory": params.get("max_memory"),
            "sample": params.get("sample"), "target_env": params.get("target_env") or "this"}


class _Target:
    """What a launch command's report is about: the file that built the trainer, the trainer, the capture."""

    def __init__(self, path: str, trainer: str, command: str):
        self.path, self.trainer, self.command = path, trainer, command
        self.launch: dict | None = None


class _Stream:
    """The table on a terminal: the header at once, each rule's row as its result arrives (in run order), then
    the details and the summary. The lines are the ones the table format writes at once."""

    def __init__(self, rules, color: bool, progress):
        self.slugs = [r.slug for r in rules]
        self.color = color
        self.progress = progress

    def start(self, cfg) -> None:
        from ._formats import _table

        click.echo("\n".join(_table.header(__version__, _shown(cfg), cfg.trainer, self.slugs, _launch_of(cfg))))

    def row(self, result) -> None:
        from ._formats import _table

        _clear(self.progress)
        click.echo(_table.row(result, self.slugs, self.color))

    def finish(self, report) -> None:
        from ._formats import _table

        click.echo("\n".join(_table.tail(report, self.color)))


def _streaming_wanted() -> bool:
    """Rows as rules finish when stdout is a terminal (TRL_DOCTOR_STREAM=1 or 0 forces it on or off)."""
    return _wanted("TRL_DOCTOR_STREAM", sys.stdout)


def _wanted(variable: str, stream) -> bool:
    """On when `stream` is a terminal, unless `variable` says 1 (on) or 0 / empty (off)."""
    forced = os.environ.get(variable)
    if forced is not None:
        return forced not in ("", "0")
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _report(cfg, results, applied):
    from ._engine import summarize
    from ._env import environment
    from ._formats import Report

    return Report(__version__, str(cfg.path), cfg.trainer, environment(), results, summarize(results), applied,
                  _launch_of(cfg))


def _shown(cfg) -> str:
    return getattr(cfg, "command", None) or str(cfg.path)


def _launch_of(cfg) -> dict | None:
    return getattr(cfg, "launch", None) if isinstance(cfg, _Target) else None


def _render(fmt, report, color) -> str:
    from dataclasses import replace

    from ._formats import render

    if fmt != "table":  # the machine formats list rules by id, as they always have; the table in run order
        report = replace(report, results=sorted(report.results, key=lambda r: r.id))
    return render(fmt, report, color=color)


def _write_report(fmt, cfg, results, applied, output, color) -> None:
    text = _render(fmt, _report(cfg, results, applied), color)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)


def _progress_wanted() -> bool:
    """Progress on stderr when it is a terminal (TRL_DOCTOR_PROGRESS=1 or 0 forces it on or off)."""
    return _wanted("TRL_DOCTOR_PROGRESS", sys.stderr)


def _progress():
    def show(text: str) -> None:
        click.echo(f"\r\033[Ktrl-doctor: {text}", nl=False, err=True)

    return show


def _clear(progress) -> None:
    if progress is not None:
        click.echo("\r\033[K", nl=False, err=True)


@main.command("rules")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def list_rules(fmt):
    """List every rule: id, slug, title, trainers, autofix."""
    from ._registry import RegistryError, all_rules

    try:
        rules = all_rules()
    except RegistryError as exc:
        raise _input_error(str(exc)) from None
    if fmt == "json":
        import json

        click.echo(json.dumps([
            {"id": r.id, "slug": r.slug, "title": r.title, "severity": r.severity, "trainers": list(r.trainers),
             "fix": r.fixable, "source": r.source, "module": r.module} for r in rules], indent=2))
        return
    from tabulate import tabulate

    rows = [[r.id, r.slug, r.title, ",".join(r.trainers), r.fixable if r.has_fix else "-", r.source] for r in rules]
    click.echo(tabulate(rows, headers=["id", "slug", "title", "trainers", "fix", "source"], tablefmt="simple"))


@main.command()
@click.argument("rule")
def explain(rule):
    """Print a rule's full explanation (RULE is an id like TD001 or a slug like pad-token)."""
    from ._registry import RegistryError, all_rules, find_rule

    try:
        r = find_rule(all_rules(), rule)
    except RegistryError as exc:
        raise _input_error(str(exc)) from None
    click.echo(f"{r.id} {r.slug}: {r.title}")
    click.echo(f"trainers: {', '.join(r.trainers)}    severity: {r.severity}    fix: {r.fixable}    from: {r.source}")
    click.echo("")
    click.echo(r.explanation)


@main.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def env(fmt):
    """Print python, torch (and its CUDA), transformers, trl, accelerate, vllm versions, the GPUs and the
    version-skew findings (declared ranges the installed packages miss, known breakages that apply)."""
    from ._env import environment
    from .facts.versions import env_section, environment_findings

    e = environment()
    skew = environment_findings()
    if fmt == "json":
        import json

        extra = {"known_issues_error": skew["table_error"]} if "table_error" in skew else {}
        click.echo(json.dumps({**e, "requirements_checked": skew["requirements_checked"],
                               "findings": [f.as_dict() for f in skew["findings"]], **extra}, indent=2))
        return
    from tabulate import tabulate

    rows = [["python", e["python"]], ["platform", e["platform"]]]
    rows += [[name, v or "not installed"] for name, v in e["packages"].items()]
    rows.append(["torch CUDA build", e["torch_cuda"] or "none (CPU build)"])
    click.echo(tabulate(rows, headers=["package", "version"], tablefmt="simple"))
    click.echo("")
    if e["gpus"]:
        click.echo(tabulate(
            [[g["index"], g["name"], g["memory_total_mib"], g["memory_free_mib"], g["compute_capability"], g["driver"], g["driver_cuda"]] for g in e["gpus"]],
            headers=["gpu", "name", "total MiB", "free MiB", "capability", "driver", "driver CUDA"], tablefmt="simple"))
    else:
        click.echo(f"GPUs: none ({e.get('gpu_note', 'NVML reports no device')})")
    click.echo("")
    click.echo("\n".join(env_section(skew)))


if __name__ == "__main__":
    main()
