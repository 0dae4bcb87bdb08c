"""The trackers' stores a running job writes its metrics to, read with each tracker's own code: trackio's local
project databases (stores/trackio_db.py), a wandb run folder, offline or not (stores/wandb_run.py), an MLflow store:
a `mlruns` folder, its SQLite database, or a tracking server this command line names (stores/mlflow_store.py).

A store holds runs: `runs()` lists them (oldest first), `rows(run)` gives one run's logged dicts, each carrying the
trainer's step. One run is judged at a time: the one `--run` names, else the newest, with the others named in the
report's settings. The rows become a History as any log's do (trl_doctor.watch.history.History.add): a row that is no
training log (a model-config dict, TRL's profiling timings, a tracker's bookkeeping) is not one.

Every store is hostile: a store is read, never written (a SQLite database through a read-only connection, or a
snapshot of it for a library that would write), with size limits, and a file that is not what it claims is refused
in one line naming it (InputError, exit 2). `open_store` answers None for what is no tracker's store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from trl_doctor.errors import InputError
from trl_doctor.watch.runinfo import Run

SQLITE_MAGIC = b"SQLite format 3\x00"


_PARTS = frozenset(("alembic_version", "experiments", "runs", "metrics", "configs"))  # MLflow's, trackio's


class Pending(InputError):
    """A store its tracker has begun but holds nothing yet (a database without its tables): a follower waits."""


class Store:
    """A tracker's store at `location`."""

    kind = ""

    def __init__(self, location: str):
        self.location = location

    def runs(self) -> list[Run]:
        raise NotImplementedError

    def rows(self, run: Run) -> Iterable[dict]:
        raise NotImplementedError

    def args(self, run: Run) -> dict:
        """The job's TrainingArguments as the tracker keeps them with the run (its config, its params): {} if none."""
        return {}

    def stamp(self) -> object:
        """What changes when the store does (None: read it again at every look)."""
        return None

    def close(self) -> None:
        pass


def open_store(target: str | Path) -> Store | None:
    """The tracker's store at `target` (a folder, a file, or an MLflow server's http(s) address), None for anything
    else (a TensorBoard folder, a trainer_state.json, a printed log: trl_doctor.watch.history reads those)."""
    from trl_doctor.watch.stores import mlflow_store, trackio_db, wandb_run

    text = str(target)
    if text.startswith(("http://", "https://")):
        return mlflow_store.server(text)
    path = Path(text)
    find: Callable[..., Any]
    if path.is_dir():
        for find in (wandb_run.find, mlflow_store.find, trackio_db.find):
            store = find(path)
            if store is not None:
                return store
        return None
    if path.is_file():
        if path.suffix == ".wandb":
            return wandb_run.WandbStore(path.parent, [path.parent])
        tables = sqlite_tables(path)
        if tables is None:
            return None
        if not tables:
            raise Pending(f"{path}: a SQLite database with no tables yet (a tracker that has just started)")
        for find in (mlflow_store.from_tables, trackio_db.from_tables):
            store = find(path, tables)
            if store is not None:
                return store
        if tables.keys() & _PARTS:  # a tracker making its tables (MLflow migrates them one step at a time)
            raise Pending(f"{path}: a tracker's SQLite store with some of its tables yet ({', '.join(sorted(tables))})")
        raise InputError(f"{path}: a SQLite database that is no tracker's store (neither trackio's nor MLflow's tables)")
    return None


def sqlite_tables(path: Path) -> dict[str, set[str]] | None:
    """A SQLite file's tables and their columns (read-only), None for a file that is not SQLite."""
    try:
        with open(path, "rb") as f:
            if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    import sqlite3

    try:
        with readonly(path) as db:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {n: {r[1] for r in db.execute(f'PRAGMA table_info("{n}")')} for n in names if '"' not in n}
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):  # a writer's transaction outlasted the reader's wait: read it again later
            raise Pending(f"{path}: a tracker is writing it ({exc})") from None
        raise InputError(f"{path}: a damaged SQLite database ({exc})") from None
    except sqlite3.Error as exc:
        raise InputError(f"{path}: a damaged SQLite database ({exc})") from None


class readonly:
    """A read-only connection to a SQLite file that leaves no trace beside it (issue 59). `mode=ro` alone makes a WAL
    database's `-wal` and `-shm` files when they are missing, and updates `-shm` when they are there. So a WAL
    database with no write-ahead log pending is opened `immutable` (no lock, no side file); one whose `-wal` holds
    frames (a running job's, or one a tracker left un-checkpointed) is read from a copy of the two files in a folder
    of the check's own, which SQLite reads up to the last whole commit. A database past COPY_LIMIT bytes is read in
    place (`mode=ro`) rather than copied. A rollback-journal database (MLflow's: SQLAlchemy keeps SQLite's default)
    is opened `mode=ro`, which makes no file beside it and waits for a writer's transaction: opened immutable, a read
    during a running job's write met half-written pages ("database disk image is malformed", CI 2026-11-27)."""

    COPY_LIMIT = 2 << 30

    def __init__(self, path: Path):
        self.path = path
        self.copy_dir: str | None = None

    def __enter__(self):
        import sqlite3
        from urllib.parse import quote

        real = Path(self.path).resolve()
        wal = Path(f"{real}-wal")
        target, flags = real, "mode=ro&immutable=1" if _wal_mode(real) else "mode=ro"
        try:
            pending = wal.is_file() and wal.stat().st_size > 0
            size = real.stat().st_size + (wal.stat().st_size if pending else 0)
        except OSError:
            pending, size = False, 0
        if pending and size > self.COPY_LIMIT:
            flags = "mode=ro"
        elif pending:
            try:
                target, flags = self._copied(real, wal), "mode=ro"
            except OSError:  # no room for the copy: read in place
                flags = "mode=ro"
        self.db = sqlite3.connect(f"file:{quote(str(target))}?{flags}", uri=True, timeout=10)
        return self.db

    def _copied(self, real: Path, wal: Path) -> Path:
        import shutil
        import tempfile

        self.copy_dir = tempfile.mkdtemp(prefix="trl-doctor-sqlite-")
        target = Path(self.copy_dir) / real.name
        shutil.copyfile(real, target)
        shutil.copyfile(wal, Path(f"{target}-wal"))
        return target

    def __exit__(self, *exc):
        self.db.close()
        if self.copy_dir is not None:
            import shutil

            shutil.rmtree(self.copy_dir, ignore_errors=True)


def _wal_mode(path: Path) -> bool:
    """Whether the database is in WAL mode: its header's format versions (bytes 18 and 19) are 2, where a rollback
    journal's are 1. Unreadable: taken as WAL (the immutable open, as before)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return True
    return len(head) < 20 or head[18] == 2 or head[19] == 2


def snapshot(path: Path, folder: Path) -> Path:
    """A consistent copy of the SQLite database at `path` in `folder` (SQLite's backup, from a read-only connection,
    so a job writing it meanwhile is no matter), for a tracker's library that writes to what it opens."""
    import sqlite3

    target = folder / path.name
    try:
        with readonly(path) as source:
            copy = sqlite3.connect(target)
            try:
                source.backup(copy)
            finally:
                copy.close()
    except sqlite3.Error as exc:
        raise InputError(f"{path}: cannot be read as SQLite ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be copied to read it ({exc.strerror or exc}; TMPDIR full?)") from None
    return target


def choose(store: Store, name: str | None) -> tuple[Run, list[Run]]:
    """The run to judge (`name`: a run's name or id; else the newest) and every run of the store."""
    runs = store.runs()
    if not runs:
        raise InputError(f"{store.location}: a {store.kind} store with no run in it yet")
    if name is None:
        return runs[-1], runs
    picked = [r for r in runs if name in (r.name, r.id)]
    if not picked:
        listed = ", ".join(r.label() for r in runs[-10:])
        raise InputError(f"{store.location}: no run named {name!r} in this {store.kind} store (its runs: {listed})")
    return picked[-1], runs


def read_run(store: Store, run: Run, runs: list[Run]):
    """The run's History: its rows, oldest first, as training logs."""
    from trl_doctor.watch.history import History

    history = History(where(store), store.kind)
    history.take_args(store.args(run))
    media = getattr(store, "media", None)  # where the store keeps the files a logged table points to (wandb's)
    history.media = media(run) if media is not None else None
    for row in store.rows(run):
        history.add(row)
    history.run, history.runs = run, runs
    if run.ended:
        history.ended = True
    return history


def where(store: Store):
    """The store's location as a report names it (a server's address kept as it was given)."""
    return store.location if "://" in store.location else Path(store.location)

