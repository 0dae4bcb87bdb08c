"""LoRA under FSDP2 with FULL_STATE_DICT on accelerate < 1.15 (issue 60): the checkpoint keeps rank 0's shard of each
adapter tensor only (huggingface/accelerate#4206: "On N GPUs, resuming reverts (N-1)/N of the adapter to its init";
transformers' Trainer always saves this way). The ground truth is accelerate's own state-dict function, the one
`save_fsdp_model` writes from, on two CPU processes (gloo) with torch's FSDP2 `fully_shard` and a PEFT model, under
accelerate 1.14.0 (from PyPI, into a cache folder) and the installed release; then the doctor's save-outputs on the
same setup as a launch config, under each."""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import pytest

from conftest import FIXTURES, pypi_release, result_of, run_doctor
from truths import truth_run

# the accelerate releases are the test's own (1.14.0 from PyPI, the installed one); no TRL or transformers release
# changes the outcome: the default lane runs it
pytestmark = [pytest.mark.slow, pytest.mark.release_free]

OLD = "1.14.0"

STATE_DICT = r"""
import json, sys
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions
from torch.distributed.fsdp import fully_shard
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
import accelerate
from accelerate.utils import fsdp_utils

dist.init_process_group("gloo")
model = get_peft_model(AutoModelForCausalLM.from_pretrained(sys.argv[1]),
                       LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
for layer in model.base_model.model.model.layers:
    fully_shard(layer)
fully_shard(model)
rows = {n: p.shape[0] for n, p in model.named_parameters() if "lora_A" in n}
# what save_fsdp_model asks for with FULL_STATE_DICT (_prepare_sd_options), as the Trainer calls it (adapter_only)
state = fsdp_utils._get_model_state_dict(model, adapter_only=True,
                                         sd_options=StateDictOptions(full_state_dict=True, cpu_offload=True))
if dist.get_rank() == 0:
    name = next(k for k in state if "lora_A" in k)
    value = state[name]
    saved = value.to_local() if hasattr(value, "to_local") else value
    print(json.dumps({"accelerate": accelerate.__version__, "saved_rows": saved.shape[0], "rows": max(rows.values())}))
dist.destroy_process_group()
"""


def _ground_truth(tmp_path, env: dict) -> dict:
    script = tmp_path / "state_dict.py"
    script.write_text(STATE_DICT)
    proc = truth_run(f"fsdp2_adapter/state-dict-{'old' if env else 'installed'}",  # recorded: tests/truths.py
                     [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script),
                      str(FIXTURES / "models" / "qwen2-chat")], tmp_path, env={"OMP_NUM_THREADS": "1", **env},
                     given={"state_dict.py": STATE_DICT}, tmp=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(tmp_path, env: dict | None) -> dict:
    (tmp_path / "fsdp2.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
        "  fsdp_state_dict_type: FULL_STATE_DICT\n  fsdp_reshard_after_forward: true\n"
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\nmixed_precision: bf16\nnum_machines: 1\nnum_processes: 2\n")
    (tmp_path / "recipe.yaml").write_text(
        f"model_name_or_path: {FIXTURES / 'models' / 'qwen2-chat'}\ndataset_path: {FIXTURES / 'data' / 'chat.jsonl'}\n"
        "reward_funcs: [trl.rewards.think_format_reward]\nuse_peft: true\nlora_r: 8\nnum_generations: 4\n"
        "per_device_train_batch_size: 4\nmax_completion_length: 16\naccelerate_config: fsdp2.yaml\n")
    proc = run_doctor("check", str(tmp_path / "recipe.yaml"), "--no-smoke", "--select", "save-outputs",
                      "--target", "2xH100-80GB", "--target-env", "this", "--format", "json", cwd=tmp_path, env=env or {})
    return result_of(json.loads(proc.stdout), "save-outputs")


def test_accelerate_before_1_15_saves_rank_0s_shard_and_the_doctor_says_so(built_fixtures, tmp_path):
    old = pypi_release("accelerate", OLD)
    truth = _ground_truth(tmp_path, old)
    assert truth["accelerate"] == OLD
    assert truth["saved_rows"] == truth["rows"] // 2, truth  # rank 0's half of lora_A: the other rank's is lost
    r = _check(tmp_path, old)
    assert r["status"] == "fail", r
    assert f"accelerate {OLD} saves an FSDP2 model's adapter" in r["message"] and "#4206" in r["message"], r["message"]
    assert "1/2 of the adapter back to its initial values" in r["message"], r["message"]


def test_accelerate_1_15_gathers_the_adapter_and_the_doctor_passes(built_fixtures, tmp_path):
    installed = version("accelerate")
    if tuple(int(x) for x in installed.split(".")[:2]) < (1, 15):
        pytest.skip(f"the installed accelerate {installed} predates the fix (the other test judges it)")
    truth = _ground_truth(tmp_path, {})
    assert truth["saved_rows"] == truth["rows"], truth  # the whole tensor
    r = _check(tmp_path, None)
    assert r["status"] == "pass", r
