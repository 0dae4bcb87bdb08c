"""run-phases (TD024, issue 60): what stops a job after its first step, read before launch. The configs' cases are
fixtures/run-phases (tests/test_fixture_cases.py runs them); here the cases that need a folder or a disk of their
own: a resume from the newest checkpoint of an output folder with none and with one, and a first checkpoint larger
than the disk's free space (a 64 KiB tmpfs in a mount namespace of the test's own: `unshare -rm`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, result_of, run_json, trl_doctor_exe

pytestmark = pytest.mark.release_free


def _recipe(tmp_path, **more) -> str:
    text = (FIXTURES / "run-phases" / "ok_grpo.yaml").read_text()
    text = text.replace("../models/", f"{FIXTURES}/models/").replace("../data/", f"{FIXTURES}/data/")
    text += "".join(f"{k}: {json.dumps(v)}\n" for k, v in more.items())
    (tmp_path / "rewards.py").write_text((FIXTURES / "run-phases" / "rewards.py").read_text())
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return str(path)


def test_resume_from_the_newest_checkpoint_needs_one(tmp_path):
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, output_dir=str(out), resume_from_checkpoint=True)
    _, report = run_json("check", recipe, "--select", "run-phases", "--no-smoke")
    found = result_of(report, "run-phases")
    assert found["status"] == "fail" and "No valid checkpoint found in output directory" in found["message"], found
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "trainer_state.json").write_text("{}")
    (out / "checkpoint-5" / "model.safetensors").write_bytes(b"")
    _, report = run_json("check", recipe, "--select", "run-phases", "--no-smoke")
    assert result_of(report, "run-phases")["status"] == "pass"
    recipe = _recipe(tmp_path, output_dir=str(out), resume_from_checkpoint=str(out / "checkpoint-5" / "missing"))
    _, report = run_json("check", recipe, "--select", "run-phases", "--no-smoke")
    assert "does not exist" in result_of(report, "run-phases")["message"]


def test_another_machines_checkpoint_is_not_judged(tmp_path):
    recipe = _recipe(tmp_path, resume_from_checkpoint="/no-such-root/runs/grpo/checkpoint-500")
    _, report = run_json("check", recipe, "--select", "run-phases", "--no-smoke")
    found = result_of(report, "run-phases")
    assert found["status"] == "skip" and "another machine's path" in found["message"], found


@pytest.mark.skipif(not shutil.which("unshare") or sys.platform != "linux", reason="needs util-linux's unshare")
def test_a_first_checkpoint_larger_than_the_free_disk_fails(tmp_path):
    """The real command, in a mount namespace of its own where output_dir is a 64 KiB tmpfs: the first checkpoint
    of the tiny Qwen2 (its weights and AdamW's two states) does not fit."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unprivileged mount namespaces are not allowed here: {probe.stderr.decode().strip()}")
    disk = tmp_path / "disk"
    disk.mkdir()
    recipe = _recipe(tmp_path, output_dir=str(disk / "out"))
    script = f"mount -t tmpfs -o size=64k tmpfs {disk} && exec {trl_doctor_exe()} check {recipe} --select run-phases " \
             "--no-smoke --format json"
    env = {k: v for k, v in os.environ.items() if k != "TRL_DOCTOR_FORKSERVER"}  # its worker: in this namespace
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    found = result_of(json.loads(proc.stdout), "run-phases")
    assert found["status"] == "fail" and "the first checkpoint needs about" in found["message"], found
    assert "free" in found["details"]["checkpoint"], found
