"""trackio's local store: one SQLite database per project (`<project>.db` under TRACKIO_DIR, by default
~/.cache/huggingface/trackio), whose `metrics` table holds every `trackio.log` call of every run of the project: a
row's run, its own step counter, and the logged dict as JSON. transformers' TrackioCallback logs each training log
with `train/global_step` in it (the trainer's step; trackio's own step counts every log call, TRL's profiling
timings included, each a row of its own).

Read through a read-only SQLite connection, one query per read (one consistent view while the job writes), the
values decoded with trackio's own `deserialize_values` (its "NaN"/"Infinity" strings). Not through trackio's
SQLiteStorage: it resolves a project's file under one TRACKIO_DIR per process, and its listing of runs downloads a
project from the Hub when TRACKIO_* settings name one; the watch contacts nothing the command line does not name.

A folder of several projects holds their runs together, named `project/run` where two projects share a name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trl_doctor.errors import InputError
from trl_doctor.watch.stores import Run, Store, readonly, sqlite_tables

MAX_ROWS = 2_000_000  # a 20,000-step job logs ~30 rows a step with TRL's profiling: past this it is no log


def _is_trackio(tables: dict[str, set[str]]) -> bool:
    return {"run_name", "step", "metrics"} <= tables.get("metrics", set()) and "configs" in tables \
        and "experiments" not in tables


def from_tables(path: Path, tables: dict[str, set[str]]) -> "TrackioStore | None":
    return TrackioStore([path]) if _is_trackio(tables) else None


def find(folder: Path) -> "TrackioStore | None":
    """A trackio folder (TRACKIO_DIR): its project databases."""
    try:
        candidates = sorted(p for p in folder.glob("*.db") if p.is_file())
    except OSError:
        return None
    projects = []
    for db in candidates[:200]:
        try:
            tables = sqlite_tables(db)
        except InputError:
            continue
        if tables is not None and _is_trackio(tables):
            projects.append(db)
    return TrackioStore(projects, folder) if projects else None


def _deserialize():
    try:
        from trackio.utils import deserialize_values
    except ImportError:
        raise InputError("reading a trackio store needs trackio (pip install \"trl-doctor[watch]\", or trackio "
                         "itself)") from None
    return deserialize_values


class TrackioStore(Store):
    kind = "trackio"

    def __init__(self, databases: list[Path], folder: Path | None = None):
        super().__init__(str(folder if folder is not None else databases[0]))
        self.databases = databases
        self._where: dict[str, tuple[Path, str, str]] = {}  # Run.id -> (database, column, value)

    def stamp(self) -> object:
        stamps: list[tuple[int, int] | None] = []
        for db in self.databases:
            for p in (db, db.with_name(db.name + "-wal")):
                try:
                    st = p.stat()
                    stamps.append((st.st_size, st.st_mtime_ns))
                except OSError:
                    stamps.append(None)
        return tuple(stamps)

    def runs(self) -> list[Run]:
        found = []
        for db in self.databases:
            columns = (sqlite_tables(db) or {}).get("metrics", set())
            key = "run_id" if "run_id" in columns else "run_name"
            with readonly(db) as conn:
                rows = conn.execute(f"SELECT {key}, run_name, MIN(timestamp) FROM metrics GROUP BY {key}, run_name "
                                    "LIMIT 10000").fetchall()
            for ident, name, started in rows:
                found.append((db, key, str(ident), str(name), _seconds(started)))
        names = [name for _, _, _, name, _ in found]
        runs = []
        for db, key, ident, name, started in sorted(found, key=lambda f: f[4]):
            label = f"{db.stem}/{name}" if len(self.databases) > 1 and names.count(name) > 1 else name
            run = Run(label, ident if key == "run_id" else label, started)
            self._where[run.id] = (db, key, ident)
            runs.append(run)
        return runs

    def args(self, run: Run) -> dict:
        """The run's config (TrackioCallback's trackio.init(config=...): the TrainingArguments and the model's)."""
        db, key, ident = self._where[run.id]
        if "configs" not in (sqlite_tables(db) or {}):
            return {}
        with readonly(db) as conn:
            row = conn.execute(f"SELECT config FROM configs WHERE {key} = ? ORDER BY id DESC LIMIT 1", (ident,)).fetchone()
        try:
            config = json.loads(row[0]) if row and row[0] and len(row[0]) < (16 << 20) else {}
        except (ValueError, RecursionError, TypeError):
            return {}
        return config if isinstance(config, dict) else {}

    def rows(self, run: Run):
        deserialize = _deserialize()
        db, key, ident = self._where[run.id]
        with readonly(db) as conn:
            cursor = conn.execute(f"SELECT step, metrics FROM metrics WHERE {key} = ? ORDER BY timestamp, id "
                                  f"LIMIT {MAX_ROWS}", (ident,))
            for step, text in cursor:
                try:
                    values = json.loads(text)
                except (ValueError, RecursionError, TypeError):
                    raise InputError(f"{db}: a metrics row that is not JSON (run {run.name!r}, step {step})") from None
                if isinstance(values, dict):
                    yield deserialize(values)


def _seconds(stamp) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return 0.0


def default_folder() -> Path:
    """Where trackio keeps its projects unless TRACKIO_DIR says otherwise (HF_HOME/trackio)."""
    if os.environ.get("TRACKIO_DIR"):
        return Path(os.environ["TRACKIO_DIR"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "trackio"
