"""`trl-doctor watch PATH`: the watch rules on a job's logged metrics, from the outside (trl_doctor.watch.run).
The same formats and exit codes as `check`: 0 nothing failed, 1 a rule failed (or warned, with --fail-on warn),
2 PATH (or --config, --preflight) cannot be read as what it should be."""

from __future__ import annotations

from pathlib import Path

import click

from trl_doctor.vocabulary import ALL_TRAINERS, FORMATS


@click.command("watch")
@click.argument("path")
@click.option("--follow", is_flag=True, help="Keep reading a running job's log; stop at its end, at a failure, or on Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=2.0, show_default=True, help="Seconds between reads with --follow.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), help="Write the report to this file.")
@click.option("--plot", type=click.Path(path_type=Path), help="Write the curves, the flagged logs marked, as an SVG picture.")
@click.option("--select", help="Only these rules: ids (TW001) or slugs (zero-advantage), comma-separated.")
@click.option("--ignore", help="Skip these rules: ids or slugs, comma-separated.")
@click.option("--fail-on", type=click.Choice(["fail", "warn"]), default=None, help="Lowest status that makes the exit status 1 (default: fail).")
@click.option("--config", "recipe", type=click.Path(path_type=Path), help="The job's recipe (YAML/JSON): its beta, max_completion_length, fp16/bf16 sharpen the verdicts.")
@click.option("--preflight", type=click.Path(path_type=Path), help="The job's `trl-doctor check --format json` report: the watch names its verdicts.")
@click.option("--trainer", type=click.Choice(ALL_TRAINERS), default=None, help="The trainer that wrote the log (default: read from its metric names).")
@click.option("--isolated", is_flag=True, help="Ignore the project configuration ([tool.trl-doctor], .trl-doctor.toml).")
@click.option("--target", "target", default=None, metavar="NxMODEL", help="The GPUs the job trains on (8xH100-80GB): a finding's cost is also said in GPU-hours.")
@click.option("--run", "run", default=None, metavar="NAME", help="The run to judge in a store of several (a trackio project, a wandb folder, an MLflow store, runs/): its name or id (default: the newest).")
@click.option("--list-runs", is_flag=True, help="List the runs in PATH's store and exit.")
@click.option("-v", "--verbose", is_flag=True, help="Show the traceback of an unexpected stop of the watch.")
def watch(path, follow, interval, fmt, output, plot, select, ignore, fail_on, recipe, preflight, trainer, isolated, target,
          run, list_runs, verbose):
    """Judge a job's logged metrics: PATH is its output folder (TensorBoard's runs/, its checkpoints), a
    trainer_state.json, a log of the printed {'loss': ...} lines (JSON lines, a JSON list or CSV of rows), or a tracker's
    store: a trackio folder or project database, a wandb folder or run, an MLflow store (mlruns, mlflow.db, or a
    tracking server's http://HOST:PORT).

    \b
    trl-doctor watch outputs/Qwen2-0.5B-GRPO --follow
    trl-doctor watch train.log --follow
    trl-doctor watch ~/.cache/huggingface/trackio --run grpo-qwen
    trl-doctor watch wandb/ --list-runs
    trl-doctor watch http://127.0.0.1:5000 --run my-run
    trl-doctor watch outputs/run/checkpoint-500 --plot curves.svg --format json -o watch.json"""
    from trl_doctor.errors import InputError
    from trl_doctor.front.output import emit as _emit, input_error as _input_error
    from trl_doctor.registry import RegistryError

    path = path if path.startswith(("http://", "https://")) else Path(path)
    try:
        if list_runs:
            from trl_doctor.watch.source import list_runs as listing

            click.echo(listing(path))
            raise click.exceptions.Exit(0)
        asked, rules = _asked(path, select, ignore, fail_on, recipe, preflight, trainer, isolated, target)
        asked.run = run
        if follow:
            from trl_doctor.watch import fitted
            from trl_doctor.watch.run import follow as follow_log

            report, history = follow_log(asked, rules, lambda line: click.echo(fitted(line), err=True),
                                         interval=interval)
        else:
            import gc

            from trl_doctor.watch.source import read
            from trl_doctor.watch.run import judge_once

            # one read and one judgment, then the process ends: the collector's passes over the log's hundreds of
            # thousands of new objects (a 20,000-step log) free nothing, as they hold no cycles
            gc.disable()
            history = read(path, run)
            report = judge_once(asked, history, rules, running=False)
        text = report.render(fmt)
        if fmt == "table":
            from trl_doctor.watch.judge import sparklines

            text += sparklines(history, report.results)
        _emit(text, output)
        if plot is not None:
            from trl_doctor.watch.judge import SHOWN
            from trl_doctor.watch.plot import write

            names = history.names()
            shown = [m for m in SHOWN if m in names]
            write(plot, history, report.results, shown)
    except (InputError, RegistryError) as exc:
        raise _input_error(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("trl-doctor: watch stopped", err=True)
        raise click.exceptions.Exit(130) from None
    except (click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # the watch's own bug, met on some log: one line (exit 2), the traceback only with -v
        from trl_doctor.front.output import unexpected

        if verbose:
            import traceback

            traceback.print_exc()
        raise _input_error(unexpected(exc, str(path), verbose, "the watch")) from None
    raise click.exceptions.Exit(0 if report.ok else 1)


def _asked(path, select, ignore, fail_on, recipe, preflight, trainer, isolated, target):
    """What was asked, resolved by check's own request (trl_doctor.front.settings.resolve_watch)."""
    from trl_doctor.front.settings import Asked, resolve_watch
    from trl_doctor.watch.run import Watch, preflight_report

    here = Path.cwd() if isinstance(path, str) else path if path.is_dir() else path.parent  # a server: this folder's
    settings, thresholds = resolve_watch(Asked.of(select=select, ignore=ignore, fail_on=fail_on, target=target,
                                                  isolated=isolated), here)
    asked = Watch(path, fail_on=settings.fail_on, trainer=trainer, config=recipe, thresholds=thresholds,
                  preflight=preflight_report(preflight), gpus=len(settings.target_gpus) if settings.target_gpus else None)
    asked.settings.extend(settings.in_force)
    return asked, settings.rules
