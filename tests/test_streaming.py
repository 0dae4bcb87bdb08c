"""On a terminal the table streams: the header at once, each rule's row as its result arrives, then the details
and the summary. Through the real command, the streamed lines are exactly the lines of the table written at
once, in the same run order (static rules, then the rules that read the trainer run)."""

from __future__ import annotations

import pytest

import os

from conftest import FIXTURES, long_prompts_config, run_doctor, trl_doctor_exe

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

CASE = str(FIXTURES / "trainer-config" / "ok_grpo.yaml")


def test_streamed_table_equals_the_table_written_at_once(built_fixtures):
    args = ("check", CASE, "--no-smoke", "--select", "pad-token,eos-termination,trainer-config,batch-geometry")
    streamed = run_doctor(*args, env={"TRL_DOCTOR_STREAM": "1", "TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")})
    whole = run_doctor(*args, env={"TRL_DOCTOR_STREAM": "0", "TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")})
    assert streamed.returncode == whole.returncode, streamed.stderr
    assert streamed.stdout == whole.stdout
    head = whole.stdout.split("\nid ")[0]  # what will run, stated before the first row (the worker says it first)
    assert "what will run (trl " in head and "\n  loss " in head and "\n  checkpoints " in head, head
    rows = [line.split()[0] for line in whole.stdout.splitlines() if line.startswith("TD0")]
    # run order: the static group by id, then the trainer-run group
    assert rows == ["TD001", "TD009", "TD010", "TD004"]


GEOMETRY_BAD = str(FIXTURES / "batch-geometry" / "bad_num_generations_one.yaml")


def test_streamed_github_annotations_equal_the_annotations_written_at_once(built_fixtures):
    """`--format github` streams whatever stdout is (a CI log is no terminal): each annotation as its result
    arrives, the summary at the end, byte for byte what the same report written at once gives."""
    args = ("check", GEOMETRY_BAD, "--no-smoke", "--num-processes", "1", "--format", "github",
            "--select", "pad-token,eos-termination,trainer-config,batch-geometry,chat-template")
    server = {"TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")}
    streamed = run_doctor(*args, env={**server})  # no TRL_DOCTOR_STREAM: github streams by default
    whole = run_doctor(*args, env={**server, "TRL_DOCTOR_STREAM": "0"})
    assert streamed.returncode == whole.returncode == 1, streamed.stderr
    assert streamed.stdout == whole.stdout
    assert "title=TD010 batch-geometry::" in whole.stdout and whole.stdout.splitlines()[-1].startswith("trl-doctor: ")


def test_streamed_github_annotations_of_several_configs_equal_the_combined_report(built_fixtures, tmp_path):
    """Each config's annotations stream as they come; the line of a config that could not be read comes last, as
    in the combined report written at once."""
    args = ("check", GEOMETRY_BAD, str(tmp_path / "missing.yaml"), CASE, "--no-smoke", "--num-processes", "1",
            "--format", "github", "--select", "pad-token,batch-geometry,trainer-config")
    server = {"TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")}
    streamed = run_doctor(*args, env={**server})
    whole = run_doctor(*args, env={**server, "TRL_DOCTOR_STREAM": "0"})
    assert streamed.returncode == whole.returncode == 2, streamed.stderr
    assert streamed.stdout == whole.stdout
    lines = whole.stdout.splitlines()
    assert lines[-1].startswith("::error title=trl-doctor::") and "missing.yaml" in lines[-1]
    assert sum(line.startswith("trl-doctor: ") for line in lines) == 2  # one summary per config checked


# the reward (first called by reward-functions, TD014, after context-length's fail, TD011) waits for the test's
# go-ahead: only an annotation written as its result arrives can be read before it is given
WAITING_REWARD = '''
import time
from pathlib import Path

GO = Path(__file__).with_name("go")


def length_reward(prompts, completions, **kwargs):
    deadline = time.monotonic() + 40
    while not GO.exists():
        if time.monotonic() > deadline:
            GO.with_name("waited-out").touch()
            break
        time.sleep(0.05)
    return [0.0 for _ in completions]
'''


def test_github_annotation_is_written_before_the_check_goes_on(built_fixtures, tmp_path):
    import subprocess

    cfg = long_prompts_config(tmp_path, WAITING_REWARD)
    proc = subprocess.Popen([trl_doctor_exe(), "check", str(cfg), "--no-smoke", "--format", "github",
                             "--user-code-timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")})
    try:
        first = proc.stdout.readline()
        waited_out = (tmp_path / "waited-out").exists()
        (tmp_path / "go").touch()
        rest = proc.stdout.read()
        assert proc.wait(timeout=600) == 1, proc.stderr.read()
    finally:
        proc.kill()
    assert first.startswith("::error ") and "title=TD011 context-length::" in first
    assert not waited_out, "the first annotation was written only after the reward had waited out its 40 s"
    assert rest.splitlines()[-1].startswith("trl-doctor: ") and " 1 fail, " in rest.splitlines()[-1]
