"""Issue 43: the trackers' stores a running job writes to, each written here by the tracker's own package the way a
job's `report_to` writes it (fixtures/_tracker_runs.py: transformers' TrackioCallback, WandbCallback offline,
MLflowCallback, with TRL's own ProfilingContext logging its timings between logs), two runs in one store: a GRPO run
whose reward is constant (fixtures/zero-advantage/bad_grpo_constant_reward.json) and then a healthy one. The watch
lists them, judges the newest unless --run names one, never merges them, and reads no profiling row, model config or
tracker bookkeeping as a log. Also an MLflow tracking server on this machine's loopback, as a team's shared store."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, run_doctor, with_net_audit

pytestmark = pytest.mark.release_free

BAD = FIXTURES / "zero-advantage" / "bad_grpo_constant_reward.json"
GOOD = FIXTURES / "zero-advantage" / "ok_grpo_healthy.json"
WRITER = FIXTURES / "_tracker_runs.py"
NEEDS = {"trackio": "trackio", "wandb": "wandb", "mlflow": "mlflow", "mlflow-files": "mlflow"}
WHERE = {"trackio": "trackio", "wandb": "wandb", "mlflow": "mlflow.db", "mlflow-files": "mlruns"}


def _have(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


def rows(path: Path) -> list[dict]:
    return [r for r in json.loads(path.read_text())["log_history"] if "loss" in r and "train_runtime" not in r]


def write(tracker: str, folder: Path, *runs: str, env: dict | None = None, wait: bool = True):
    """The tracker's own package writing RUN=ROWS pairs into one store, in a process of its own."""
    full = dict(os.environ)
    full.update(with_net_audit(env or {}))
    proc = subprocess.Popen([sys.executable, str(WRITER), tracker, str(folder), *runs], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if wait:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    return proc


@pytest.fixture(scope="session")
def stores():
    """Each tracker's store with two runs, `bad` then `good`, written two trackers at a time by the trackers' own
    packages. What they write is a function of the writer, the two runs' rows and the releases installed: the stores
    are kept under that key in the release cache (conftest.trl_cache), written once by the first session that needs
    them (its xdist workers wait for it) and read by the next ones (CI's README step and its long selection wrote
    the same stores, 40 to 80 s each)."""
    import hashlib
    import shutil

    from filelock import FileLock

    from conftest import trl_cache
    from truths import record_module

    have = [t for t in NEEDS if _have(NEEDS[t])]
    releases = record_module()._releases(dict.fromkeys(["trackio", "wandb", "mlflow"], ""))
    digest = hashlib.sha256(json.dumps([releases, have], sort_keys=True).encode())
    for path in (WRITER, BAD, GOOD):
        digest.update(path.read_bytes())
    folder = trl_cache() / "tracker-stores" / digest.hexdigest()[:20]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / "done").is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a session stopped half-way
            pending = list(have)
            while pending:
                batch, pending = pending[:2], pending[2:]
                procs = {t: write(t, folder / t, f"bad={BAD}", f"good={GOOD}", wait=False) for t in batch}
                for proc in procs.values():
                    out, _ = proc.communicate(timeout=300)
                    assert proc.returncode == 0, out
            (folder / "done").write_text("")
    return {t: folder / t / WHERE[t] for t in have}


def watch_json(path, *args):
    proc = run_doctor("watch", str(path), "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    return proc.returncode, {r["rule"]: r for r in report["results"]}, report


@pytest.mark.parametrize("tracker", list(NEEDS))
def test_a_store_of_two_runs_is_listed_and_judged_one_run_at_a_time(stores, tracker):
    if tracker not in stores:
        pytest.skip(f"{NEEDS[tracker]} is not installed (the [watch] extra installs it)")
    store = stores[tracker]
    listed = run_doctor("watch", str(store), "--list-runs")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith(f"2 runs in the {tracker.split('-')[0]} store"), listed.stdout
    assert [line.split()[0] for line in lines[1:]] == ["bad", "good"], listed.stdout  # oldest first

    code, results, report = watch_json(store)  # the newest: healthy, the other named
    assert code == 0 and not [r for r in results.values() if r["status"] in ("warn", "fail")], results
    (run,) = [s for s in report["settings"] if s["setting"] == "run"]
    assert run["value"].startswith("good") and "the newest of 2" in run["value"] and "bad" in run["value"], run

    code, results, report = watch_json(store, "--run", "bad")
    zero = results["zero-advantage"]
    assert code == 1 and zero["status"] == "fail" and zero["details"]["since"] == "step 10", zero
    assert "from step 10 to step 80" in zero["message"], zero["message"]


@pytest.mark.parametrize("tracker", list(NEEDS))
def test_the_runs_rows_are_the_jobs_logs_and_nothing_else(stores, tracker):
    """Every training log at its step with the values the job logged; TRL's profiling rows (there, in the store) and
    the trackers' bookkeeping are not logs, and the job's end is read where the tracker records it."""
    from trl_doctor.watch.history import canonical
    from trl_doctor.watch.source import read

    if tracker not in stores:
        pytest.skip(f"{NEEDS[tracker]} is not installed")
    expected = rows(BAD)
    history = read(stores[tracker], "bad")
    assert [log.step for log in history.logs] == [10 * (i + 1) for i in range(len(expected))]
    for log, row in zip(history.logs, expected):
        for key, value in row.items():
            if key not in ("step",) and isinstance(value, (int, float)):
                assert log.values[canonical(key)] == pytest.approx(value, rel=1e-6), (key, log.at)
    assert not [n for n in history.names() if n.startswith(("profiling", "_", "system")) or n == "global_step"]
    assert history.ended
    # the job's own arguments, as the tracker keeps them with the run (its config, its params)
    assert history.max_steps == 10 * len(expected) and history.logging_steps == 10, (history.max_steps, tracker)
    assert history.args["run_name"] == "bad" and history.steps_per_log() == 10


@pytest.mark.slow  # seconds long (a trainer run or a process of its own): CI's long selection
def test_the_profiling_rows_are_in_the_store(stores):
    """What the reader leaves out is really there: TRL's ProfilingContext wrote its timings as trackio rows."""
    import sqlite3

    if "trackio" not in stores:
        pytest.skip("trackio is not installed")
    (db,) = stores["trackio"].glob("*.db")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        profiling = conn.execute("SELECT COUNT(*) FROM metrics WHERE CAST(metrics AS TEXT) LIKE "
                                  "'%profiling/Time taken%'").fetchone()
    assert profiling[0] >= 2 * 80  # two timings a step, 80 steps, in the bad run alone


def test_the_store_is_not_written_by_reading_it(stores):
    """Not a byte changed, and no file made beside it: a finished trackio database in WAL mode got `-wal` and `-shm`
    files from a `mode=ro` reader (issue 59); it is now opened immutable."""
    for tracker, store in stores.items():
        files = [store] if store.is_file() else [p for p in store.rglob("*") if p.is_file()]
        names = sorted(str(p) for p in (store.parent if store.is_file() else store).rglob("*"))
        before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in files}
        assert run_doctor("watch", str(store), "--run", "bad", "--format", "json").returncode == 1
        after = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in files}
        assert before == after, tracker
        assert sorted(str(p) for p in (store.parent if store.is_file() else store).rglob("*")) == names, tracker
        if store.is_file():
            assert sorted(p.name for p in store.parent.iterdir()) == sorted(
                p.name for p in store.parent.iterdir() if p.name.startswith(store.name)), tracker


def test_a_run_the_store_has_not_is_said_in_one_line(stores):
    tracker = next(iter(stores), None)
    if tracker is None:
        pytest.skip("no tracker installed")
    proc = run_doctor("watch", str(stores[tracker]), "--run", "nosuch")
    assert proc.returncode == 2 and "no run named 'nosuch'" in proc.stderr and "bad" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_file_that_is_no_store_is_refused_in_one_line(tmp_path):
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    fake = tmp_path / "run-abc.wandb"
    fake.write_bytes(b"not a wandb file at all")
    for path, said in ((other, "no tracker's store"), (fake, "not a wandb run file")):
        proc = run_doctor("watch", str(path))
        assert proc.returncode == 2 and said in proc.stderr and str(path) in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_wandb_run_cut_mid_record_is_read_to_its_last_whole_record(stores, tmp_path):
    """A job writing its run file: what is whole is read, and the rest when it grows."""
    from trl_doctor.watch.source import read

    if "wandb" not in stores:
        pytest.skip("wandb is not installed")
    source = next(stores["wandb"].glob("*run-*/run-*.wandb"))
    data = source.read_bytes()
    run = tmp_path / "wandb" / "offline-run-20260101_000000-cut" / source.name
    run.parent.mkdir(parents=True)
    run.write_bytes(data[: len(data) // 2 + 13])
    half = read(tmp_path / "wandb")
    assert 0 < len(half.logs) < 16 and not half.ended


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_mlflow_tracking_server_on_this_machine(tmp_path):
    """`mlflow server` on loopback, a team's shared store: two runs logged to it over HTTP by MLflowCallback, then
    judged through the address the command line names."""
    if not _have("mlflow"):
        pytest.skip("mlflow is not installed")
    port = _free_port()
    exe = Path(sys.executable).with_name("mlflow")
    env = dict(os.environ)
    # without the GenAI job runners (huey consumers) MLflow 3.x starts beside the server: no run logging needs them
    env.update(with_net_audit({"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}))
    server = subprocess.Popen([str(exe), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                               "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                               "--default-artifact-root", str(tmp_path / "artifacts")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
                time.sleep(0.5)
        write("mlflow-server", tmp_path / "client", f"bad={BAD}", f"good={GOOD}", env={"MLFLOW_TRACKING_URI": url})
        listed = run_doctor("watch", url, "--list-runs")
        assert listed.returncode == 0 and "2 runs in the mlflow store" in listed.stdout, listed.stderr
        code, results, report = watch_json(url, "--run", "bad")
        assert code == 1 and results["zero-advantage"]["status"] == "fail", results["zero-advantage"]
        assert report["config"] == url
        code, results, _ = watch_json(url)
        assert code == 0, results
    finally:
        import signal

        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_a_runs_name_reaches_the_terminal_harmless(tmp_path):
    """A run's name is the store's text (anyone's): --list-runs prints it without its control characters (no ANSI
    sequence) and without a workflow command."""
    import sqlite3

    db = tmp_path / "grpo.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE metrics (id INTEGER PRIMARY KEY, run_id TEXT, timestamp TEXT, run_name TEXT, "
                     "step INTEGER, metrics TEXT)")
        conn.execute("CREATE TABLE configs (id INTEGER PRIMARY KEY, run_id TEXT, run_name TEXT, config TEXT)")
        conn.execute("INSERT INTO metrics VALUES (1, 'r1', '2026-01-01T00:00:00', ?, 1, ?)",
                     ("evil\x1b[31m\n::error::pwned\u202egpj.exe\u200b", json.dumps({"train/loss": 0.1,
                                                                                  "train/global_step": 1})))
    proc = run_doctor("watch", str(db), "--list-runs")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "::error" not in proc.stdout and "evil\\x1b[31m" in proc.stdout, proc.stdout
    # issue 59: a right-to-left override and a zero-width space reached the terminal raw
    assert "\u202e" not in proc.stdout and "\u200b" not in proc.stdout and "\\u202egpj.exe\\u200b" in proc.stdout
    assert len(proc.stdout.strip().splitlines()) == 2


def _wal_database(path: Path, keep_open: bool):
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")  # the frames stay in the -wal file, as a running writer's do
    db.execute("CREATE TABLE metrics (step INTEGER)")
    db.executemany("INSERT INTO metrics VALUES (?)", [(i,) for i in range(5)])
    db.commit()
    if not keep_open:
        db.close()
        return None
    return db


@pytest.mark.parametrize("writer", ["finished", "running"])
def test_a_wal_database_is_read_whole_without_a_file_made_or_touched_beside_it(tmp_path, writer):
    """issue 59: `mode=ro` made `-wal` and `-shm` beside a finished WAL database and updated a running one's `-shm`.
    A finished one is opened immutable; a running one's pending frames are read from a copy (every row is seen)."""
    from trl_doctor.watch.stores import readonly

    path = tmp_path / "trackio.db"
    writer_db = _wal_database(path, keep_open=writer == "running")
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    assert (writer == "running") == ("trackio.db-wal" in before)
    with readonly(path) as db:
        assert db.execute("SELECT COUNT(*) FROM metrics").fetchone() == (5,)
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in tmp_path.iterdir()} == before
    if writer_db is not None:
        writer_db.close()


@pytest.mark.parametrize("tracker", ["mlflow", "mlflow-files"])
def test_a_local_mlflow_runs_metrics_are_read_in_one_pass(stores, tracker, monkeypatch):
    """issue 59: one get_metric_history request per key: a run of 20,000 keys was not judged after 170 s. A local
    store's metrics are read in one pass from the store itself (measured on a run of 20,000 keys and 20 logs:
    SQLite 52.8 s -> 11.6 s, the file store 7.8 s), so no per-key request is made at all."""
    from mlflow.tracking import MlflowClient

    from trl_doctor.watch.source import read

    if tracker not in stores:
        pytest.skip(f"{NEEDS[tracker]} is not installed")

    def per_key(*args, **kwargs):
        raise AssertionError("a local store's metrics are read in one pass, not key by key")

    monkeypatch.setattr(MlflowClient, "get_metric_history", per_key)
    history = read(stores[tracker], "bad")
    assert [log.step for log in history.logs][:2] == [10, 20] and history.ended


def test_a_rollback_journal_database_is_read_whole_while_a_job_writes_it(tmp_path):
    """MLflow's SQLite store keeps SQLite's rollback journal. Opened immutable (no lock), a read during a running
    job's write met the half-written pages a large transaction spills into the file: CI of 2026-11-27 stopped
    `watch --follow` with "a damaged SQLite database (database disk image is malformed)". Now it is read with its
    locks (`mode=ro`: no file made beside it): the reader waits for the writer's commit and sees a whole database."""
    import threading

    from trl_doctor.watch.stores import readonly

    path = tmp_path / "mlflow.db"
    writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    writer.execute("CREATE TABLE metrics (k TEXT, v BLOB)")
    writer.execute("BEGIN")
    writer.executemany("INSERT INTO metrics VALUES (?, ?)", [(f"k{i}", b"x" * 2000) for i in range(500)])
    writer.execute("COMMIT")
    assert path.read_bytes()[18:20] == b"\x01\x01"  # a rollback journal, as MLflow's
    writer.execute("PRAGMA cache_size = 1")  # the next transaction spills its pages into the file before its commit
    writer.execute("BEGIN")
    writer.execute("DELETE FROM metrics")
    writer.executemany("INSERT INTO metrics VALUES (?, ?)", [(f"n{i}", b"y" * 3000) for i in range(700)])
    before = sorted(p.name for p in tmp_path.iterdir())
    threading.Timer(0.5, lambda: writer.execute("COMMIT")).start()
    with readonly(path) as db:
        rows = db.execute("SELECT COUNT(*), MIN(k) FROM metrics").fetchone()
    assert rows == (700, "n0"), rows  # the committed state, whole
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [n for n in before if not n.endswith("-journal")]
