"""Issue 43: the watch at the settings users keep. TRL's GRPOConfig logs every 10 steps (`logging_steps=10`) and saves
every 500; real runs (fixtures/_watch_runs.py: a tiny Qwen2 trained by TRL on the CPU) at those defaults, reporting to
TensorBoard as `report_to: tensorboard` does. Evidence is counted in optimizer steps: an induced failure from step 1
is flagged by step 20 by DoctorCallback(watch=True) inside the job, and by `trl-doctor watch OUTPUT_DIR --follow`
started before the job's first log (the TensorBoard events under runs/, long before any checkpoint); the same run
made healthy is never flagged over 200 steps."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from conftest import FIXTURES, trl_doctor_exe

pytestmark = [pytest.mark.slow, pytest.mark.trl_pair]


def _new_enough() -> bool:
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("trl")) >= Version("0.20")


def _tensorboard() -> bool:
    from importlib.util import find_spec

    return find_spec("tensorboard") is not None


needs = pytest.mark.skipif(not (_new_enough() and _tensorboard()), reason="the runs use the GRPO-style trainers of "
                           "trl >= 0.20 and write TensorBoard events (tensorboard installed)")


def defaults() -> dict:
    """GRPOConfig's own logging and saving settings (the class's defaults, whatever this release has)."""
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__
    return {k: fields[k].default for k in ("logging_steps", "save_strategy", "save_steps")} | {
        "report_to": ["tensorboard"]}


def train(name: str, folder, steps: int, callback=None):
    sys.path.insert(0, str(FIXTURES))
    import _watch_runs

    trainer = _watch_runs.trainer(name, str(folder), steps, callbacks=[callback] if callback else [], **defaults())
    trainer.train()
    return trainer


@needs
def test_the_defaults_are_what_the_issue_says():
    """GRPOConfig logs every 10 steps from TRL 0.20 on (trl 0.15's inherits transformers' 500)."""
    assert defaults()["logging_steps"] == 10 and defaults()["save_steps"] == 500


@needs
@pytest.mark.parametrize("name, rule", [
    ("zero_advantage", "zero-advantage"),  # a constant reward from step 1
    ("never_terminating", "never-terminating"),  # every stop token suppressed
    ("lr_zero", "learning-rate-zero"),
    ("diverging", None),  # learning rate 5: the KL is flagged (a warn) at step 20, the job stopped at a later log
])
def test_an_induced_failure_is_flagged_by_step_20_inside_the_job_and_from_the_outside(tmp_path, name, rule):
    """`trl-doctor watch OUTPUT_DIR --follow` is started first, on an output folder that does not exist yet; the job
    then trains with DoctorCallback(watch=True), logging to TensorBoard (no checkpoint for 500 steps). Both flag the
    failure at the second log, step 20; the callback stops the job there."""
    import re

    from trl_doctor import DoctorCallback

    out = tmp_path / "out"
    watch = subprocess.Popen([trl_doctor_exe(), "watch", str(out), "--follow", "--interval", "0.2", "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stream = io.StringIO()
    try:
        trainer = train(name, out, 40, DoctorCallback(preflight=False, watch=True, stream=stream))
        stdout, stderr = watch.communicate(timeout=120)
    finally:
        watch.kill()
    said = stream.getvalue()
    first = re.search(r"trl-doctor watch, step (\d+): TW\d+ [a-z-]+ (warn|fail)", said)
    assert first and int(first.group(1)) <= 20, said  # inside: within 20 optimizer steps of the failure's start
    outside = re.match(r"step (\d+): TW\d+ [a-z-]+ (warn|fail)", stderr)
    assert outside and int(outside.group(1)) <= 20, stderr  # outside: the first line --follow prints
    assert "runs" in json.loads(stdout)["config"]  # read from the TensorBoard events: no checkpoint yet
    if rule is None:
        return
    assert trainer.state.global_step <= 20, (trainer.state.global_step, said)  # the callback stopped the job there
    report = json.loads((out / "trl-doctor-watch.json").read_text())
    assert rule in [r["rule"] for r in report["results"] if r["status"] == "fail"], said
    assert watch.returncode == 1 and rule in [r["rule"] for r in json.loads(stdout)["results"] if r["status"] == "fail"]
    assert "trl-doctor watch: stopping the job at step" in said


@needs
def test_a_healthy_run_is_never_flagged_over_200_steps_inside_and_outside(tmp_path):
    from trl_doctor import DoctorCallback

    stream = io.StringIO()
    callback = DoctorCallback(preflight=False, watch=True, stream=stream)
    trainer = train("healthy", tmp_path / "out", 200, callback)
    assert trainer.state.global_step == 200, stream.getvalue()
    assert stream.getvalue() == "", stream.getvalue()  # no verdict changed to warn or fail
    proc = subprocess.run([trl_doctor_exe(), "watch", str(tmp_path / "out"), "--format", "json"], capture_output=True,
                          text=True, timeout=120)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, report
    assert "runs" in report["config"]  # judged from the TensorBoard events
    flagged = {r["rule"]: r["message"] for r in report["results"] if r["status"] in ("warn", "fail")}
    assert not flagged, flagged
