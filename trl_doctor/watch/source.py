"""Where a watched job's metrics are read from: a tracker's store (trl_doctor.watch.stores: trackio, wandb, MLflow)
or a log file or folder (trl_doctor.watch.history: TensorBoard events, trainer_state.json, printed or JSON lines).
The one door `trl-doctor watch` reads through, once or following the job (trl_doctor.watch.run)."""

from __future__ import annotations

from pathlib import Path

from trl_doctor.errors import InputError
from trl_doctor.watch import history as hist
from trl_doctor.watch import stores


def read(path: str | Path, run: str | None = None):
    """The History at PATH: a tracker's store's run (`run`, else its newest), or the log `history.find_log` finds."""
    store = stores.open_store(path)
    if store is None:
        return hist.read(path, run)
    try:
        chosen, runs = stores.choose(store, run)
        history = stores.read_run(store, chosen, runs)
    finally:
        store.close()
    if not history.logs:
        raise InputError(f"{store.location}: run {chosen.name!r} holds no training log yet (the job logs every "
                         "logging_steps steps)")
    return history


def list_runs(target: str | Path) -> str:
    """`trl-doctor watch PATH --list-runs`: the runs of the store (or TensorBoard runs/ folder) at `target`, oldest
    first, one a line: name, id, when it started (UTC), whether the tracker says it ended."""
    from datetime import datetime, timezone

    store = stores.open_store(target)
    if store is not None:
        try:
            runs, kind, location = store.runs(), store.kind, store.location
        finally:
            store.close()
    else:
        from trl_doctor.watch import tensorboard

        folder = Path(target)
        found = tensorboard.run_folders(folder) if folder.is_dir() else []
        if not found:
            raise InputError(f"{target}: no tracker's store here (trackio, wandb, MLflow) and no TensorBoard runs")
        runs = [tensorboard.runs_of(next(f.glob(tensorboard.EVENTS + "*")))[0] for f in found]
        kind, location = "tensorboard", str(folder)
    from trl_doctor.report.formats._safe import for_terminal

    # a run's name and the store's path are the tracker's text (anyone's): no control, bidi or invisible character
    # and no workflow command reaches the terminal as itself
    lines = [f"{len(runs)} run{'s' if len(runs) != 1 else ''} in the {kind} store "
             f"{for_terminal(str(location), one_line=True)} (oldest first; --run NAME judges one, the newest by default):"]
    for run in runs:
        started = datetime.fromtimestamp(run.started, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") \
            if run.started else "start unknown"
        state = {True: "ended", False: "running or stopped", None: ""}[run.ended]
        lines.append(f"  {for_terminal(run.label(), one_line=True)}  {started}  {state}".rstrip())
    return "\n".join(lines)
