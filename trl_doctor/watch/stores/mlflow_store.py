"""An MLflow tracking store as a job's `report_to: mlflow` writes it (transformers' MLflowCallback: each training
log's metrics at `step=state.global_step`; the run's summary, train_runtime, at its last step): a `mlruns` folder
(the file store), its SQLite database (`sqlite:///mlflow.db`, MLflow 3's default), or a tracking server the command
line names (`http://127.0.0.1:5000`: a team's shared store).

The runs and their params are read with MLflow's own client (mlflow.tracking.MlflowClient: search_experiments,
search_runs). Its stores write to what they open (the SQLite store creates tables and a default experiment, the file
store its .trash folder), so a local store is listed from a snapshot in a temporary folder: SQLite's backup of the
database, or the file store's metadata, params and tags (its metrics and artifacts are not copied). A run's metrics
of a local store are read in one pass from the store itself, read-only (the metrics table; the metric files); a
server is asked over HTTP for each key's history, nothing else.
MLflow's telemetry is switched off for the watch's process (MLFLOW_DISABLE_TELEMETRY).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from trl_doctor.errors import InputError
from trl_doctor.watch.stores import Run, Store, readonly, snapshot, sqlite_tables

SUMMARY = frozenset(("train_runtime", "train_loss", "train_samples_per_second", "train_steps_per_second", "total_flos"))
MAX_FILES = 200_000
ENDED = ("FINISHED", "FAILED", "KILLED")


def from_tables(path: Path, tables: dict[str, set[str]]) -> "MlflowStore | None":
    if {"experiments", "runs", "metrics"} <= set(tables):
        return MlflowStore(str(path), sqlite=path)
    return None


def find(folder: Path) -> "MlflowStore | None":
    """An MLflow store in `folder`: the folder a file store is (mlruns), or one holding `mlruns/` or `mlflow.db`."""
    for candidate in (folder, folder / "mlruns"):
        if _is_file_store(candidate):
            return MlflowStore(str(candidate), files=candidate)
    db = folder / "mlflow.db"
    if db.is_file():
        tables = sqlite_tables(db)
        if tables is not None:
            return from_tables(db, tables)
    return None


def server(url: str) -> "MlflowStore":
    return MlflowStore(url.rstrip("/"), url=url.rstrip("/"))


def _is_file_store(folder: Path) -> bool:
    try:
        return folder.is_dir() and (any(folder.glob("*/meta.yaml")) and
                                    (folder / ".trash").is_dir() or (folder / "0" / "meta.yaml").is_file())
    except OSError:
        return False


class MlflowStore(Store):
    kind = "mlflow"

    def __init__(self, location: str, sqlite: Path | None = None, files: Path | None = None, url: str | None = None):
        super().__init__(location)
        self.sqlite, self.files, self.url = sqlite, files, url
        self._client: Any = None  # mlflow's MlflowClient, made when first read
        self._temp: str | None = None

    def stamp(self) -> object:
        """For a SQLite store, what a training log or a run's end changes (one read-only query, a millisecond): the
        job writes TRL's profiling timings at every step, and reading the store again through MLflow for each of them
        would cost a core while following. A file store and a server are read again at every look."""
        if self.sqlite is None:
            return None
        import sqlite3

        try:
            with readonly(self.sqlite) as db:
                return (db.execute("SELECT run_uuid, COUNT(*), MAX(step) FROM metrics WHERE key IN ('loss', "
                                   "'train_runtime', 'objective/kl') GROUP BY run_uuid").fetchall(),
                        db.execute("SELECT run_uuid, status FROM runs").fetchall())
        except sqlite3.Error:
            return object()  # not readable as a store yet (its tables being made): look again

    def close(self) -> None:
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = None

    def client(self, fresh: bool = False):
        """MLflow's client over the store (a new snapshot of a local store when `fresh`)."""
        if self._client is not None and not fresh:
            return self._client
        import logging

        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses an old mlruns store without it
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # its INFO lines (tables made, migrations) on stderr
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise InputError(f"{self.location}: an MLflow store; reading it needs mlflow (pip install "
                             "\"trl-doctor[watch]\", or mlflow itself)") from None
        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        if self.url is not None:
            uri = self.url
        else:
            self.close()
            self._temp = tempfile.mkdtemp(prefix="trl-doctor-mlflow-")
            weakref.finalize(self, shutil.rmtree, self._temp, True)
            if self.sqlite is not None:
                uri = "sqlite:///" + str(snapshot(self.sqlite, Path(self._temp)))
            else:
                assert self.files is not None  # every store is made with one of sqlite, files, url
                uri = Path(_copy_metadata(self.files, Path(self._temp) / "mlruns")).as_uri()
        self._client = MlflowClient(tracking_uri=uri)
        return self._client

    def runs(self) -> list[Run]:
        try:
            client = self.client(fresh=True)  # MLflow opens the store here: a store mid-migration can fail to open
            experiments = [e.experiment_id for e in client.search_experiments()]
            found = client.search_runs(experiments, order_by=["attributes.start_time ASC"], max_results=1000) \
                if experiments else []
        except InputError:
            raise
        except Exception as exc:  # MlflowException, a server's HTTP error, a store MLflow cannot read
            raise InputError(f"{self.location}: MLflow could not list its runs ({_first_line(exc)})") from None
        return [Run(r.info.run_name or r.info.run_id, r.info.run_id, (r.info.start_time or 0) / 1000,
                    r.info.status in ENDED) for r in found]

    def args(self, run: Run) -> dict:
        """The run's params (MLflowCallback logs the TrainingArguments and the model's config, as strings)."""
        try:
            return dict(self.client().get_run(run.id).data.params)
        except Exception:
            return {}

    def rows(self, run: Run):
        """The run's metrics, step by step. A local store is read in one pass (issue 59: one history request per key
        took minutes for a run of 20,000 keys): the SQLite store's metrics table in one query, the file store's metric
        files themselves (each within MAX_METRIC_BYTES); a server is asked for each key's history."""
        try:
            if self.sqlite is not None:
                points = _sqlite_points(self.sqlite, run.id)
            elif self.files is not None:
                points = _file_points(self.files, run.id)
            else:
                points = self._server_points(run.id)
        except InputError:
            raise
        except Exception as exc:
            raise InputError(f"{self.location}: MLflow could not read run {run.name!r} ({_first_line(exc)})") from None
        by_step: dict[int, dict] = {}
        summary: dict = {}
        # the first value at a step: the log's. The job's summary logs epoch again at the last step, often in the
        # same millisecond and stored out of order: of two values then, the log's epoch is the smaller
        for key, _timestamp, value, step in sorted(points, key=lambda p: (p[0], p[1], p[2])):
            if key.startswith(("profiling/", "system/")):
                continue
            if key in SUMMARY:
                summary[key] = value
            else:
                by_step.setdefault(int(step), {}).setdefault(key, value)
        for step in sorted(by_step):
            yield {**by_step[step], "step": step}
        if summary:
            yield summary

    def _server_points(self, run_id: str) -> list[tuple[str, int, float, int]]:
        client = self.client()
        keys = sorted(k for k in client.get_run(run_id).data.metrics if not k.startswith(("profiling/", "system/")))
        return [(key, m.timestamp, m.value, m.step) for key in keys for m in client.get_metric_history(run_id, key)]


def _sqlite_points(path: Path, run_id: str) -> list[tuple[str, int, float, int]]:
    """(key, timestamp, value, step) of every metric point of a run, from MLflow's SQLite store in one query (a NaN
    is stored as is_nan with a 0 value)."""
    with readonly(path) as db:
        columns = {r[1] for r in db.execute('PRAGMA table_info("metrics")')}
        nan = "is_nan" if "is_nan" in columns else "0"
        rows = db.execute(f"SELECT key, timestamp, value, step, {nan} FROM metrics WHERE run_uuid = ?", (run_id,))
        return [(k, int(t or 0), float("nan") if n else float(v), int(st or 0)) for k, t, v, st, n in rows]


MAX_METRIC_BYTES = 256 << 20  # one metric file past this is no training log's (a store planted to fill the disk)


def _file_points(root: Path, run_id: str) -> list[tuple[str, int, float, int]]:
    """(key, timestamp, value, step) of every metric point of a run, read from the file store's own metric files
    (`<experiment>/<run>/metrics/<key>`: a line `timestamp value step` each), without a copy."""
    runs = [r for r in root.glob(f"*/{run_id}") if (r / "meta.yaml").is_file() and not r.is_symlink()]
    if not runs:
        return []
    folder = runs[0] / "metrics"
    out: list[tuple[str, int, float, int]] = []
    for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
        if not path.is_file() or path.is_symlink():
            continue
        if path.stat().st_size > MAX_METRIC_BYTES:
            raise InputError(f"{path}: {path.stat().st_size} bytes, past what a metric file of a training run holds "
                             f"({MAX_METRIC_BYTES >> 20} MiB): not read")
        key = path.relative_to(folder).as_posix()
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 2:
                    continue
                try:
                    out.append((key, int(parts[0]), float(parts[1]), int(parts[2]) if len(parts) > 2 else 0))
                except ValueError:
                    continue
    return out


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _copy_metadata(source: Path, target: Path) -> Path:
    """The file store's experiments and runs without their artifacts: meta.yaml, metrics, params, tags."""
    copied = 0
    for experiment in sorted(source.iterdir()):
        if not (experiment / "meta.yaml").is_file() or experiment.is_symlink():
            continue
        (target / experiment.name).mkdir(parents=True)
        shutil.copyfile(experiment / "meta.yaml", target / experiment.name / "meta.yaml")
        for run in sorted(experiment.iterdir()):
            if not (run / "meta.yaml").is_file() or run.is_symlink():
                continue
            (target / experiment.name / run.name).mkdir()
            shutil.copyfile(run / "meta.yaml", target / experiment.name / run.name / "meta.yaml")
            for part in ("metrics", "params", "tags", "artifacts"):  # each there, empty or not, as MLflow expects
                (target / experiment.name / run.name / part).mkdir()
                # metrics are read from the store itself (_file_points): their files, of any size, are not copied
                copied_parts = () if part in ("artifacts", "metrics") else (run / part).rglob("*")
                for path in copied_parts if (run / part).is_dir() else ():
                    copied += 1
                    if copied > MAX_FILES:
                        raise InputError(f"{source}: more files than any MLflow store of training runs holds")
                    if path.is_file() and not path.is_symlink():
                        out = target / experiment.name / run.name / path.relative_to(run)
                        out.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(path, out)
    (target / ".trash").mkdir(parents=True, exist_ok=True)
    return target
