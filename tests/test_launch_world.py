"""Issue 45, class 3: the launch's world size, not 1. A launch of N processes runs the script as its rank 0 sees it
(WORLD_SIZE=N, RANK=0, LOCAL_RANK=0, a stand-in process group: trl_doctor/capture/world.py), so code that depends on
the world size builds what the launch builds; everything is put back before the rules and the smoke step run. A
script whose rank set-up needs a GPU this machine lacks is captured again, in a fresh worker, at world size 1, and
the report says so; the device map it chose there is then not judged against the N processes.

The scripts: fixtures/launch/grpo_per_rank_device_map.py (tloen/alpaca-lora's finetune.py per-rank device map, cited
in the script) and grpo_rank_setup_needs_gpu.py (oumi's init_distributed and per-rank device map, cited there); the
framework itself on its 4-GPU job is in tests/test_frameworks.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import result_of, run_doctor

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"
TARGET = ("--target", "4xA100-80GB")
RULES = ("--select", "distributed-setup,batch-geometry")


@pytest.fixture(autouse=True)
def in_launch_folder(monkeypatch):
    monkeypatch.chdir(LAUNCH)


def check(*command: str, smoke: bool = False) -> tuple[int, dict]:
    import json

    proc = run_doctor("check", *(() if smoke else ("--no-smoke", *RULES)), *TARGET, "--format", "json", "--", *command)
    assert proc.stdout, proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("launcher", [("torchrun", "--nproc_per_node", "4"), ("accelerate", "launch", "--num_processes", "4")],
                         ids=["torchrun", "accelerate"])
def test_a_per_rank_device_map_is_judged_as_the_launch_s_rank_0_builds_it(launcher):
    """Before: the script ran at world size 1, kept device_map="auto", and distributed-setup failed a job whose every
    rank loads the model on its own GPU."""
    code, report = check(*launcher, "grpo_per_rank_device_map.py")
    setup = result_of(report, "distributed-setup")
    assert code == 0 and setup["status"] == "pass", setup
    assert setup["details"]["device_map"] == "device_map={'': 0}: one device per process", setup["details"]
    assert any("rank 0 of the launch's 4 processes (WORLD_SIZE=4" in n for n in report["launch"]["notes"])
    # TRL's own batch check ran at world size 4 (2 per device x 4 divides 4 generations): nothing was relaxed for it
    assert "per_device_train_batch_size" not in report["launch"]["relaxed"], report["launch"]["relaxed"]
    assert result_of(report, "batch-geometry")["status"] == "pass"


def test_a_plain_python_launch_is_one_process_whatever_gpus_the_target_has():
    """`python script.py` on a machine of 4 GPUs is one process (no launcher starts more): the script keeps "auto",
    which one process may spread over the GPUs, and the batch is judged at one process."""
    code, report = check("python", "grpo_per_rank_device_map.py")
    setup = result_of(report, "distributed-setup")
    assert setup["status"] == "pass" and setup["details"]["device_map"].startswith("device_map='auto': one process")
    assert setup["details"]["training processes"].startswith("1 (`python grpo_per_rank_device_map.py` runs one process")
    geometry = result_of(report, "batch-geometry")
    assert code == 1 and geometry["status"] == "fail" and "at 1 process" in geometry["message"], geometry["message"]
    assert not any("rank 0 of" in n for n in report["launch"]["notes"]), report["launch"]["notes"]


def test_a_rank_set_up_that_needs_a_gpu_is_captured_again_at_one_process_and_said():
    code, report = check("torchrun", "--nproc_per_node", "4", "grpo_rank_setup_needs_gpu.py")
    note = next(n for n in report["launch"]["notes"] if "world size 1" in n)
    assert "needs a GPU this machine lacks (RuntimeError: Cannot access accelerator device" in note, note
    assert "grpo_rank_setup_needs_gpu.py:2" in note, note  # the script's own line
    setup = result_of(report, "distributed-setup")
    assert code == 0 and setup["status"] == "pass", setup
    assert setup["details"]["device_map"].endswith("not judged"), setup["details"]
    assert "device_map is not judged" in setup["message"], setup["message"]
    assert result_of(report, "batch-geometry")["message"].startswith("at 4 processes")


@pytest.mark.slow
def test_the_smoke_step_runs_at_one_process_after_the_capture_at_four():
    """The stand-in's state (process group, accelerate's state, the environment) is gone before the trainer runs."""
    code, report = check("torchrun", "--nproc_per_node", "4", "grpo_per_rank_device_map.py", smoke=True)
    smoke = result_of(report, "smoke-step")
    assert smoke["status"] == "pass" and "took 1 step" in smoke["message"], smoke
    assert code == 0, [(r["rule"], r["status"], r["message"][:200]) for r in report["results"] if r["status"] != "pass"]


def test_the_stand_in_is_put_back_entirely():
    import torch
    import torch.distributed as dist
    from accelerate.state import PartialState

    from trl_doctor.capture import world

    names = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")
    before = {n: os.environ.get(n) for n in names}
    threads = torch.get_num_threads()
    with world.rank_zero_of(4, 4, has_cuda=False) as why_not:
        assert why_not is None
        assert dist.is_initialized() and dist.get_world_size() == 4 and dist.get_rank() == 0
        assert os.environ["WORLD_SIZE"] == "4" and os.environ["LOCAL_RANK"] == "0"
        dist.init_process_group(backend="gloo")  # a script's own start of the group: the stand-in serves it
        state = PartialState(cpu=True)
        assert state.num_processes == 4 and state.process_index == 0
    assert not dist.is_initialized()
    assert {n: os.environ.get(n) for n in names} == before
    assert torch.get_num_threads() == threads
    assert PartialState().num_processes == 1
    with world.rank_zero_of(1, 1, has_cuda=False) as why_not:  # one process: nothing to stand in for
        assert why_not is None and not dist.is_initialized()
