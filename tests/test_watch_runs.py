"""The watch inside real jobs (issue 33): TRL's GRPO and RLOO trained on the CPU on a tiny Qwen2 with one failure
induced each (fixtures/_watch_runs.py), DoctorCallback(watch=True) judging every log. Each failure is flagged from the
step it starts and the job stops cleanly with a checkpoint; the same runs made healthy are not stopped; two processes
under torchrun (gloo) stop at the same step."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.slow


def _new_enough() -> bool:
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("trl")) >= Version("0.20")


needs_trl = pytest.mark.skipif(not _new_enough(), reason="the runs use GRPOConfig.generation_kwargs and the "
                                                        "GRPO-style RLOOTrainer of trl >= 0.20")


def run(name: str, tmp_path, steps: int = 8, **more):
    sys.path.insert(0, str(FIXTURES))
    import _watch_runs
    from transformers import TrainerCallback

    from trl_doctor import DoctorCallback

    class Tracker(TrainerCallback):  # stands where a tracker's callback (wandb, trackio) stands: after the defaults
        rows: list = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.rows.append(dict(logs or {}))

    stream = io.StringIO()
    callback = DoctorCallback(preflight=False, watch=True, stream=stream)
    tracker = Tracker()
    tracker.rows = []
    trainer = _watch_runs.trainer(name, str(tmp_path / "out"), steps, callbacks=[tracker, callback], **more)
    trainer.train()  # returns normally, stopped or not
    callback.tracked = tracker.rows
    return trainer, callback, stream.getvalue()


@needs_trl
@pytest.mark.parametrize("name, rule, stop", [
    ("zero_advantage", "TW001", 5),  # a constant reward: 5 logs in a row from step 1
    ("rloo_zero_advantage", "TW001", 5),
    ("never_terminating", "TW002", 5),  # every stop token suppressed
    ("lr_zero", "TW009", 2),  # learning_rate 0: 2 logs
])
def test_an_induced_failure_stops_the_job_with_a_checkpoint(tmp_path, name, rule, stop):
    trainer, callback, said = run(name, tmp_path)
    assert callback.watcher.stopped_at == stop and trainer.state.global_step == stop, said
    result = next(r for r in callback.watch_report.results if r.id == rule)
    assert result.status.value == "fail" and result.details["since"] == "step 1", result
    assert f"trl-doctor watch, step {stop}: {rule}" in said and "stopping the job" in said
    out = tmp_path / "out"
    assert (out / f"checkpoint-{stop}" / "trainer_state.json").is_file()
    report = json.loads((out / "trl-doctor-watch.json").read_text())
    assert {r["id"]: r["status"] for r in report["results"]}[rule] == "fail"
    # the trackers receive the verdicts with the metrics: 0 failing rules until the decision, then the rule's level
    rows = [r for r in callback.tracked if "loss" in r]
    assert [r["doctor/fail"] > 0 for r in rows] == [False] * (stop - 1) + [True]
    assert rows[-1][f"doctor/{result.rule}"] == 2

@needs_trl
@pytest.mark.parametrize("name", ["healthy", "rloo_healthy"])
def test_the_same_runs_made_healthy_are_not_stopped(tmp_path, name):
    trainer, callback, said = run(name, tmp_path)
    assert callback.watcher.stopped_at is None and trainer.state.global_step == 8, said
    assert callback.watch_report.ok and not said
    assert not any((tmp_path / "out").glob("checkpoint-*"))  # save_strategy "no": only a stop saves


@needs_trl
def test_a_diverging_learning_rate_is_flagged_at_the_step_it_starts(tmp_path):
    trainer, callback, said = run("diverging", tmp_path)  # learning_rate 5: the policy collapses after step 1
    flagged = {r.id: r for r in callback.watch_report.results if r.status.value in ("fail", "warn")}
    assert callback.watcher.stopped_at == 6, said  # step 2 + 5 logs of zero advantage - 1
    # the collapse starts at step 2: the KL jumps, the entropy falls to 0, no group has a reward spread
    assert {flagged[r].details["since"] for r in ("TW001", "TW005", "TW006")} == {"step 2"}, flagged


@needs_trl
def test_on_fail_warn_says_so_and_goes_on(tmp_path):
    sys.path.insert(0, str(FIXTURES))
    import _watch_runs

    from trl_doctor import DoctorCallback

    stream = io.StringIO()
    callback = DoctorCallback(preflight=False, watch={"zero-advantage": {"patience": 3}}, on_fail="warn", stream=stream)
    trainer = _watch_runs.trainer("zero_advantage", str(tmp_path / "out"), 6, callbacks=[callback])
    trainer.train()
    assert trainer.state.global_step == 6 and callback.watcher.stopped_at is None
    assert "trl-doctor watch, step 3: TW001 zero-advantage fail" in stream.getvalue()  # patience 3, from the dict


@needs_trl
@pytest.mark.skipif(shutil.which("torchrun") is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "torchrun")),
                    reason="torchrun is not installed")
def test_two_processes_stop_at_the_same_step(tmp_path):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = tmp_path / "ddp"
    proc = subprocess.run([torchrun, "--nproc_per_node", "2", str(FIXTURES / "_watch_runs.py"), "--distributed",
                           "zero_advantage", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    # only the main process judges: the other stops on the verdict it receives through the process group
    assert [r["stopped_at"] for r in ranks] == [5, 5] and [r["global_step"] for r in ranks] == [5, 5]
    assert (out / "checkpoint-5").is_dir()
    assert proc.stderr.count("stopping the job at step 5") + proc.stdout.count("stopping the job at step 5") == 1
