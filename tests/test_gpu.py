"""The GPU lane (marker `gpu`; skipped where torch sees no CUDA GPU, so never in CI): the doctor's GPU path on a real
GPU, through the real command. benchmarks/gpu_session.sh runs them on a GPU machine with the benchmarks.

- the real model in the smoke step on cuda (a Qwen2.5-0.5B-shaped checkpoint with random bf16 weights, LoRA): it
  passes, and its peak stays near the model's own weights: the parameter snapshot adds no copy (issue 22 item 1);
- the real-model sample on cuda: one batched generate of every prompt × generation;
- gpu-capacity reads this machine's GPUs through the real NVML;
- precision-and-attention judges flash_attention_2 as this environment meets it (installed, importable, GPU).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, result_of, run_json

pytestmark = pytest.mark.gpu

QWEN05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
               intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def real_size_model(tmp_path_factory, built_fixtures):
    """A Qwen2.5-0.5B-shaped checkpoint with random bf16 weights, built on the GPU (the fixture tokenizer's 320 ids
    fall inside its vocabulary)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    folder = tmp_path_factory.mktemp("qwen2.5-0.5b-random")
    tok = AutoTokenizer.from_pretrained(FIXTURES / "models" / "qwen2-chat")
    config = Qwen2Config(**QWEN05B, max_position_embeddings=4096, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    return folder


def _config(tmp_path, model, **extra) -> str:
    keys = {"model_name_or_path": str(model), "dataset_path": str(FIXTURES / "data" / "chat.jsonl"),
            "reward_funcs": ["trl.rewards.think_format_reward"], "dtype": "bfloat16", "bf16": True, "use_peft": True,
            "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 32, **extra}
    path = tmp_path / "gpu.yaml"
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in keys.items()))
    return str(path)


@pytest.mark.slow
def test_real_model_step_on_cuda_adds_no_copy_of_the_model(tmp_path, real_size_model):
    # a reward that can spread among a group's completions (their lengths): random weights never write a think
    # format, so think_format_reward gives every completion 0, no advantage and no update (TRL 1.x's beta is 0)
    shutil.copy(FIXTURES / "smoke-step" / "rewards.py", tmp_path / "rewards.py")
    config = _config(tmp_path, real_size_model, reward_funcs=["rewards.length_reward"])
    code, report = run_json("check", config, "--select", "smoke-step", "--device", "cuda", "--sample", "0")
    r = result_of(report, "smoke-step")
    assert r["status"] == "pass", r
    assert r["details"]["model"].startswith("the real model"), r["details"]
    weights_mb = 494_032_768 * 2 / 2**20  # the frozen bf16 base: 942 MiB
    # the old snapshot cloned every parameter on the device: the peak was at least twice the weights
    assert r["details"]["peak GPU MB"] < 1.4 * weights_mb, r["details"]
    # the step updates the adapter, or says why it could not: random weights often give a group identical rewards
    # (the H100 run of 2026-11-26: 8-token completions, every group's rewards equal), and then no gradient flows
    updated = r["details"]["updated tensors"].split("/")[0] != "0"
    assert updated or "identical rewards" in r["message"], (r["message"], r["details"])


@pytest.mark.slow
def test_real_model_sample_on_cuda(tmp_path, real_size_model):
    code, report = run_json("check", _config(tmp_path, real_size_model), "--select", "smoke-step", "--device", "cuda",
                            "--sample", "2")
    r = result_of(report, "smoke-step")
    assert r["status"] in ("pass", "warn"), r  # random weights never stop: the sample may warn, truthfully
    sample = r["details"]["real-model sample"]
    assert "bfloat16, cuda): 2 prompt(s) x 4 completions" in sample, sample
    assert "/8 ran to max_completion_length 32" in r["details"]["real-model completions"]


def test_gpu_capacity_reads_this_machines_gpus_through_nvml(tmp_path, built_fixtures):
    import torch

    code, report = run_json("check", _config(tmp_path, FIXTURES / "models" / "qwen2-chat"), "--select", "gpu-capacity",
                            "--no-smoke")
    r = result_of(report, "gpu-capacity")
    assert r["status"] in ("pass", "warn"), r
    name = torch.cuda.get_device_name(0)
    assert any(name in g for g in r["details"]["GPUs"]), r["details"]["GPUs"]
    assert r["details"]["driver"] and "compute capability" in r["details"]["GPUs"][0]


def test_flash_attention_2_is_judged_as_this_environment_meets_it(tmp_path, real_size_model):
    config = _config(tmp_path, real_size_model, attn_implementation="flash_attention_2")
    code, report = run_json("check", config, "--select", "precision-and-attention", "--no-smoke")
    r = result_of(report, "precision-and-attention")
    imports = subprocess.run([sys.executable, "-c", "import flash_attn"], capture_output=True).returncode == 0
    if imports:
        assert r["status"] == "pass" and "FlashAttention2 (flash-attn" in r["message"], r
    else:
        assert r["status"] in ("fail", "warn"), r  # warn: transformers' Hub-kernel fallback through `kernels`
        assert "not installed" in r["message"] or "does not import" in r["message"], r


def _imports(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def test_async_grpo_setup_judges_this_gpu_as_trls_own_run_meets_it(built_fixtures):
    """Issue 46, item 3, on the launch machine itself: TD023 reads this GPU through NVML (FlashAttention-3 needs
    compute capability 8.x or 9.0) and this environment's packages, and TRL's own example, run here on the GPU,
    stops where the doctor says it will (AsyncRolloutWorker's ImportError when vLLM is missing)."""
    import torch

    from trl_doctor.facts.trl.installed import trl_root

    root = trl_root()
    if root is None or not (root / "experimental" / "async_grpo" / "async_grpo_trainer.py").is_file():
        pytest.skip("the installed TRL has no AsyncGRPOTrainer (trl >= 1.10)")
    launch = FIXTURES / "launch"
    proc = subprocess.run([sys.executable, "-m", "trl_doctor", "check", "--no-smoke", "--select", "async-grpo-setup",
                           "--format", "json", "--", "python", "async_grpo_example.py"], cwd=launch,
                          capture_output=True, text=True, timeout=600)
    assert proc.stdout, proc.stderr
    found = [x for x in json.loads(proc.stdout)["results"] if x["rule"] == "async-grpo-setup"]
    r = found[0]
    said = " ".join([x["message"] for x in found] + [a for x in found for a in x["details"].get("also", [])])
    name = torch.cuda.get_device_name(0)
    major, _ = torch.cuda.get_device_capability(0)
    has_vllm, has_kernels = _imports("vllm") and _imports("aiohttp"), _imports("kernels")
    print("TD023 on", name, json.dumps(found, indent=1))
    if 8 <= major <= 9:
        assert name in r["details"].get("attention", ""), r["details"]
    elif major < 8:
        assert "older" in said, said
    assert ("vllm is not installed" in said) == (not has_vllm), said
    assert ("`kernels` is not installed" in said) == (not has_kernels), said
    # TRL's own run of the same script on this GPU: where the doctor fails it for vLLM, TRL stops at construction
    truth = subprocess.run([sys.executable, "async_grpo_example.py"], cwd=launch, capture_output=True, text=True,
                           timeout=600)
    print("TRL's own run: exit", truth.returncode, truth.stderr[-1500:])
    if not has_vllm:  # the same cause: the ImportError the doctor quotes is the one TRL's run stops at
        # (the H100 run of 2026-11-26 found the doctor quoting the rollout worker's, which TRL builds second)
        quoted = re.search(r'"ImportError: ([^"]+)"', said).group(1)
        assert truth.returncode != 0 and f"ImportError: {quoted}" in truth.stderr, (quoted, truth.stderr)
