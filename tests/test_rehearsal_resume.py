"""The rehearsal's resume holds one copy of the optimizer's states, as a restarted job does (issue 63's GPU run:
the doctor's check of a 1.5B full fine-tune peaked at 35.7 GiB of GPU memory where the job itself took 17.1; the
resume loaded the checkpoint's AdamW moments beside the live ones). In-process, on the CPU, with TRL's real
GRPOTrainer on the fixture model: the live states are dropped before the resume, and the resume still restores the
checkpoint's (the step count goes on from it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import FIXTURES


def test_drop_optimizer_state_empties_the_wrapped_torch_optimizer():
    import torch
    from accelerate import Accelerator

    from trl_doctor.facts.trainer_run.rehearsal import drop_optimizer_state

    layer = torch.nn.Linear(4, 4)
    optimizer = Accelerator(cpu=True).prepare(torch.optim.AdamW(layer.parameters()))  # as the Trainer holds it
    layer(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    assert len(optimizer.optimizer.state) == 2  # weight and bias: exp_avg, exp_avg_sq, step each
    drop_optimizer_state(SimpleNamespace(optimizer=optimizer))
    assert len(optimizer.optimizer.state) == 0


@pytest.mark.slow
def test_the_resume_restores_the_checkpoints_states_after_dropping_the_live_ones(built_fixtures, tmp_path):
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    from trl_doctor.facts.trainer_run.rehearsal import rehearse

    data = load_dataset("json", data_files=str(FIXTURES / "data" / "chat.jsonl"), split="train")
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], max_steps=1,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=8, save_steps=500)
    trainer = GRPOTrainer(model=str(FIXTURES / "models" / "qwen2-chat"), args=args, train_dataset=data,
                          reward_funcs=lambda completions, **kw: [float(len(str(c))) for c in completions])
    trainer.train()
    phases = rehearse(trainer, SimpleNamespace(rehearse={"save_strategy": "steps"}))
    assert [(p["phase"], p["ok"]) for p in phases] == [("checkpoint", True), ("resume", True), ("final save", True)], \
        phases
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    steps = {float(s["step"]) for s in inner.state.values()}
    # the checkpoint's step 1, then the resume's own step: 2 (a fresh optimizer with nothing loaded would say 1)
    assert steps == {2.0}, steps


FULL_DISK = r"""
import json, sys
from types import SimpleNamespace
from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer
from trl_doctor.facts.trainer_run.rehearsal import rehearse

model, data, out = sys.argv[1:4]
args = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to=[], max_steps=1, per_device_train_batch_size=4,
                  num_generations=4, max_completion_length=8, save_strategy="no")  # the rehearsal saves, not the step
trainer = GRPOTrainer(model=model, args=args, train_dataset=load_dataset("json", data_files=data, split="train"),
                      reward_funcs=lambda completions, **kw: [float(len(str(c))) for c in completions])
trainer.train()
print(json.dumps(rehearse(trainer, SimpleNamespace(rehearse={"save_strategy": "steps"}))))
"""


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare") or sys.platform != "linux", reason="needs util-linux's unshare")
def test_a_full_scratch_folder_is_no_verdict_on_the_jobs_checkpoints(built_fixtures, tmp_path):
    """The real model's checkpoint on a GPU machine can fill a small /tmp, where the check's folder is: that is the
    doctor's disk, not the job's (run-phases judges output_dir's). The trainer's output_dir on a 64 KiB tmpfs (a mount
    namespace of the test's own): the checkpoint and final save are 'not rehearsed', with why, never a failure."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("user namespaces are not allowed here")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "full.py"
    script.write_text(FULL_DISK)
    run = (f"mount -t tmpfs -o size=64k tmpfs {disk} && exec {sys.executable} {script} "
           f"{FIXTURES / 'models' / 'qwen2-chat'} {FIXTURES / 'data' / 'chat.jsonl'} {disk / 'out'}")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", run], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    phases = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [(p["phase"], p["ok"]) for p in phases] == [("checkpoint", None), ("final save", None)], phases
    assert all("ran out of space" in p["why"] for p in phases), phases
