"""One fork server for a call that checks several configs (trl_doctor/supervisor/warm.py): the same verdicts as
one call per config, nothing left behind, a server that forks only for the call that started it, and a worker
(so the user's code) that never learns where the server listens. What it saves is a figure of
benchmarks/bench_check.py ((i) against 6 x (b)), not a timed test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_doctor, trl_doctor_exe
from trl_doctor.supervisor.forkserver import ENV
from trl_doctor.supervisor.warm import warm_server

pytestmark = pytest.mark.release_free  # the doctor's own processes: no release changes the outcome

CONFIGS = ("batch-geometry/ok_rloo.yaml", "chat-template/ok_chatml.yaml", "batch-geometry/bad_grpo_one_process.yaml")


# a caller's request as trl_doctor.supervisor.forkserver.spawn sends it (a header, a channel and a log fd), and
# every byte of the reply: the worker's pid and then its exit status, or nothing where the server hung up
ASK = """
import json, os, socket, sys
def ask(sock, cwd):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock)
    read, write = os.pipe()
    header = json.dumps({"request": "{}", "env": {}, "cwd": cwd}).encode()
    reply = b""
    try:
        socket.send_fds(conn, [len(header).to_bytes(8, "big") + header], [write, write])
    except (BrokenPipeError, ConnectionResetError):  # hung up before the request was sent
        return reply
    finally:
        os.close(write)
    while reply.count(b"\\n") < 2:
        try:
            chunk = conn.recv(64)
        except ConnectionResetError:  # hung up with the request unread
            break
        if not chunk:
            break
        reply += chunk
    conn.close()
    os.close(read)
    return reply
"""


def _servers_under(folder: Path) -> list[str]:
    """Live fork servers whose socket is under `folder`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"trl_doctor.supervisor.forkserver" in cmdline and any(str(folder).encode() in a for a in cmdline):
            found.append(proc.name)
    return found


def _verdicts(report: dict) -> list[tuple[str, str, str]]:
    return [(r["rule"], r["status"], r["message"]) for r in report["results"]]


@pytest.mark.boundary  # a fresh command whose server imports the heavy stack: seconds
def test_several_configs_judged_as_one_by_one_with_nothing_left(built_fixtures, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != ENV}  # a user's call: no test session's server
    env.update(TMPDIR=str(tmp), NO_COLOR="1")
    proc = subprocess.run([trl_doctor_exe(), "check", *CONFIGS, "--no-smoke", "--format", "json"],
                          cwd=built_fixtures, env=env, capture_output=True, text=True, timeout=600)
    together = json.loads(proc.stdout)
    assert together["configs"] == len(CONFIGS)
    assert [Path(r["config"]).name for r in together["reports"]] == [Path(c).name for c in CONFIGS]
    codes = []
    for config, report in zip(CONFIGS, together["reports"]):
        alone = run_doctor("check", config, "--no-smoke", "--format", "json", cwd=built_fixtures)
        assert _verdicts(report) == _verdicts(json.loads(alone.stdout)), config
        codes.append(alone.returncode)
    assert proc.returncode == max(codes) == 1, proc.stderr[-2000:]  # the failing config fails the call
    assert list(tmp.iterdir()) == [] and not _servers_under(tmp)  # the server and its folder went with the call


@pytest.mark.boundary  # a fresh command, killed once its server serves: seconds
def test_a_killed_call_leaves_its_server_to_the_next_checks_sweep(built_fixtures, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env.update(TMPDIR=str(tmp), NO_COLOR="1")
    call = subprocess.Popen([trl_doctor_exe(), "check", *CONFIGS, "--format", "json"], cwd=built_fixtures, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp.glob("trl-doctor-*/s.json")) and time.monotonic() < deadline and call.poll() is None:
        time.sleep(0.1)
    assert list(tmp.glob("trl-doctor-*/s.json")), "the call's server came up"
    call.kill()  # SIGKILL: no finally runs
    call.wait()
    deadline = time.monotonic() + 30
    while _servers_under(tmp) and time.monotonic() < deadline:  # it sees its parent gone within 2 s
        time.sleep(0.2)
    assert not _servers_under(tmp)
    from trl_doctor.runtime.tmp import sweep

    sweep(tmp)  # what the next check does first (trl_doctor.runtime.tmp.check_folder)
    assert list(tmp.iterdir()) == []  # it ended what the killed call's checks had left, and removed the folders


@pytest.mark.boundary  # starts a fork server: seconds
def test_the_server_forks_only_for_the_process_that_started_it(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with warm_server(2):
        sock = os.environ[ENV]
        deadline = time.monotonic() + 120
        while not Path(sock + ".json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert Path(sock + ".json").exists()
        # another process (as the user's code would be) asks as the caller does: the server hangs up unanswered
        other = subprocess.run([sys.executable, "-c", ASK + "print(repr(ask(sys.argv[1], sys.argv[2])))", sock,
                                str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "b''", other.stdout + other.stderr
        # this process, the one that started it: served (a request no worker can run: the child exits 1)
        scope: dict = {}
        exec(ASK, scope)
        pid, status = scope["ask"](sock, str(tmp_path)).decode().split()
        assert int(pid) > 0 and int(status) == 1
    assert ENV not in os.environ
    assert list(tmp_path.iterdir()) == [] and not _servers_under(tmp_path)


def test_the_users_code_never_learns_where_the_server_listens(built_fixtures, tmp_path, monkeypatch):
    """The test session's server forks this check's worker, and the launch script reads its environment; without one
    (TRL_DOCTOR_TEST_NO_FORKSERVER=1) a server is named that does not answer, and the worker started from scratch
    must not learn it either."""
    if not os.environ.get(ENV):
        monkeypatch.setenv(ENV, str(tmp_path / "no-server"))
    (tmp_path / "train.py").write_text(f"import os\nraise RuntimeError('server=' + str(os.environ.get({ENV!r})))\n")
    proc = run_doctor("check", "--", "python", "train.py", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "RuntimeError: server=None" in proc.stderr, proc.stderr
