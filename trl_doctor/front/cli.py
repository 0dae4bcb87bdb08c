"""The `trl-doctor` command line. Only click and the light engine modules are imported here; torch,
transformers and trl are imported by the context loaders when a rule first needs them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from trl_doctor.options import DEFAULTS
from trl_doctor.version import __version__
from trl_doctor.vocabulary import FORMATS, LISTING_FORMATS

from trl_doctor.front.output import EXIT_INPUT, emit as _emit, error_line as _error_line, input_error as _input_error


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trl-doctor")
def main() -> None:
    """Preflight checks for RL fine-tuning with TRL (GRPO, RLOO, PPO): run before you spend a GPU-day.

    \b
    Exit status: 0 nothing failed; 1 a rule failed or errored (or warned, with --fail-on warn);
    2 the config or one of its inputs cannot be read, or torch, transformers or TRL is not installed.
    """


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("subject", nargs=-1, required=True, metavar="CONFIG... | -- LAUNCH COMMAND")
@click.option("--fix", is_flag=True, help="Apply the safe fixes, then check again.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that rewrite model weights.")
@click.option("--diff", "show_diff", is_flag=True, help="Print what --fix would change as a unified diff; change nothing.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), help="Write the report to this file.")
@click.option("--report", "reports", multiple=True, metavar="FORMAT=FILE",
              help="Also write the report in FORMAT to FILE, from the same run (repeatable): --report sarif=out.sarif --report junit=out.xml.")
@click.option("--select", help="Only these rules: ids (TD001) or slugs (pad-token), comma-separated.")
@click.option("--ignore", help="Skip these rules: ids or slugs, comma-separated.")
@click.option("--isolated", is_flag=True, help="Ignore all project configuration (.trl-doctor.toml, [tool.trl-doctor]) and inline `# trl-doctor: ignore` comments, as ruff's --isolated.")
@click.option("--progress/--no-progress", default=None, help="Progress on stderr: each config of several, each long stage (default: when stderr is a terminal).")
@click.option("--smoke/--no-smoke", default=None, help="Run the one-step training smoke test (default: on).")
@click.option("--static", "static_only", is_flag=True, help="Judge from files only, in this process: no torch, transformers or TRL imported, none of the repository's code run (reward modules, remote code); rules that need more are skipped with the reason. For pre-commit and CI on pull requests.")
@click.option("--trl-version", "trl_version", default=None, metavar="VERSION", help="With --static: the TRL release to judge against (default: the installed one, else the newest trl-doctor knows).")
@click.option("--smoke-timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULTS.smoke_timeout, show_default=True, help="Seconds the trainer run (probes and smoke step) may take, counted from its start in the worker.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=DEFAULTS.device, show_default=True)
@click.option("--trust-remote-code", is_flag=True, help="Allow the model's own Python code (auto_map) to run.")
@click.option("--num-processes", type=click.IntRange(min=1), default=None,
              help="Training processes of the launch (accelerate's --num_processes); default: the config's accelerate settings, else the visible GPUs.")
@click.option("--fail-on", type=click.Choice(["fail", "warn"]), default=None, help="Lowest status that makes the exit status 1 (default: fail).")
@click.option("--target", "target_gpus", help="The launch machine's GPUs, e.g. 8xH100-80GB, 4xA100-40GB, 1xA10G, 2xL4, 1xT4: the GPU verdicts judge them instead of this machine's.")
@click.option("--target-env", type=click.Choice(["auto", "this", "other"]), default=DEFAULTS.target_env, show_default=True,
              help="With --target: whether the launch machine's Python environment is this one (flash-attn, bitsandbytes, deepspeed and liger-kernel installed here are judged as the launch's) or another (they are not judged). auto: this one when this torch is a CUDA build, another when it is not (a CPU torch is no GPU job's environment).")
@click.option("--load-weights", is_flag=True, help="With a launch command: let the script load real weights (default: models on the meta device).")
@click.option("--script-timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULTS.script_timeout, show_default=True, help="Seconds a launch command's script may take to construct its trainer.")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks: a launch command's script that fails before its trainer, and any unexpected stop of the check.")
@click.option("--user-code-timeout", type=click.FloatRange(min=0.1), default=DEFAULTS.user_code_timeout, show_default=True, help="Seconds the user's code (importing a reward module, one reward call, rendering the chat template) may run before it is stopped.")
@click.option("--sample", type=click.IntRange(min=0), default=None, metavar="N",
              help="After the smoke step, sample num_generations completions for N dataset prompts with the real model and score them: completions cut at max_completion_length, groups with no reward spread (default: 2 on a GPU where the real model fits with --format table, else off; 0: off).")
@click.option("--fail-fast", is_flag=True,
              help="Stop at the first verdict that fails the check (see --fail-on): the worker is stopped, even in the trainer run's step, and the rules not reached are reported as skipped ('not run: --fail-fast'). With several configs, the configs after the first that fails are not checked.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST[:PORT]",
              help="Let the check contact this other machine (repeatable): the vLLM server probe of a recipe whose server runs there, and the script's own connections to it. By default the check opens connections only to this machine; --static never opens one.")
@click.option("--max-memory", type=click.FloatRange(min=0), default=None, help="GiB of address space the check's worker may use where it uses no CUDA (default: 85% of physical memory; 0: no limit).")
def check(subject, fix, unsafe_fixes, show_diff, fmt, output, reports, select, ignore, isolated, progress, smoke, smoke_timeout,
          device, trust_remote_code, num_processes, fail_on, target_gpus, load_weights, script_timeout, verbose, static_only,
          user_code_timeout, max_memory, sample, target_env, fail_fast, trl_version, allow_hosts):
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
    from trl_doctor.runtime.quiet import quiet_environment

    quiet_environment()  # the worker's own rules, for anything this process loads too (the config, a hub id)
    from trl_doctor.errors import InputError
    from trl_doctor.registry import RegistryError
    from trl_doctor.front.request import Request
    from trl_doctor.front.settings import Asked

    request = Request(Asked.of(select=select, ignore=ignore, fail_on=fail_on, smoke=smoke, target=target_gpus,
                               static=static_only, isolated=isolated, target_env=target_env,
                               allow_hosts=allow_hosts),
                      dict(device=device, trust_remote_code=trust_remote_code, smoke_timeout=smoke_timeout,
                           num_processes=num_processes, load_weights=load_weights, script_timeout=script_timeout,
                           verbose=verbose, user_code_timeout=user_code_timeout, max_memory=max_memory,
                           sample=sample_asked(sample, fmt)),
                      fix=fix, diff=show_diff, unsafe_fixes=unsafe_fixes, trl_version=trl_version, fail_fast=fail_fast)
    from trl_doctor.front.output import remember_report_paths

    outputs = _outputs(fmt, output, reports)
    remember_report_paths(path for _, path in outputs)  # before any of the user's code runs
    run = _Run(request, outputs,
               _progress() if _wanted("TRL_DOCTOR_PROGRESS", sys.stderr, progress) else None)
    try:
        launch = _launch(subject)
        request.refuse(launch)
        configs = [] if launch else _configs(subject)
        from trl_doctor.supervisor.warm import warm_server

        with warm_server(len(configs), static=request.asked.static):
            code = _check_many(configs, run) if len(configs) > 1 else _check_one(configs, launch, run)
    except (InputError, RegistryError) as exc:
        raise _stopped(run, str(exc)) from None
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: the worker's processes and the check's folder are gone
        from trl_doctor.supervisor.interrupt import exit_code, signal_name

        click.echo(f"trl-doctor: interrupted ({signal_name(exc)}): the check was stopped", err=True)
        raise click.exceptions.Exit(exit_code(exc)) from None
    except (click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # the doctor's own bug, met on some input: one line, the traceback only with -v
        from trl_doctor.front.output import unexpected

        if verbose:
            import traceback

            traceback.print_exc()
        raise _stopped(run, unexpected(exc, " ".join(subject), verbose)) from None
    raise click.exceptions.Exit(code)


def _stopped(run: "_Run", message: str) -> "click.exceptions.Exit":
    """Exit 2 with its one line; the report files asked for still say why (a CI gate uploads them whatever the
    exit status)."""
    from trl_doctor.errors import InputError

    try:
        _write_combined(run, [], [message], files_only=True)
    except InputError:  # a report file that cannot be written (a full disk) already gave the line
        pass
    return _input_error(message)


class _Run:
    """One `check` call: its request (trl_doctor.front.request, shared with the API), where each format goes, and
    the progress line (every config of the call shares them)."""

    def __init__(self, request, outputs, progress):
        self.request, self.outputs, self.progress = request, outputs, progress

    @property
    def fixing(self) -> bool:
        return self.request.fixing


def _outputs(fmt: str, output: str | None, reports: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """[(format, file or None for stdout)]: --format/-o, then each --report FORMAT=FILE, all from one run."""
    from trl_doctor.report.formats import FORMATS

    out = [(fmt, output)]
    for item in reports:
        name, sep, path = item.partition("=")
        if not sep or name not in FORMATS or not path:
            raise click.BadParameter(f"{item!r}: expected FORMAT=FILE, FORMAT one of {', '.join(FORMATS)}",
                                     param_hint="--report")
        out.append((name, path))
    return out


def _launch(subject: tuple[str, ...]):
    """The launch command the arguments name, or None when they name config files."""
    from trl_doctor.capture.command import is_launch_command, parse_command

    return parse_command(subject) if is_launch_command(subject) else None


def _configs(args: tuple[str, ...]) -> list[str]:
    """The config files named, globs expanded (`recipes/**/*.yaml`); a glob that matches nothing is an input error."""
    import glob

    out: list[str] = []
    for arg in args:
        if any(c in arg for c in "*?[") and not Path(arg).exists():
            found = sorted(glob.glob(arg, recursive=True))
            if not found:
                from trl_doctor.errors import InputError

                raise InputError(f"{arg}: no config file matches")
            out += [f for f in found if f not in out]
        elif arg not in out:
            out.append(arg)
    return out


def _check_one(configs: list[str], launch, run: _Run) -> int:
    """One config (or a launch command): its report in every format asked, from one run."""
    code, report, stdout_taken = _check(configs[0] if configs else None, launch, run)
    for fmt, path in run.outputs:
        if path is not None or not stdout_taken:
            _emit(_render(fmt, report, _color(fmt, path)), path)
    return code


def _check_many(configs: list[str], run: _Run) -> int:
    """Each config checked in turn (a worker each), one combined report per format and one exit status: 2 when a
    config could not be read (its one line on stderr, the others still checked), else 1 when any failed."""
    from trl_doctor.errors import InputError

    reports, errors, worst = [], [], 0
    for number, config in enumerate(configs, 1):
        if run.request.fail_fast and worst:  # as pytest -x: the first config that fails ends the call
            from trl_doctor.report.formats._safe import for_terminal

            left = configs[number - 1:]
            click.echo(for_terminal(f"trl-doctor: --fail-fast: {len(left)} config(s) not checked after a failure: "
                                    + ", ".join(left), one_line=True), err=True)
            break
        if run.progress is not None:
            run.progress(f"config {number} of {len(configs)}: {config}", whole_line=True)
        try:
            code, report, _ = _check(config, None, run, many=True)
        except InputError as exc:
            _error_line(str(exc))
            errors.append(str(exc))
            continue
        reports.append(report)
        worst = max(worst, code)
    _write_combined(run, reports, errors, streamed=_github_streams(run))
    return EXIT_INPUT if errors else worst


def _write_combined(run: _Run, reports: list, errors: list[str], files_only: bool = False,
                    streamed: bool = False) -> None:
    """Each format's combined document; stdout's github annotations, when they streamed, only lack the lines of the
    configs that could not be read (the combined github document is each config's lines, then those)."""
    from trl_doctor.report.formats._combine import combine

    for fmt, path in run.outputs:
        if path is None and streamed:
            _emit(combine(fmt, [], errors), path)
        elif path is not None or not files_only:
            _emit(combine(fmt, [_sorted(fmt, r) for r in reports], errors), path)


def _check(config, launch, run: _Run, many: bool = False):
    """(exit status, report, whether stdout already has it) of one config or launch command, run as the API runs it
    (trl_doctor.front.request), streamed to a terminal or a CI log, --diff printed instead of written."""
    from trl_doctor.context.config import checked_path
    from trl_doctor.front.request import run as run_request
    from trl_doctor.types import exit_status

    outcome = run_request(run.request, checked_path(str(config), str(config)) if config else None, launch,
                          make_stream=_stream(run, many), on_progress=run.progress)
    if run.request.diff:
        _show_diff(outcome.results, run)
        return exit_status(outcome.results, outcome.settings.fail_on), outcome.report(), True
    _clear(run.progress)
    report = outcome.report()
    if outcome.stream is not None:
        outcome.stream.finish(report)
    return exit_status(outcome.results, outcome.settings.fail_on), report, outcome.stream is not None


def _stream(run: _Run, many: bool):
    """What makes the writer of stdout's report while the check runs (from the settings), or None: the table on a
    terminal (one config), the github annotations always (their lines are the same however they are written;
    TRL_DOCTOR_STREAM=0 turns both off)."""
    from trl_doctor.report.streaming import GithubStream

    fmt, output = run.outputs[0]
    if output is not None or run.fixing:  # --fix and --diff report the state after the fix
        return None
    if fmt == "table" and not many and _wanted("TRL_DOCTOR_STREAM", sys.stdout):
        return lambda settings: _Stream(settings.rules, _color(fmt, output), run.progress)
    return (lambda settings: GithubStream()) if _github_streams(run) else None


def _github_streams(run: _Run) -> bool:
    fmt, output = run.outputs[0]
    return fmt == "github" and output is None and not run.fixing and os.environ.get("TRL_DOCTOR_STREAM", "1") not in ("", "0")


def _show_diff(results, run: _Run) -> None:
    """--diff: what --fix would change, as a unified diff on stdout; nothing is written."""
    from trl_doctor.fix import fixer as _fixer
    from trl_doctor.report.formats._safe import for_terminal

    _clear(run.progress)
    text = _fixer.diff_of(results, run.request.unsafe_fixes)
    if text:
        click.echo(for_terminal(text), nl=False)
    else:
        click.echo("trl-doctor: no fix would change any file", err=True)


def sample_asked(sample: int | None, fmt: str) -> int | None:
    """--sample as the worker gets it: None leaves the default to the worker (2 prompts on a GPU where the step ran
    the real model) for the table; under a machine format (json, sarif, junit, github: a CI gate) the default is off,
    so that the gate's verdict comes as soon as the step's and does not hang on sampled text; --sample N still asks."""
    if sample is None and fmt != "table":
        return 0
    return sample

class _Stream:
    """The table on a terminal: the header as soon as what will run is known (the worker says it before the first
    result; the first row or the end prints it where it never comes), each rule's row as its result arrives (in run
    order), then the details and the summary. The lines are the ones the table format writes at once, neutralised
    the same way (trl_doctor.report.formats.render)."""

    def __init__(self, rules, color: bool, progress):
        self.slugs = [r.slug for r in rules]
        self.color = color
        self.progress = progress
        self.pending: tuple | None = None  # (cfg, settings) of a header not printed yet

    def start(self, cfg, settings: list[dict]) -> None:
        self.pending = (cfg, settings)

    def will_run(self, plan: dict) -> None:
        self._header(plan)

    def _header(self, plan: dict | None = None) -> None:
        from trl_doctor.report.formats import _table
        from trl_doctor.report.formats._safe import clean, visible

        if self.pending is None:
            return
        (cfg, settings), self.pending = self.pending, None
        _clear(self.progress)
        self._echo(_table.header(__version__, _shown(cfg), cfg.trainer, self.slugs, _launch_of(cfg), settings,
                                 clean(plan, visible) if plan else None))

    def row(self, result) -> None:
        from trl_doctor.report.formats import _table
        from trl_doctor.report.formats._safe import clean, visible

        self._header()
        _clear(self.progress)
        self._echo([_table.row(clean(result, visible), self.slugs, self.color)])

    def finish(self, report) -> None:
        from trl_doctor.report.formats import _table
        from trl_doctor.report.formats._safe import clean_report, visible

        self._header()
        self._echo(_table.tail(clean_report(report, visible), self.color))

    @staticmethod
    def _echo(lines: list[str]) -> None:
        from trl_doctor.report.formats import guard

        click.echo(guard("table", "\n".join(lines)))


def _wanted(variable: str, stream, asked: bool | None = None) -> bool:
    """`asked` (a --flag) when given; else on when `stream` is a terminal, unless `variable` says 1 (on) or 0 /
    empty (off)."""
    if asked is not None:
        return asked
    forced = os.environ.get(variable)
    if forced is not None:
        return forced not in ("", "0")
    return _is_tty(stream)


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _shown(cfg) -> str:
    return getattr(cfg, "command", None) or str(cfg.path)


def _launch_of(cfg) -> dict | None:
    from trl_doctor.front.request import Subject

    return getattr(cfg, "launch", None) if isinstance(cfg, Subject) else None


def _sorted(fmt, report):
    """The machine formats list rules by id, as they always have; the table and the github annotations in run
    order (the order their lines stream in)."""
    from dataclasses import replace

    return report if fmt in ("table", "github") else replace(report, results=sorted(report.results, key=lambda r: r.id))


def _render(fmt, report, color: bool = False) -> str:
    from trl_doctor.report.formats import render

    return render(fmt, _sorted(fmt, report), color=color)


def _color(fmt: str, path: str | None) -> bool:
    """The table's statuses in colour on a terminal (NO_COLOR turns it off)."""
    return path is None and fmt == "table" and _is_tty(sys.stdout) and "NO_COLOR" not in os.environ


def _progress():
    """Progress lines on stderr: redrawn in place on a terminal, one line each elsewhere (--progress in a log)."""
    from trl_doctor.report.formats._safe import for_terminal

    tty = _is_tty(sys.stderr)

    def show(text: str, whole_line: bool = False) -> None:
        text = for_terminal(text, one_line=True)
        if not tty:
            click.echo(f"trl-doctor: {text}", err=True)
        elif whole_line:  # a config of several: it stays on screen above the rows
            click.echo(f"\r\033[Ktrl-doctor: {text}", err=True)
        else:
            click.echo(f"\r\033[Ktrl-doctor: {text}", nl=False, err=True)

    show.tty = tty
    return show


def _clear(progress) -> None:
    if progress is not None and getattr(progress, "tty", False):
        click.echo("\r\033[K", nl=False, err=True)


@main.command("rules")
@click.option("--format", "fmt", type=click.Choice(LISTING_FORMATS), default="table", show_default=True)
def list_rules(fmt):
    """List every rule: id, slug, title, trainers, autofix."""
    from trl_doctor.registry import RegistryError, all_rules

    try:
        rules = all_rules(lazy=True)
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
    from trl_doctor.registry import RegistryError, all_rules, find_rule

    try:
        r = find_rule(all_rules(lazy=True), rule)
    except RegistryError as exc:
        raise _input_error(str(exc)) from None
    click.echo(f"{r.id} {r.slug}: {r.title}")
    click.echo(f"trainers: {', '.join(r.trainers)}    severity: {r.severity}    fix: {r.fixable}    from: {r.source}")
    click.echo("")
    click.echo(r.explanation)


@main.command()
@click.option("--format", "fmt", type=click.Choice(LISTING_FORMATS), default="table", show_default=True)
def env(fmt):
    """Print python, torch (and its CUDA), transformers, trl, accelerate, vllm versions, the GPUs and the
    version-skew findings (declared ranges the installed packages miss, known breakages that apply)."""
    from trl_doctor.context.env import environment
    from trl_doctor.facts.trl.versions import env_section, environment_findings

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


def _add_watch() -> None:
    from trl_doctor.front.watch_cli import watch

    main.add_command(watch)


_add_watch()
