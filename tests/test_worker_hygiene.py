"""The worker owns its process tree and its temporary files, its channel cannot be forged by the user's code, and every
way it ends is named by its real cause (issue 24). Each test runs the real `trl-doctor check` command as a process of
its own on the real fixtures (badinputs' healthy GRPO setup) with a hostile reward module or input, with TMPDIR set to
a fresh folder, and then looks at the machine: no process the check started survives it (found by a unique marker
on their command lines, by the pids they wrote down, and by the test's own tag in their environment), and TMPDIR is
empty again.

The fast set runs by default (about a minute); the rest (every signal at every stage, the worker started from scratch
as a user's check starts it, a killed CLI whose leftovers the next check sweeps) is marked `fuzz`."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import badinputs
from conftest import trl_doctor_exe
from trl_doctor.protocol import VERSION, Done

DONE = Done().to_line().strip()  # a `done` line as the worker writes it

pytestmark = pytest.mark.release_free  # the doctor's own worker: no release changes the outcome

LIMIT_S = 180
MARK_ENV = "TRL_DOCTOR_TEST_MARK"  # the test's own tag: every process the check starts inherits it


class Hostile:
    """A healthy setup with a hostile reward module, the check's TMPDIR, and the markers to find what it left."""

    def __init__(self, tmp_path: Path, module: str):
        self.setup = badinputs.build_setup(tmp_path)
        self.tmpdir = tmp_path / "tmpdir"
        self.tmpdir.mkdir()
        self.mark = secrets.token_hex(6)
        self.seconds = f"{300 + secrets.randbelow(10**6) / 10**6:.6f}"  # `sleep 300.123456`: unique to this test
        self.pids = tmp_path / "pids"
        self.pids.mkdir()
        code = (module.replace("SLEEP", repr(self.seconds)).replace("PIDS", repr(str(self.pids)))
                .replace("STARTED", repr(str(tmp_path / "started"))))
        (self.setup / "rewards.py").write_text(badinputs.REWARDS + code)
        self.started = tmp_path / "started"

    def env(self, forkserver: bool = True) -> dict:
        env = {**os.environ, "TMPDIR": str(self.tmpdir), MARK_ENV: self.mark, "NO_COLOR": "1"}
        if not forkserver:
            env.pop("TRL_DOCTOR_FORKSERVER", None)
        return env

    def start(self, *args: str, forkserver: bool = True, config: str = "config.yaml",
              signals: dict | None = None) -> subprocess.Popen:
        """The check, started with `signals` ({signal: disposition}) set for it (the tests' own are the defaults:
        conftest._default_signals)."""
        cmd = [trl_doctor_exe(), "check", config, "--no-smoke", "--format", "json", *args]
        preexec = None if signals is None else (lambda: [signal.signal(s, d) for s, d in signals.items()])
        return subprocess.Popen(cmd, cwd=self.setup, env=self.env(forkserver), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec)

    def run(self, *args: str, forkserver: bool = True, config: str = "config.yaml") -> tuple[int, str, str]:
        proc = self.start(*args, forkserver=forkserver, config=config)
        try:
            out, err = proc.communicate(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            raise
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def survivors(self) -> list[str]:
        """Live processes the check started: by the unique sleep, the pids written down, or the test's tag."""
        left = []
        written = {int(p.name) for p in self.pids.iterdir()}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                env = (proc / "environ").read_bytes()
            except (OSError, IndexError):
                continue
            if state in ("Z", "X"):
                continue
            if self.seconds in cmd or int(proc.name) in written or f"{MARK_ENV}={self.mark}".encode() in env.split(b"\0"):
                left.append(f"{proc.name}: {cmd[:120]}")
        return left

    def assert_clean(self) -> None:
        deadline = time.monotonic() + 5  # init reaps what the check killed
        while self.survivors() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = self.survivors()
        for entry in left:  # never leave them to the next test
            try:
                os.kill(int(entry.split(":")[0]), 9)
            except OSError:
                pass
        assert not left, f"processes outlived the check: {left}"
        assert list(self.tmpdir.iterdir()) == [], f"left in TMPDIR: {list(self.tmpdir.iterdir())}"

    def wait_started(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + LIMIT_S
        while not self.started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.started.exists(), f"the reward module never ran: {proc.communicate()[1][-2000:]!r}"


def report_of(out: str) -> dict:
    report = json.loads(out)
    return {r["rule"]: r for r in report["results"]}


# What the hostile modules start: children, a `setsid` grandchild (exec), a double-forked daemon (no exec, its own
# session), and a multiprocessing pool kept for the calls. Each writes its pid under PIDS.
SPAWNS = """
import multiprocessing, os, subprocess, time
subprocess.Popen(["sleep", SLEEP])
subprocess.Popen(["setsid", "sleep", SLEEP])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(os.path.join(PIDS, str(os.getpid())), "w").close()
        time.sleep(300)
    os._exit(0)
POOL = multiprocessing.get_context("fork").Pool(2)
for child in multiprocessing.active_children():
    open(os.path.join(PIDS, str(child.pid)), "w").close()
"""
WAIT = "\nimport pathlib, time\npathlib.Path(STARTED).touch()\ntime.sleep(600)\n"


# -- process leaks --------------------------------------------------------------------------------------------------

def test_processes_a_reward_module_leaves_are_reported_then_ended(built_fixtures, tmp_path):
    case = Hostile(tmp_path, SPAWNS)
    code, out, err = case.run("--select", "reward-functions,trainer-config")
    rules = report_of(out)
    assert code == 0, err[-2000:]
    left = rules["reward-functions"]["details"]["processes left running by user code"]
    assert rules["reward-functions"]["status"] == "pass"
    assert sum(f"sleep {case.seconds}" in entry for entry in left) == 2  # the child and the setsid one
    assert len(left) >= 5 and all(entry.startswith("rewards.py (importing rewards.format_reward): ") for entry in left)
    case.assert_clean()


@pytest.mark.parametrize("how, args, expect_code", [
    ("segfault", (), 1),  # the worker dies in the user's code
    ("hang", ("--user-code-timeout", "2"), 1),  # the supervisor stops it at --user-code-timeout
    ("exit2", (), 2),  # the check ends on an input error after the user's code ran
])
def test_every_exit_path_ends_the_tree_and_removes_the_folder(built_fixtures, tmp_path, how, args, expect_code):
    tail = {"segfault": "\nimport ctypes\nctypes.string_at(0)\n", "hang": "\ntime.sleep(600)\n", "exit2": ""}[how]
    case = Hostile(tmp_path, SPAWNS + tail)
    if how == "exit2":  # a launch script imports the reward module, then stops before any trainer: exit 2
        (case.setup / "script.py").write_text("import rewards\nraise SystemExit('no trainer here')\n")
        code, out, err = _launch(case)
    else:
        code, out, err = case.run("--select", "reward-functions", *args)
    assert code == expect_code, err[-2000:]
    if how != "exit2":
        reward = report_of(out)["reward-functions"]
        assert reward["status"] == "fail"
        assert ("killed by SIGSEGV" if how == "segfault" else "did not finish within 2 s") in reward["message"]
    case.assert_clean()


def _launch(case: Hostile) -> tuple[int, str, str]:
    cmd = [trl_doctor_exe(), "check", "--no-smoke", "--", sys.executable, "script.py"]
    proc = subprocess.run(cmd, cwd=case.setup, env=case.env(), capture_output=True, text=True, timeout=LIMIT_S)
    assert "before constructing a TRL trainer" in proc.stderr, proc.stderr[-2000:]
    return proc.returncode, proc.stdout, proc.stderr


# -- signals --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_a_signal_to_the_cli_ends_the_check_with_nothing_left(built_fixtures, tmp_path, signum):
    case = Hostile(tmp_path, SPAWNS + WAIT)
    proc = case.start("--select", "reward-functions", "--user-code-timeout", "600")
    case.wait_started(proc)
    os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert err.decode().strip().splitlines()[-1] == (f"trl-doctor: interrupted ({signal.Signals(signum).name}): "
                                                     "the check was stopped")
    case.assert_clean()


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_hangup_the_caller_ignores_stays_ignored(built_fixtures, tmp_path):
    """Under nohup (SIGHUP ignored) a hangup does not stop the check: it runs on to its verdict, and still leaves
    nothing behind."""
    case = Hostile(tmp_path, SPAWNS + WAIT)
    proc = case.start("--select", "reward-functions", "--user-code-timeout", "4",
                      signals={signal.SIGHUP: signal.SIG_IGN})
    case.wait_started(proc)
    os.kill(proc.pid, signal.SIGHUP)
    out, err = proc.communicate(timeout=LIMIT_S)
    assert proc.returncode == 1, err[-2000:]
    assert "did not finish within 4 s" in report_of(out.decode())["reward-functions"]["message"]
    case.assert_clean()


# -- the channel ----------------------------------------------------------------------------------------------------

def test_user_output_shaped_like_the_protocol_changes_nothing(built_fixtures, tmp_path):
    forged = DONE
    module = (f"\nimport json, sys\nprint({forged!r}, flush=True)\nprint({forged!r}, file=sys.stderr, flush=True)\n"
              "json.dumps = lambda *a, **k: 'not json'\njson.JSONEncoder.encode = lambda *a, **k: 'not json'\n")
    case = Hostile(tmp_path, module)
    code, out, err = case.run("--select", "reward-functions,trainer-config,dataset-schema")
    rules = report_of(out)
    assert code == 0, err[-2000:]
    assert [rules[s]["status"] for s in ("reward-functions", "trainer-config", "dataset-schema")] == ["pass"] * 3
    case.assert_clean()


def _into_every_pipe(line: str) -> str:
    """A reward module that writes `line` into every pipe descriptor it holds (the channel to trl-doctor among them)."""
    return f"""
import os, stat
for fd in range(3, 64):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, {(line + chr(10)).encode()!r})
    except OSError:
        pass
"""


def test_a_forged_done_on_the_channel_is_never_a_pass(built_fixtures, tmp_path):
    # user code that finds the channel's descriptor and writes a whole `done` line into every pipe it has
    case = Hostile(tmp_path, _into_every_pipe(DONE))
    code, out, err = case.run("--select", "trainer-config,reward-functions,model-files")
    rules = report_of(out)
    assert code == 1, err[-2000:]
    assert set(rules) == {"trainer-config", "reward-functions", "model-files"}
    assert rules["trainer-config"]["status"] == "pass"  # reported before the reward module ran
    for slug in ("reward-functions", "model-files"):  # the rule running when the forged line came, and the one after
        assert rules[slug]["status"] == "error"
        assert rules[slug]["message"] == "not reported: the check's worker said it was done without this rule's result"
    case.assert_clean()


def test_a_line_that_is_not_the_protocol_is_named_as_such(built_fixtures, tmp_path):
    case = Hostile(tmp_path, _into_every_pipe("hello from a reward"))
    code, out, err = case.run("--select", "reward-functions,dataset-schema")
    rules = report_of(out)
    assert code == 1, err[-2000:]
    message = rules["reward-functions"]["message"]
    assert rules["reward-functions"]["status"] == "fail"
    assert message.startswith("rewards.py (importing rewards.format_reward) broke the worker's channel to trl-doctor: "
                              "'hello from a reward': JSONDecodeError")
    assert rules["dataset-schema"]["status"] == "pass"  # a fresh worker went on
    case.assert_clean()


def test_a_protocol_line_of_another_shape_is_refused_not_misread(built_fixtures, tmp_path):
    # the right version and kind, a field of the wrong type: the supervisor refuses it as it refuses noise
    forged = json.dumps({"version": VERSION, "kind": "user-code-end", "key": 7})
    case = Hostile(tmp_path, _into_every_pipe(forged))
    code, out, err = case.run("--select", "reward-functions,dataset-schema")
    rules = report_of(out)
    assert code == 1, err[-2000:]
    message = rules["reward-functions"]["message"]
    assert rules["reward-functions"]["status"] == "fail"
    assert message.startswith("rewards.py (importing rewards.format_reward) broke the worker's channel to trl-doctor: ")
    assert "ProtocolError: a 'user-code-end' message's key is int 7, not str" in message
    assert rules["dataset-schema"]["status"] == "pass"
    case.assert_clean()


@pytest.mark.parametrize("game", ["closerange", "dup2"])
def test_a_reward_module_that_closes_or_replaces_inherited_fds_is_named_not_oom(built_fixtures, tmp_path, game):
    code_of = {"closerange": "\nimport os\nos.closerange(3, 4096)\n",
               "dup2": "\nimport os\nfor fd in range(3, 64):\n    try:\n        os.dup2(1, fd)\n    except OSError:\n"
                       "        pass\n"}
    case = Hostile(tmp_path, code_of[game])
    code, out, err = case.run("--select", "reward-functions,dataset-schema")
    rules = report_of(out)
    assert code == 1, err[-2000:]
    message = rules["reward-functions"]["message"]
    assert rules["reward-functions"]["status"] == "fail"
    assert message == ("rewards.py (importing rewards.format_reward) closed the worker's channel to trl-doctor (a file "
                       "descriptor the worker inherited, not one of the user's code); the worker was stopped")
    assert "out-of-memory" not in out
    assert rules["dataset-schema"]["status"] == "pass"
    case.assert_clean()


def test_a_sigkill_is_not_blamed_on_the_oom_killer(built_fixtures, tmp_path):
    case = Hostile(tmp_path, "\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    code, out, err = case.run("--select", "reward-functions")
    message = report_of(out)["reward-functions"]["message"]
    assert code == 1 and message == "rewards.py (importing rewards.format_reward) ended the check's worker: killed by SIGKILL"
    case.assert_clean()


def test_an_import_time_print_and_exit_gives_a_valid_junit_report(built_fixtures, tmp_path):
    case = Hostile(tmp_path, "\nimport sys\nprint('<testsuite> & \\x00\\x1b[31m \\x07 ]]>', flush=True)\nimport os\nos._exit(0)\n")
    code, out, err = case.run("--select", "reward-functions", "--format", "junit")
    assert code == 1, err[-2000:]
    root = ET.fromstring(out.encode())  # parses: no raw control character, nothing unescaped
    (failure,) = root.iter("failure")
    assert "ended the check's worker: exit status 0" in failure.get("message")
    case.assert_clean()


# -- inputs that are numbers, loops and devices ------------------------------------------------------------------------

def _model_file(setup: Path, name: str, target: str) -> None:
    (setup / "model" / name).unlink()
    os.symlink(target, setup / "model" / name)


@pytest.mark.parametrize("case_name", ["bigint", "config-loop", "tokenizer-device", "dataset-device", "folder-loop"])
def test_numbers_loops_and_devices_are_one_line_input_errors(built_fixtures, tmp_path, case_name):
    case = Hostile(tmp_path, "")
    setup = case.setup
    if case_name == "bigint":
        text = (setup / "model" / "config.json").read_text()
        (setup / "model" / "config.json").write_text(text.replace('"vocab_size": ', '"x": ' + "9" * 5000 + ', "vocab_size": '))
        expect = f"{setup / 'model' / 'config.json'}: a 5000-digit number at line "
    elif case_name == "config-loop":
        _model_file(setup, "config.json", "config.json")
        expect = f"{setup / 'model' / 'config.json'}: a symbolic link loop"
    elif case_name == "tokenizer-device":
        _model_file(setup, "tokenizer.json", "/dev/zero")
        expect = f"{setup / 'model' / 'tokenizer.json'}: a character device, not a tokenizer file"
    elif case_name == "dataset-device":
        (setup / "prompts.jsonl").unlink()
        os.symlink("/dev/zero", setup / "prompts.jsonl")
        expect = f"{setup / 'prompts.jsonl'}: a character device, not a dataset file"
    else:  # a loop beside the files the check reads: nothing to report, nothing crashes
        os.symlink("loop_b", setup / "model" / "loop_a")
        os.symlink("loop_a", setup / "model" / "loop_b")
        expect = None
    code, out, err = case.run("--select", "reward-functions,pad-token,model-files")
    if expect is None:
        assert code == 0 and all(r["status"] == "pass" for r in report_of(out).values()), err[-2000:]
    else:
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"trl-doctor: error: {expect}"), err[-2000:]
    case.assert_clean()


# -- a memory finding, not a rule error -------------------------------------------------------------------------------

@pytest.mark.parametrize("raised", ["MemoryError()", "torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 8.00 GiB')"])
def test_an_allocation_failure_in_a_rule_is_a_finding_about_memory(built_fixtures, tmp_path, raised):
    import torch  # noqa: F401  (the rule raises torch's own error)

    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context, Options
    from trl_doctor.engine import run_rule
    from trl_doctor.registry import Rule

    setup = badinputs.build_setup(tmp_path)
    error = eval(raised)

    def check(ctx):
        raise error

    rule = Rule(id="TD999", slug="probe", title="a probe", severity="error", trainers=("grpo",), check=check,
                explanation="a probe that allocates")
    with Context(load_config(setup / "config.yaml"), Options(smoke=False, memory_limit=6 * 2**30)) as ctx:
        result = run_rule(rule, ctx)
    assert result.status.value == "fail"
    assert result.message.startswith("ran out of memory: ") and "6.0 GiB of address space" in result.message
    assert result.details["error"].split(":")[0] in ("MemoryError", "OutOfMemoryError")


# -- the whole classes, marked fuzz ------------------------------------------------------------------------------------

@pytest.mark.fuzz
def test_a_killed_cli_leaves_what_the_next_check_sweeps(built_fixtures, tmp_path):
    """SIGKILL cannot be handled: the worker dies with its parent (PR_SET_PDEATHSIG), and the next check's start ends
    the processes still carrying the dead check's tag and removes its folder (its owner's pid is gone)."""
    case = Hostile(tmp_path, SPAWNS + WAIT)
    proc = case.start("--select", "reward-functions", "--user-code-timeout", "600", forkserver=False)
    case.wait_started(proc)
    proc.kill()
    proc.communicate()
    assert [p.name for p in case.tmpdir.iterdir() if p.name.startswith("trl-doctor-")]  # left by the killed check
    (case.setup / "rewards.py").write_text(badinputs.REWARDS)
    code, out, err = case.run("--select", "trainer-config", forkserver=False)
    assert code == 0, err[-2000:]
    # the double-forked daemon (no exec) carries the tag too: the worker's own environment is its
    case.assert_clean()


@pytest.mark.fuzz
@pytest.mark.parametrize("forkserver", [True, False], ids=["forked", "started"])
@pytest.mark.parametrize("stage", ["import", "call", "smoke"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_a_signal_at_each_stage_leaves_nothing(built_fixtures, tmp_path, signum, stage, forkserver):
    call = ("\ndef format_reward(completions, **kwargs):\n    import pathlib, subprocess, time\n"
            "    subprocess.Popen(['setsid', 'sleep', SLEEP])\n    pathlib.Path(STARTED).touch()\n    time.sleep(600)\n")
    module = SPAWNS + WAIT if stage == "import" else call
    case = Hostile(tmp_path, module)
    args = ("--select", "reward-functions", "--user-code-timeout", "600") if stage != "smoke" else \
        ("--select", "smoke-step", "--smoke-timeout", "600")
    proc = case.start(*args, forkserver=forkserver) if stage != "smoke" else _start_smoke(case, forkserver)
    case.wait_started(proc)
    time.sleep(0.3)
    os.kill(proc.pid, signum)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum
    case.assert_clean()


def _start_smoke(case: Hostile, forkserver: bool) -> subprocess.Popen:
    cmd = [trl_doctor_exe(), "check", "config.yaml", "--format", "json", "--select", "smoke-step",
           "--smoke-timeout", "600", "--user-code-timeout", "600"]
    return subprocess.Popen(cmd, cwd=case.setup, env=case.env(forkserver), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.fuzz
@pytest.mark.parametrize("forkserver", [True, False], ids=["forked", "started"])
def test_leaks_from_a_started_worker_too(built_fixtures, tmp_path, forkserver):
    case = Hostile(tmp_path, SPAWNS)
    code, out, err = case.run("--select", "reward-functions", forkserver=forkserver)
    assert code == 0, err[-2000:]
    case.assert_clean()


# -- files user code writes in the user's folder (issue 30, class 9) ------------------------------------------------

# The reward of philschmid/deep-learning-pytorch-huggingface @ 4a7cc932 training/scripts/run_r1_grpo.py
# (format_reward_func), which appends sampled completions to completion_samples/completion_samples.txt in the working
# directory on 10% of calls; here on every call, so the case is deterministic.
SAMPLE_LOGGING = '''
import os

def format_reward_logging(completions, **kwargs):
    os.makedirs("completion_samples", exist_ok=True)
    with open(os.path.join("completion_samples", "completion_samples.txt"), "a") as f:
        for completion in completions:
            f.write("\\n\\n==============\\n" + str(completion))
    return [0.5 if "<think>" in str(c) else 0.0 for c in completions]
'''


def test_files_a_reward_writes_in_the_working_directory_are_reported(built_fixtures, tmp_path):
    case = Hostile(tmp_path, SAMPLE_LOGGING)
    config = case.setup / "config.yaml"
    config.write_text(config.read_text().replace("rewards.format_reward", "rewards.format_reward_logging"))
    code, out, err = case.run("--select", "reward-functions")
    result = report_of(out)["reward-functions"]
    assert code == 0 and result["status"] == "pass", err[-2000:]
    from trl_doctor.runtime import netns

    held = netns.probe().namespace  # the working directory is held where a user namespace can be made
    where = "held in the check's own layer, gone with it: not written into your folder" if held else "left in place"
    created = result["details"][f"files created by user code ({where})"]
    assert any(entry.endswith(f"created {case.setup / 'completion_samples'}/") for entry in created), created
    assert (case.setup / "completion_samples").exists() != held
    assert all(entry.startswith("rewards.py (") for entry in created), created
    case.assert_clean()


# -- the printing process stopped by the user's code (issue 31) ------------------------------------------------------
FREEZE = {"parent": "\nimport os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",
          "parent's group": "\nimport os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGSTOP)\n"}


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.parametrize("how", sorted(FREEZE))
def test_a_reward_that_stops_the_printing_process_fails_its_rule_not_the_check(built_fixtures, tmp_path, how):
    """SIGSTOP cannot be caught: the check's guard, a process in a session of its own, resumes the printing process,
    which stops the worker and fails the user code that ran then, by name, well within the user-code time limit. (A
    started worker, as a user's check starts it: the test suite's fork server would be the parent otherwise.)"""
    case = Hostile(tmp_path, FREEZE[how])
    started = time.monotonic()
    code, out, err = case.run("--select", "reward-functions", "--user-code-timeout", "100", forkserver=False)
    took = time.monotonic() - started
    result = report_of(out)["reward-functions"]
    assert code == 1 and result["status"] == "fail", (code, result, err[-2000:])
    assert result["message"].startswith("rewards.py (importing rewards.format_reward) stopped trl-doctor's own "
                                        "process (SIGSTOP)"), result["message"]
    assert took < 90, f"{took:.0f}s: the check waited for the time limit"
    case.assert_clean()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _check_in_a_group(case: Hostile, stdin) -> subprocess.Popen:
    """The check in a process group of its own in this session, as a shell's job is: a stop signal to a group with
    no parent outside it in the session (an orphaned group, as start_new_session makes) is discarded by the kernel."""
    return subprocess.Popen([trl_doctor_exe(), "check", "config.yaml", "--no-smoke", "--format", "json",
                             "--select", "reward-functions", "--user-code-timeout", "100"], cwd=case.setup,
                            env=case.env(), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            process_group=0)


def _how(pid: int) -> str:
    """What decides a stop's fate, for a failure's message: signal masks, group and session, the group's parents."""
    status = {k: v.strip() for k, v in (ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines())}
    return (f"SigIgn={status.get('SigIgn')} SigCgt={status.get('SigCgt')} SigBlk={status.get('SigBlk')} "
            f"pgid={os.getpgid(pid)} sid={os.getsid(pid)} ppid={status.get('PPid')} test pid={os.getpid()} "
            f"test pgid={os.getpgid(0)} test sid={os.getsid(0)} stdin={os.readlink(f'/proc/{pid}/fd/0')}")


def _stop_and_look(case: Hostile, proc: subprocess.Popen) -> list[str]:
    """SIGTSTP to the check while its user code runs: its state over the next second (twenty of the guard's looks),
    then twice after SIGCONT."""
    try:
        case.wait_started(proc)
        seen = [_how(proc.pid)]
        os.kill(proc.pid, signal.SIGTSTP)
        for _ in range(5):
            time.sleep(0.2)
            seen.append(_state(proc.pid))
        os.kill(proc.pid, signal.SIGCONT)
        for _ in range(2):  # continued, the check goes on waiting for its user code (a stop counted would end it)
            time.sleep(0.4)
            seen.append(_state(proc.pid))
        return seen
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=LIMIT_S)


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_job_control_stops_stand_in_a_terminal_and_are_ignored_without_one(built_fixtures, tmp_path):
    """Ctrl-Z (SIGTSTP) in a terminal stops the check until it is continued; the guard does not undo it. Without a
    terminal there is no job control: the check goes on (nothing would ever continue it)."""
    import pty

    case = Hostile(tmp_path, WAIT)
    main, terminal = pty.openpty()
    try:
        seen = _stop_and_look(case, _check_in_a_group(case, terminal))
    finally:
        os.close(terminal)
        os.close(main)
    assert seen[1:6] == ["T"] * 5 and set(seen[6:]) <= {"S", "R"}, f"in a terminal: {seen}"
    case.assert_clean()

    quiet = Hostile(tmp_path / "no-terminal", WAIT)
    seen = _stop_and_look(quiet, _check_in_a_group(quiet, subprocess.DEVNULL))
    assert set(seen[1:]) <= {"S", "R"}, f"without a terminal: {seen}"
    quiet.assert_clean()
