"""The rehearsal's trackers (TD025, issue 60): each `report_to` tracker starts offline, as the job's `train()` starts
it, with the job's own arguments, and sees a log and the later phases; its records stay in the check's folder.

Ground truth: the script itself (fixtures/launch/grpo_tracker_args.py), run for one step by the installed TRL in a
process of its own. A torch.dtype under `model_init_kwargs["torch_dtype"]` (TRL's documented form) with TensorBoard
stops the job at `train()` in transformers 5 ("Object of type dtype is not JSON serializable", the class of
huggingface/transformers#37518); the same script with the dtype under `dtype`, reporting to every tracker installed
here (wandb, MLflow, TensorBoard, Trackio), trains. The doctor must say the same of each, from the script's own
config object (the step's trainer is given none of it), and write nothing beside the script."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, result_of, run_doctor
from truths import truth_run

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.slow, pytest.mark.trl_pair]

LAUNCH = FIXTURES / "launch"
SCRIPT = "grpo_tracker_args.py"
MODEL = str(FIXTURES / "models" / "qwen2-chat")
TRACKER_FILES = ("out", "runs", "wandb", "mlruns", "mlflow.db", "trackio")


def _ground_truth(tmp_path: Path, report_to: str, key: str):
    """The script run for one step where nothing of the doctor's is, its trackers offline in tmp_path."""
    case = tmp_path / "launch"
    case.mkdir()
    shutil.copy(LAUNCH / SCRIPT, case / SCRIPT)
    (tmp_path / "data").symlink_to(FIXTURES / "data")
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", "TRACKIO_DIR": str(tmp_path / "trackio")}
    trackers = ("wandb", "mlflow", "trackio", "tensorboard", "tensorboardX", "comet_ml", "clearml", "dvclive",
                "neptune", "swanlab", "codecarbon")  # the installed ones start: their releases enter the key
    return truth_run(f"rehearsal_trackers/{report_to}-{key}",
                     [sys.executable, "-W", "ignore", SCRIPT, MODEL, report_to, key, "1"], case, env=env, tmp=tmp_path,
                     reads=(f"fixtures/launch/{SCRIPT}", "fixtures/data"), requires=dict.fromkeys(trackers, ""))


def _transformers_5() -> bool:
    """The default lane's transformers, where the two cases go opposite ways (so neither test passes by both sides
    agreeing on one outcome); in an older lane each case's outcome is that release's own."""
    import transformers

    return int(transformers.__version__.split(".")[0]) >= 5


def _doctor(monkeypatch, report_to: str, key: str) -> dict:
    monkeypatch.chdir(LAUNCH)
    before = {p.name for p in LAUNCH.iterdir()}
    proc = run_doctor("check", "--select", "rehearsal", "--format", "json", "--",
                      "python", SCRIPT, MODEL, report_to, key)
    assert proc.stdout, proc.stderr
    left = {p.name for p in LAUNCH.iterdir()} - before
    assert not left & set(TRACKER_FILES), f"the check left {sorted(left)} beside the script"
    return result_of(json.loads(proc.stdout), "rehearsal")


def test_a_dtype_tensorboard_cannot_write_stops_the_job_at_train_and_the_rehearsal_says_so(monkeypatch, tmp_path):
    truth = _ground_truth(tmp_path, "tensorboard", "torch_dtype")
    found = _doctor(monkeypatch, "tensorboard", "torch_dtype")
    words = "Object of type dtype is not JSON serializable"
    assert truth.returncode != 0 or not _transformers_5(), "transformers 5 writes a dtype under torch_dtype now"
    if truth.returncode == 0:  # a transformers that writes the dtype's name: the job trains, and so must the check
        assert found["status"] == "pass", found
        return
    assert words in truth.stderr, truth.stderr[-2000:]
    assert "TRAINED" not in truth.stdout  # it stopped at train(), before any step
    assert found["status"] == "fail", found
    assert "trackers (report_to tensorboard)" in found["message"] and words in found["message"], found
    assert "to fix" in found["details"], found


def test_every_installed_tracker_started_offline_passes_a_job_that_trains(monkeypatch, tmp_path):
    truth = _ground_truth(tmp_path, "all", "dtype")
    found = _doctor(monkeypatch, "all", "dtype")
    from transformers.integrations import get_available_reporting_integrations

    installed = get_available_reporting_integrations()
    assert truth.returncode == 0 or not _transformers_5(), truth.stderr[-2000:]
    if truth.returncode != 0:  # the job itself fails here: the check must not pass it
        assert found["status"] == "fail", (truth.stderr[-2000:], found)
        return
    assert "TRAINED" in truth.stdout
    assert found["status"] == "pass", found
    if installed:
        assert found["message"].startswith("trackers,"), found  # they started, first, as train() starts them
        assert "trackers" in found["details"]["phases"], found
