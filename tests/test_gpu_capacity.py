"""TD008 gpu-capacity and the shared memory estimate (trl_doctor/facts/memory/estimate.py).

The estimate is checked against arithmetic done by hand on real model configs (Qwen2.5-0.5B, Llama-3-8B,
Llama-3-70B, written into fixtures/gpu-capacity/models/ as config.json only); the rule runs through the real
command, against fake GPUs (tests/fake_nvml, a pynvml stand-in at the NVML boundary) where CI has none, and
against the real NVML where there is a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, check_here, result_of, run_json
from trl_doctor.context.config import load_config
from trl_doctor.context.context import Context, Options
from trl_doctor.facts.launch.launcher import gpus, torch_cuda_version, visible_gpus
from trl_doctor.facts.memory.plan import (
    CUDA_CONTEXT_BYTES, GiB, Plan, count_params, estimate, lora_adapter_params, plan_from_context, policy_dtype,
    seq_classifier_params,
)
from trl_doctor.rules.gpu_capacity import driver_cuda_problem

HERE = FIXTURES / "gpu-capacity"
MODELS = HERE / "models"
FAKE_NVML = Path(__file__).resolve().parent / "fake_nvml"

# Parameter counts worked out by hand from each config.json (head_dim = hidden / heads):
# Qwen2.5-0.5B: per layer q 896·896+896 = 803,712, k and v 896·128+128 = 114,816 each, o 896·896 = 802,816,
#   MLP 3·896·4864 = 13,074,432, two norms 1,792: 14,912,384; × 24 = 357,897,216; embedding 151,936·896 =
#   136,134,656 (tied with the LM head); final norm 896.
QWEN_05B = 494_032_768
# Llama-3-8B: per layer q and o 4096² = 16,777,216 each, k and v 4096·1024 = 4,194,304 each, MLP 3·4096·14336 =
#   176,160,768, norms 8,192: 218,112,000; × 32 = 6,979,584,000; embedding and LM head 2·128,256·4096 =
#   1,050,673,152 (untied); final norm 4,096.
LLAMA_8B = 8_030_261_248
# Llama-3-70B: per layer q and o 8192² each, k and v 8192·1024 each, MLP 3·8192·28672 = 704,643,072, norms 16,384:
#   855,654,400; × 80 = 68,452,352,000; embedding and LM head 2·128,256·8192 = 2,101,346,304; final norm 8,192.
LLAMA_70B = 70_553_706_496
# The Qwen2.5-0.5B reward model: the backbone (494,032,768 without an LM head of its own) + score 896 → 1.
QWEN_05B_REWARD = 494_033_664


def context(tmp_path: Path, **keys) -> Context:
    """A check context for a config written with these keys (model paths relative to the fixtures)."""
    lines = [f"{k}: {json.dumps(v)}" for k, v in keys.items()]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    return Context(load_config(cfg), Options(smoke=False))


def fake_env(spec: dict | Path) -> dict:
    text = str(spec) if isinstance(spec, Path) else json.dumps(spec)
    path = os.pathsep.join(p for p in (str(FAKE_NVML), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "TRL_DOCTOR_FAKE_GPUS": text}


def gpu(name="NVIDIA A100-SXM4-80GB", total=81920, free=81050, cc="8.0", processes=0) -> dict:
    return {"name": name, "total_mib": total, "free_mib": free, "compute_capability": cc, "processes": processes}


def check_with(config: Path, spec: dict | Path) -> tuple[int, dict]:
    code, report = check_here(str(config), "--select", "gpu-capacity", "--no-smoke",
                              gpus=spec if isinstance(spec, Path) else json.dumps(spec))
    return code, result_of(report, "TD008")


# -- the model sizes -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("folder, params", [("qwen2.5-0.5b", QWEN_05B), ("llama-3-8b", LLAMA_8B),
                                            ("llama-3-70b", LLAMA_70B)])
def test_meta_model_parameter_count_is_the_hand_count(tmp_path, folder, params):
    with context(tmp_path, model_name_or_path=str(MODELS / folder)) as ctx:
        assert count_params(ctx.meta_model) == params


def test_reward_model_parameter_count(tmp_path):
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b")) as ctx:
        assert seq_classifier_params(ctx, MODELS / "qwen2.5-0.5b-reward") == QWEN_05B_REWARD


def test_lora_adapter_counts(tmp_path):
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b")) as ctx:
        model = ctx.meta_model
        # r·(in + out): q 16·(896+896) = 28,672, v 16·(896+128) = 16,384 → 45,056 per layer × 24
        count, names = lora_adapter_params(model, 16, ["q_proj", "v_proj"])
        assert count == 1_081_344 and len(names) == 48
        # all-linear leaves the LM head out: q 14,336 + k 8,192 + v 8,192 + o 14,336 + gate, up, down 46,080 each
        # = 183,296 per layer at r 8, × 24
        assert lora_adapter_params(model, 8, "all-linear")[0] == 4_399_104
        # DoRA adds one magnitude per output feature: (896 + 128) per layer × 24 = 24,576
        assert lora_adapter_params(model, 16, ["q_proj", "v_proj"], use_dora=True)[0] == 1_081_344 + 24_576
    with context(tmp_path, model_name_or_path=str(MODELS / "llama-3-8b")) as ctx:
        # q and o 16·8192 = 131,072 each, k and v 16·5120 = 81,920 each → 425,984 per layer × 32
        assert lora_adapter_params(ctx.meta_model, 16, ["q_proj", "k_proj", "v_proj", "o_proj"])[0] == 13_631_488


# -- the arithmetic, on plain numbers ------------------------------------------------------------------------

LLAMA_8B_DIMS = dict(hidden_size=4096, num_layers=32, intermediate_size=14336, kv_dim=1024, num_heads=32,
                     vocab_size=128256)


def test_estimate_full_fine_tune_in_bf16_by_hand():
    plan = Plan(policy_params=LLAMA_8B, param_bytes=2, optimizer="adamw_torch", batch_size=1, seq_len=1024,
                logits_positions=513, activation_bytes=2, gradient_checkpointing=False, generation_batch=0,
                overhead_bytes=CUDA_CONTEXT_BYTES, **LLAMA_8B_DIMS)
    est = estimate(plan)
    assert est.component("policy weights").bytes == 16_060_522_496  # 8,030,261,248 × 2
    assert est.component("gradients").bytes == 16_060_522_496
    assert est.component("AdamW states").bytes == 32_121_044_992  # 2 states × 2 bytes
    # (6·4096 + 2·1024 + 4·14336 + 4·4096: the RMSNorms' fp32 copies) = 100,352 values × 32 layers × 1,024 tokens
    # × 2 bytes
    assert est.component("activations").bytes == 6_576_668_672
    # 3 × 1 × 513 × 128,256 × 4 bytes: the fp32 logits, their gradient and the gradient of TRL's slice
    assert est.component("logits").bytes == 789_543_936
    assert est.component("CUDA context").bytes == CUDA_CONTEXT_BYTES == 1280 * 2**20  # measured: docs/gpu-verdicts.json
    # one micro-batch per optimizer step: the gradients (16.1 GB at the optimizer step) and the activations + logits
    # (7.4 GB at the start of backward) are never held together, so the larger of the two counts
    assert est.total_bytes == (16_060_522_496 + 32_121_044_992 + max(16_060_522_496, 6_576_668_672 + 789_543_936)
                               + CUDA_CONTEXT_BYTES)
    assert est.peak_phase == "training"
    assert f"{est.total_gib:.1f}" == "61.1"
    # with gradient accumulation the gradients live on through the next micro-batches: the sum
    accumulated = estimate(Plan(**{**plan.__dict__, "gradient_accumulation_steps": 4}))
    assert accumulated.total_bytes == (16_060_522_496 * 2 + 32_121_044_992 + 6_576_668_672 + 789_543_936
                                       + CUDA_CONTEXT_BYTES)
    assert f"{accumulated.total_gib:.1f}" == "67.9"

    # gradient checkpointing keeps each layer's input (4,096) and one layer's 100,352 values
    ckpt = estimate(Plan(**{**plan.__dict__, "gradient_checkpointing": True}))
    assert ckpt.component("activations").bytes == 1024 * (32 * 4096 + 100_352) * 2 == 473_956_352


def test_estimate_fp32_default_load_is_16_bytes_per_parameter():
    est = estimate(Plan(policy_params=LLAMA_8B, param_bytes=4, optimizer="adamw_torch_fused", **LLAMA_8B_DIMS))
    states = sum(est.component(n).bytes for n in ("policy weights", "gradients", "AdamW states"))
    assert states == 16 * LLAMA_8B == 128_484_179_968  # 119.7 GiB before any activation


def test_estimate_lora_reward_vllm_and_fused_head():
    plan = Plan(policy_params=LLAMA_8B, param_bytes=2, peft_params=13_631_488, reference=False,
                reward_params=(QWEN_05B_REWARD,), reward_bytes=2, optimizer="adamw_torch", batch_size=8,
                seq_len=1024, logits_positions=512, fused_lm_head=True, logits_tile=(4096, 32768),
                activation_bytes=2, gradient_checkpointing=True, vllm_gpu_memory_utilization=0.3,
                overhead_bytes=0, **LLAMA_8B_DIMS)
    est = estimate(plan, gpu_total_bytes=80 * GiB)
    assert est.component("LoRA adapters").bytes == 54_525_952  # 13,631,488 × 4 (fp32)
    assert est.component("gradients").bytes == 54_525_952
    assert est.component("AdamW states").bytes == 109_051_904  # two fp32 states
    assert "reference model" not in [c.name for c in est.components]
    assert est.component("policy weights").bytes == 16_060_522_496  # the frozen bf16 base
    assert est.component("reward models").bytes == 988_067_328  # 494,033,664 × 2
    assert est.component("vLLM share").bytes == 25_769_803_776  # 0.3 × 80 GiB
    # fused head: one 4096 × 32768 tile × 2 bytes + fp32 hidden-state gradients of 8 × 512 tokens × 4096;
    # the frozen LM head gets no gradient with LoRA
    assert est.component("logits").bytes == 4096 * 32768 * 2 + 4096 * 4096 * 4 == 335_544_320


def test_estimate_reference_copy_and_generation_peak():
    plan = Plan(policy_params=QWEN_05B, param_bytes=2, reference=True, batch_size=1, seq_len=64, logits_positions=33,
                generation_batch=2048, hidden_size=896, num_layers=24, intermediate_size=4864, kv_dim=128,
                num_heads=14, vocab_size=151936, activation_bytes=2)
    est = estimate(plan)
    assert est.component("reference model").bytes == 988_065_536  # 494,032,768 × 2, the policy's size
    kv = est.component("KV cache (generation)").bytes
    assert kv == 2048 * 64 * 24 * 2 * 128 * 2 == 1_610_612_736  # more than gradients + activations
    assert est.peak_phase == "generation"
    resident = sum(c.bytes for c in est.components if c.phase == "resident")
    assert est.total_bytes == resident + kv


def test_optimizer_states_follow_the_optimizer():
    base = dict(policy_params=1_000_000, param_bytes=4, **LLAMA_8B_DIMS)
    assert estimate(Plan(**base, optimizer="adamw_8bit")).component("AdamW states").bytes == 2_000_000
    assert estimate(Plan(**base, optimizer="paged_adamw_32bit")).component("AdamW states").bytes == 8_000_000
    assert estimate(Plan(**base, optimizer="sgd")).component("optimizer states").bytes == 0
    assert estimate(Plan(**{**base, "param_bytes": 2}, optimizer="adamw_torch")).component("AdamW states").bytes == 4_000_000


def test_quantized_base_weights():
    plan = Plan(policy_params=1_000, param_bytes=2, quantized_params=800, quantized_bytes=0.5625, peft_params=10,
                **LLAMA_8B_DIMS)
    assert estimate(plan).component("policy weights").bytes == 200 * 2 + 450  # 800 × (0.5 + 4/64)


# -- filling the plan from a config -------------------------------------------------------------------------

def test_plan_from_context_matches_the_hand_estimate(tmp_path):
    from trl_doctor.facts.trl.installed import trainer_source

    keys = dict(model_name_or_path=str(MODELS / "qwen2.5-0.5b"), model_init_kwargs={"dtype": "float32"}, bf16=True,
                per_device_train_batch_size=8, num_generations=8, max_prompt_length=512, max_completion_length=512,
                gradient_checkpointing=True, gradient_accumulation_steps=1, beta=0.04, optim="adamw_torch")
    with context(tmp_path, **keys) as ctx:
        plan = plan_from_context(ctx)
    assert (plan.policy_params, plan.param_bytes, plan.activation_bytes) == (QWEN_05B, 4, 2.0)
    assert (plan.hidden_size, plan.num_layers, plan.intermediate_size, plan.kv_dim, plan.vocab_size) == (
        896, 24, 4864, 128, 151936)
    assert plan.reference and plan.batch_size == 8 and plan.seq_len == 1024 and plan.generation_batch == 8
    est = estimate(plan)
    weights = 1_976_131_072  # 494,032,768 × 4
    assert est.component("policy weights").bytes == weights
    assert est.component("gradients").bytes == weights
    assert est.component("AdamW states").bytes == 2 * weights
    assert est.component("reference model").bytes == weights
    # 8 × 1,024 tokens × (24 × 896 + 6·896 + 2·128 + 4·4864 + 4·896, the RMSNorms' fp32 copies = 50,176) × 2 bytes
    assert est.component("activations").bytes == 822_083_584
    assert est.component("KV cache (generation)").bytes == 8 * 1024 * 24 * 2 * 128 * 2 == 100_663_296
    fused = "fused_lm_head=True" in trainer_source("grpo")[1]
    assert plan.fused_lm_head == fused
    if fused:  # TRL 1.x: one 4096 × 32768 tile in bf16, fp32 grads of 4,096 hidden states and of the tied head
        logits = 4096 * 32768 * 2 + 4096 * 896 * 4 + 151936 * 896 * 4
        assert logits == 827_654_144
    else:  # the logits tensor, for the completion (+1) or, where the model ignores logits_to_keep, the sequence
        assert plan.logits_positions in (513, 1024)
        logits = 3 * 8 * plan.logits_positions * 151936 * 4  # fp32 (bf16: accelerate's outputs), 3 copies
    assert est.component("logits").bytes == logits
    # resident: weights, two AdamW states, the reference copy, the CUDA context; the step (gradient_accumulation_steps
    # 1): the larger of the gradients and the activations + logits
    assert est.total_bytes == 4 * weights + CUDA_CONTEXT_BYTES + max(weights, 822_083_584 + logits)


@pytest.mark.parametrize("cap, tokens, said", [
    (None, "longest", "the dataset's longest prompt"),  # every row measured: a bound, whatever the default
    (512, "longest", "the dataset's longest prompt"),  # a cap above the longest prompt truncates nothing
    (8, 8, None),  # a cap below it: the cap
])
def test_prompt_tokens_are_the_datasets_longest_prompt_when_every_row_is_measured(tmp_path, cap, tokens, said):
    """The H100 run's +21% (docs/gpu-verdicts.json): TRL 0.15's launch, 36-token prompts, estimated at its 512-token
    max_prompt_length. A batch is padded to its longest prompt, so the dataset's longest bounds every batch."""
    from trl_doctor.facts.inputs.chat import prompt_lengths

    keys = dict(model_name_or_path=str(FIXTURES / "models" / "qwen2-chat"),
                dataset_path=str(FIXTURES / "data" / "chat_many.jsonl"),
                max_completion_length=256, **({"max_prompt_length": cap} if cap else {}))
    with context(tmp_path, **keys) as ctx:
        plan = plan_from_context(ctx)
        measured = prompt_lengths(ctx)
    assert measured["total"] == len(measured["indices"]) == 512 and 20 < measured["max"] < 100
    assert plan.seq_len == (measured["max"] if tokens == "longest" else tokens) + 256
    notes = [n for n in plan.notes if n.startswith("prompt tokens")]
    assert (notes[0].startswith(f"prompt tokens: {said}") and "all 512 rows" in notes[0]) if said else not notes
    assert not any("assumed 512" in n for n in plan.notes)


@pytest.mark.parametrize("dataset", [None, "chat_many.jsonl"])
def test_prompt_tokens_without_a_dataset_or_a_tokenizer_are_the_cap_or_the_default(tmp_path, dataset):
    """A model folder with no tokenizer (the configs of this rule's fixtures) measures no prompt: the estimate is
    made as before, never a stop for the estimate's sake."""
    keys = dict(model_name_or_path=str(MODELS / "qwen2.5-0.5b"), max_completion_length=256)
    if dataset:
        keys["dataset_path"] = str(FIXTURES / "data" / dataset)
    with context(tmp_path, **keys) as ctx:
        plan = plan_from_context(ctx)
    # 512: TRL < 0.28's max_prompt_length default, or the default assumed (said so) where TRL truncates nothing
    assert plan.seq_len == 512 + 256 and not any(n.startswith("prompt tokens:") for n in plan.notes)
    with context(tmp_path, **keys, max_prompt_length=300) as ctx:
        assert plan_from_context(ctx).seq_len == 300 + 256


def test_plan_reads_peft_reward_model_and_vllm(tmp_path):
    keys = dict(model_name_or_path=str(MODELS / "llama-3-8b"), reward_model_name_or_path=str(MODELS / "qwen2.5-0.5b-reward"),
                model_init_kwargs={"dtype": "bfloat16"}, use_peft=True, lora_r=16,
                lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], beta=0.04, use_vllm=True,
                vllm_mode="colocate", vllm_gpu_memory_utilization=0.25)
    with context(tmp_path, **keys) as ctx:
        plan = plan_from_context(ctx)
    assert plan.param_bytes == 2 and plan.peft_params == 13_631_488
    assert plan.reference is False  # beta != 0 with PEFT: the adapter is disabled instead of copying the model
    assert plan.reward_params == (QWEN_05B_REWARD,)
    assert plan.vllm_gpu_memory_utilization == 0.25 and plan.generation_batch == 0


def test_policy_dtype(tmp_path):
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b")) as ctx:
        assert policy_dtype(ctx)[0] == "float32"  # TRL's default when no dtype is given (C10)
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b"), model_init_kwargs={"dtype": "auto"}) as ctx:
        dtype, where = policy_dtype(ctx)
        assert dtype == "bfloat16" and "config.json" in where  # the checkpoint's torch_dtype


def test_settings_fact_resolves_as_the_installed_trl(tmp_path):
    """The Settings fact: one answer per check, the values the trainer sees (TRL's defaults included), the same as
    the generic accessor gives."""
    from trl_doctor.facts.trl.parsing import parse_as_trl
    from trl_doctor.facts.launch.settings import config_value, field_value, settings

    # a JSON string where TRL's parser takes one (transformers 5's HfArgumentParser decodes it), else a mapping
    as_json = '{"dtype": "auto"}'
    refused = "model_init_kwargs" in parse_as_trl("grpo", {"model_init_kwargs": as_json}).errors
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b"), fp16=True, max_completion_length=64,
                 model_init_kwargs={"dtype": "auto"} if refused else as_json, use_vllm=True) as ctx:
        s = settings(ctx)
        assert settings(ctx) is s
        assert (s.bf16, s.fp16) == (False, True)  # bf16's default None resolves to `not fp16` (TRL >= 0.19)
        assert (s.policy_dtype, s.policy_dtype_from) == policy_dtype(ctx) and s.policy_dtype == "bfloat16"
        assert s.model_init_kwargs == {"dtype": "auto"}  # a JSON string decoded, where TRL takes one
        assert s.max_completion_length == 64 and s.completion_key == "max_completion_length"
        assert s.per_device_train_batch_size == config_value(ctx, "per_device_train_batch_size")
        assert s.num_generations == config_value(ctx, "num_generations") and s.use_vllm is True
        assert s.vllm_mode == config_value(ctx, "vllm_mode") and s.config_class == "GRPOConfig"
        assert "max_completion_length" in s.fields and field_value(ctx, "max_completion_length") == (64, True)
        assert field_value(ctx, "not_a_trl_key") == (None, False)


# -- pure pieces of the rule ---------------------------------------------------------------------------------

def test_driver_cuda_against_torch_cuda():
    status, message = driver_cuda_problem("11.8", "12.4")
    assert status == "fail" and "CUDA 11.8" in message and "CUDA 12.4" in message and "too old" in message
    status, message = driver_cuda_problem("12.2", "12.8")
    assert status == "warn" and "minor-version compatibility" in message
    assert driver_cuda_problem("12.8", "12.8") is None
    assert driver_cuda_problem("13.0", "12.8") is None
    assert driver_cuda_problem("12.2", None) is None  # a CPU build of torch: nothing to compare


def test_cuda_visible_devices():
    found = [{"index": i, "uuid": f"GPU-{i}abc"} for i in range(4)]
    assert visible_gpus(found, None) == (found, None)
    assert [g["index"] for g in visible_gpus(found, "2,0")[0]] == [2, 0]
    assert [g["index"] for g in visible_gpus(found, "1,7,2")[0]] == [1]  # CUDA stops at the first bad entry
    assert visible_gpus(found, "")[0] == []
    assert [g["index"] for g in visible_gpus(found, "GPU-3")[0]] == [3]
    kept, note = visible_gpus(found, "MIG-1234")
    assert kept == found and "not applied" in note


# -- the fake NVML layer and the real one ----------------------------------------------------------------------

def test_fake_nvml_answers_like_pynvml():
    spec = {"driver": "535.104.05", "cuda_driver": "12.2", "gpus": [gpu(free=40000, processes=2)]}
    code = "import json; from trl_doctor.facts.launch.launcher import gpus; print(json.dumps(gpus()))"
    env = {**os.environ, **fake_env(spec)}
    found, why = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                           check=True).stdout)
    assert why is None
    assert found == [{
        "index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_free_mib": 40000,
        "memory_used_mib": 41920, "memory_total_bytes": 81920 * 2**20, "memory_free_bytes": 40000 * 2**20,
        "compute_capability": "8.0", "driver": "535.104.05", "driver_cuda": "12.2",
        "uuid": "GPU-00000000-0000-0000-0000-000000000000", "processes": 2,
    }]
    env = {**os.environ, **fake_env({"error": "driver_not_loaded"})}
    found, why = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                           check=True).stdout)
    assert found == [] and why == "no NVIDIA driver (NVMLError_DriverNotLoaded: Driver Not Loaded)"


@pytest.mark.skipif(not gpus()[0], reason="no GPU: NVML (the real pynvml) reports none on this machine")
def test_real_nvml_and_the_rule_on_a_real_gpu(built_fixtures):
    found, _ = gpus()
    for g in found:
        assert 0 < g["memory_free_bytes"] <= g["memory_total_bytes"]
        assert g["memory_total_mib"] == g["memory_total_bytes"] // 2**20
        assert g["compute_capability"].count(".") == 1 and g["driver_cuda"].count(".") == 1
    code, report = check_here(str(HERE / "ok_qwen05b_a10g.yaml"), "--select", "gpu-capacity", "--no-smoke")
    r = result_of(report, "TD008")
    assert r["status"] in ("pass", "warn", "fail"), r
    assert all(g["name"] in " ".join(r["details"]["GPUs"]) for g in found)
    with Context(load_config(HERE / "ok_qwen05b_a10g.yaml"), Options(smoke=False)) as ctx:
        need = estimate(plan_from_context(ctx), max(g["memory_total_bytes"] for g in found)).total_bytes
    roomy = min(g["memory_free_bytes"] for g in found) > 1.5 * need
    modern = all(tuple(map(int, g["compute_capability"].split("."))) >= (8, 0) for g in found)
    if roomy and modern and driver_cuda_problem(found[0]["driver_cuda"], torch_cuda_version()) is None:
        assert r["status"] == "pass", r


# -- the rule through the command, with fake GPUs ------------------------------------------------------------


def test_vllm_server_needs_its_own_gpu(built_fixtures):
    config = HERE / "bad_vllm_server_one_gpu.yaml"
    code, r = check_with(config, {"gpus": [gpu()]})
    assert r["status"] == "fail" and "needs a GPU of its own" in r["message"]
    # two GPUs: one for `trl vllm-serve` (here the busier one), training judged on the other
    code, r = check_with(config, {"gpus": [gpu(free=8000, processes=1), gpu()]})
    assert r["status"] == "pass", r
    assert "1 for the vLLM server" in r["details"]["launch"] and "GPU 1" in r["details"]["free memory per GPU"]


def test_colocate_tensor_parallel_larger_than_the_gpus(built_fixtures, tmp_path):
    config = tmp_path / "tp.yaml"
    config.write_text(f"model_name_or_path: {MODELS / 'qwen2.5-0.5b'}\nuse_vllm: true\nvllm_mode: colocate\n"
                      "vllm_tensor_parallel_size: 2\nmax_completion_length: 256\nbeta: 0.0\n")
    code, r = check_with(config, {"gpus": [gpu()]})
    assert r["status"] == "fail" and "vllm_tensor_parallel_size 2 needs 2 GPUs, but 1 is visible" in r["message"]


def test_no_gpu(built_fixtures, tmp_path):
    none = {"error": "driver_not_loaded"}
    code, r = check_with(HERE / "ok_no_gpu.yaml", none)
    assert code == 0 and r["status"] == "skip" and "Driver Not Loaded" in r["message"]
    assert "memory estimate per GPU" in r["details"]  # the estimate is still shown
    vllm = tmp_path / "vllm.yaml"
    vllm.write_text(f"model_name_or_path: {MODELS / 'qwen2.5-0.5b'}\nuse_vllm: true\nmax_completion_length: 64\n")
    code, r = check_with(vllm, none)
    # vLLM needs a GPU on the launch machine, which this is not: no verdict from here, and the way to get one
    assert code == 0 and r["status"] == "skip" and "pass --target" in r["message"] and "use_vllm: true" in r["message"]
    # precision without a GPU (fp16, an explicit bf16) is TD015 precision-and-attention's, not reported here twice
    for name, keys in (("fp16.yaml", "fp16: true\nbf16: false\n"), ("bf16.yaml", "bf16: true\n")):
        config = tmp_path / name
        config.write_text(f"model_name_or_path: {MODELS / 'qwen2.5-0.5b'}\n{keys}max_completion_length: 64\n")
        code, r = check_with(config, none)
        assert code == 0 and r["status"] == "skip" and "fp16" not in r["message"] and "bf16" not in r["message"], r


def test_precision_on_old_gpus_is_left_to_precision_and_attention(built_fixtures, tmp_path):
    t4 = {"gpus": [gpu(name="Tesla T4", total=15360, free=14910, cc="7.5")]}
    config = tmp_path / "bf16_t4.yaml"
    config.write_text(f"model_name_or_path: {MODELS / 'qwen2.5-0.5b'}\nbf16: true\nper_device_train_batch_size: 2\n"
                      "num_generations: 2\nmax_completion_length: 128\ngradient_checkpointing: true\nbeta: 0.0\n")
    code, r = check_with(config, t4)
    assert r["status"] == "pass" and "bf16" not in r["message"], r  # memory fits; bf16 on a T4 is TD015's finding


def test_driver_cuda_older_than_torch(built_fixtures):
    code, r = check_with(HERE / "ok_qwen05b_a10g.yaml", {"cuda_driver": "11.8", "gpus": [gpu()]})
    torch_cuda = torch_cuda_version()
    if torch_cuda is None:  # a CPU build of torch (CI): there is no CUDA build to compare, and the report says so
        assert r["status"] == "pass" and "not compared" in r["details"]["torch CUDA build"]
    elif int(torch_cuda.split(".")[0]) > 11:
        assert r["status"] == "fail" and "too old" in r["message"], r


def test_healthy_fixture_without_gpu_has_no_false_alarm(built_fixtures):
    # the real NVML of this machine; with no GPU the rule skips, and the config's defaults raise nothing
    code, report = check_here(str(FIXTURES / "smoke-step" / "ok_grpo_qwen2.yaml"), "--no-smoke",
                            "--select", "gpu-capacity")
    r = result_of(report, "TD008")
    if not gpus()[0]:
        assert r["status"] == "skip", r
    assert code == 0 or r["status"] not in ("fail", "error"), r


# -- sharding: DeepSpeed ZeRO and FSDP (facts.launch.launcher.sharding, facts.memory.plan.sharded) ----------------

def _shard(**kw):
    from trl_doctor.facts.launch.launcher import Sharding

    return Sharding(configured_by="test", **kw)


def test_sharded_estimate_divides_what_each_stage_partitions():
    from trl_doctor.facts.memory.plan import sharded

    plan = Plan(policy_params=1_000_000_000, param_bytes=2, reference=True, batch_size=1, seq_len=10, hidden_size=16,
                num_layers=10, intermediate_size=64, kv_dim=16, num_heads=1, vocab_size=100)
    base = estimate(plan)
    w = 2_000_000_000  # 1e9 × 2 bytes

    def parts(est):
        return {c.name: c.bytes for c in est.components}

    z1, _ = sharded(base, plan, _shard(backend="deepspeed", zero_stage=1, shards_optimizer=True), 4)
    # DeepSpeed keeps an fp32 master copy and fp32 Adam states of bf16 weights: 12 bytes per parameter, ÷ 4
    assert parts(z1)["AdamW states"] == 3_000_000_000 and parts(z1)["gradients"] == w and parts(z1)["policy weights"] == w
    z2, _ = sharded(base, plan, _shard(backend="deepspeed", zero_stage=2, shards_optimizer=True, shards_gradients=True), 4)
    assert parts(z2)["gradients"] == w // 4 and parts(z2)["policy weights"] == w and parts(z2)["reference model"] == w
    z3, words = sharded(base, plan, _shard(backend="deepspeed", zero_stage=3, shards_optimizer=True, shards_gradients=True,
                                           shards_parameters=True), 4)
    p3 = parts(z3)
    assert p3["policy weights"] == w // 4 and p3["reference model"] == w // 4 and p3["gathered layers"] == 2 * w // 10
    assert z3.total_bytes < z2.total_bytes < z1.total_bytes < base.total_bytes + 4 * w
    assert words == ("DeepSpeed ZeRO-3 over 4 processes: parameters 0.5 GiB/GPU, gradients 0.5 GiB/GPU, "
                     "AdamW states 2.8 GiB/GPU")
    off, words = sharded(base, plan, _shard(backend="deepspeed", zero_stage=3, shards_optimizer=True, shards_gradients=True,
                                            shards_parameters=True, offload_optimizer=True, offload_parameters=True), 4)
    assert parts(off)["AdamW states"] == 0 and parts(off)["policy weights"] == 0 and "offloaded to the CPU" in words
    # FSDP: no DeepSpeed master copy; NO_SHARD changes nothing
    grad_op, _ = sharded(base, plan, _shard(backend="fsdp", strategy="SHARD_GRAD_OP", shards_optimizer=True,
                                            shards_gradients=True), 2)
    assert parts(grad_op)["AdamW states"] == 2 * w // 2 and parts(grad_op)["gradients"] == w // 2
    same, _ = sharded(base, plan, _shard(backend="fsdp", strategy="NO_SHARD"), 4)
    assert same.total_bytes == base.total_bytes
    # one process, or sharding that could not be read: the unsharded estimate
    assert sharded(base, plan, _shard(backend="deepspeed", unknown="ZeRO stage 'auto'"), 4)[0] is base


def test_sharding_is_read_from_the_config_then_the_accelerate_config(tmp_path):
    from trl_doctor.facts.launch.launcher import sharding

    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b"), deepspeed="ds.json") as ctx:
        s = sharding(ctx)
    assert (s.backend, s.zero_stage, s.shards_gradients, s.shards_parameters, s.offload_optimizer) == (
        "deepspeed", 2, True, False, True)
    assert s.words == "DeepSpeed ZeRO-2 with optimizer offloaded to the CPU"
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b"), fsdp="shard_grad_op auto_wrap") as ctx:
        s = sharding(ctx)
    assert (s.backend, s.strategy, s.shards_parameters, s.shards_gradients) == ("fsdp", "SHARD_GRAD_OP", False, True)
    (tmp_path / "fsdp2.yaml").write_text("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"
                                         "  fsdp_reshard_after_forward: true\n")
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b"), accelerate_config="fsdp2.yaml") as ctx:
        s = sharding(ctx)
    assert (s.backend, s.strategy, s.shards_parameters) == ("fsdp", "FULL_SHARD", True)
    with context(tmp_path, model_name_or_path=str(MODELS / "qwen2.5-0.5b"), deepspeed="missing.json") as ctx:
        s = sharding(ctx)
    assert s.backend == "deepspeed" and not s.modelled and "missing.json: no such file" in s.unknown


def test_sharding_turns_a_shortfall_into_a_fit(built_fixtures, tmp_path):
    sharded_case = HERE / "ok_llama8b_full_fsdp_4xa100.yaml"
    gpus_4 = HERE / "gpus" / "4x-a100-80g.json"
    code, r = check_with(sharded_case, gpus_4)
    assert code == 0 and r["status"] == "pass", r["message"]
    assert "FSDP FULL_SHARD over 4 processes: parameters 3.7 GiB/GPU, gradients 3.7 GiB/GPU" in r["message"]
    # the same job under ZeRO-3: DeepSpeed's fp32 master copy and Adam states (12 bytes per parameter, ÷ 4) still fit
    zero3 = tmp_path / "zero3.yaml"
    text = sharded_case.read_text().replace("models/llama-3-8b", str(MODELS / "llama-3-8b"))
    zero3.write_text(text.replace("accelerate_fsdp_4gpu.yaml", str(HERE / "accelerate_zero3_4gpu.yaml")))
    code, r = check_with(zero3, gpus_4)
    assert code == 0 and r["status"] == "pass", r["message"]
    assert "DeepSpeed ZeRO-3 over 4 processes: parameters 3.7 GiB/GPU, gradients 3.7 GiB/GPU, AdamW states 22.4" in r["message"]
    assert "fp32 master copy" in r["details"]["memory breakdown"]["AdamW states"]
    # without the accelerate config every process holds everything, and it does not fit
    plain = tmp_path / "plain.yaml"
    plain.write_text(text.replace("accelerate_config: accelerate_fsdp_4gpu.yaml\n", ""))
    code, r = check_with(plain, gpus_4)
    # weights, gradients, AdamW states and the reference copy (beta 0.04) of 8B bf16 parameters: 76.0 GiB of 79.2
    assert r["status"] == "warn" and "barely fits: needs ~76.0 GiB" in r["message"], r["message"]
    assert "processes: parameters" not in r["message"]


def test_unreadable_sharding_keeps_a_shortfall_a_warning(built_fixtures, tmp_path):
    config = tmp_path / "ds.yaml"
    config.write_text((HERE / "bad_llama8b_fp32_a100.yaml").read_text().replace("models/", str(MODELS) + "/")
                      + "deepspeed: missing_ds.json\n")
    code, r = check_with(config, HERE / "gpus" / "a100-80g.json")
    assert code == 0 and r["status"] == "warn" and "sharding is not read (missing_ds.json: no such file)" in r["message"]


def test_colocate_tensor_parallel_not_dividing_the_gpus(built_fixtures, tmp_path):
    config = tmp_path / "tp.yaml"
    # vLLM's share set as TRL 1.x defaults it (trl 0.15's 0.9 would not fit, a failure that hides the warning)
    config.write_text(f"model_name_or_path: {MODELS / 'qwen2.5-0.5b'}\nuse_vllm: true\nvllm_mode: colocate\n"
                      "vllm_tensor_parallel_size: 2\nvllm_gpu_memory_utilization: 0.3\nmax_completion_length: 256\n"
                      "beta: 0.0\n")
    code, r = check_with(config, {"gpus": [gpu(), gpu(), gpu()]})
    assert code == 0 and "tensor" not in r["message"], r  # the memory is gpu-capacity's; the group size is not
    # one judgment, one rule (issue 46): distributed-setup fails it against the launch's processes, in TRL's words,
    # where the installed TRL has colocated vLLM (vllm_mode, trl 0.18 on)
    from importlib.metadata import version as installed

    from packaging.version import Version

    if Version(installed("trl")) < Version("0.18"):
        return
    code, report = run_json("check", str(config), "--select", "distributed-setup", "--no-smoke",
                            env=fake_env({"gpus": [gpu(), gpu(), gpu()]}))
    r = result_of(report, "TD019")
    assert code == 1 and r["status"] == "fail", r
    assert "vllm_tensor_parallel_size 2 does not divide the launch's 3 training processes" in r["message"]
    assert "must divide world size (3) evenly" in r["message"]


def test_zero3_generation_gathers_the_policy_only_when_ds3_gather_for_generation_is_on(built_fixtures):
    gpus_8 = HERE / "gpus" / "8x-h100-80g.json"
    code, r = check_with(HERE / "ok_llama70b_lora_zero3_8xh100_no_gather.yaml", gpus_8)
    assert code == 0 and r["status"] == "pass", r["message"]
    breakdown = r["details"]["memory breakdown"]
    assert "policy gathered for generation" not in breakdown
    assert "ds3_gather_for_generation: false" in breakdown["layers gathered for generation"]
    code, r = check_with(HERE / "bad_llama70b_lora_zero3_8xh100_gather.yaml", gpus_8)
    assert code == 1 and r["status"] == "fail"
    # the whole bf16 policy less the local shard: 70.6B × 2 bytes × 7/8 = 115.0 GiB, and the advice names the knob
    assert "policy gathered for generation 115.0 GiB: set `ds3_gather_for_generation: false`" in r["message"]


# -- quantized loads (issue 30, class 4): where a 4-bit / 8-bit load is declared, the estimate reads it ----------------

def test_trls_qlora_notebook_fits_the_t4_it_was_run_on(built_fixtures):
    """TRL's own QLoRA notebook (fixtures/launch/grpo_qlora_notebook.py: a BitsAndBytesConfig given to the trainer)
    reports ~9.2 GB on a 16 GB T4 for Qwen2-7B-Instruct; the estimate used to ignore the quantization and say "needs
    ~31.7 GiB (policy weights 28.4)"."""
    import inspect

    from conftest import run_doctor
    from trl_doctor.facts.trl.installed import trainer_class

    if "quantization_config" not in inspect.signature(trainer_class("grpo").__init__).parameters:
        pytest.skip("the installed GRPOTrainer takes no quantization_config (the notebook is written for trl >= 1.x)")
    proc = run_doctor("check", "--no-smoke", "--select", "gpu-capacity", "--target", "1xT4", "--format", "json", "--",
                      "python", "grpo_qlora_notebook.py", cwd=FIXTURES / "launch")
    code, report = proc.returncode, json.loads(proc.stdout or "{}")
    assert "results" in report, proc.stderr
    r = result_of(report, "gpu-capacity")
    assert code == 0 and r["status"] == "pass", r
    inputs = r["details"]["estimate inputs"]
    assert inputs["quantization"] == "4bit (model_init_kwargs.quantization_config)", inputs
    weights = r["details"]["memory breakdown"]["policy weights"]
    assert float(weights.split(" GiB")[0]) < 9, weights  # 6.5B linear weights at ~0.53 byte + 1.1B fp32 embeddings



def test_trls_qlora_notebook_on_its_t4_passes_as_a_whole(built_fixtures):
    """Issue 30 class 4 on public material, both halves: the notebook sets neither bf16 nor fp16, so TRL 1.x's
    GRPOConfig makes bf16 `not fp16`, on a T4; the notebook says "Training on a T4 in Colab with the configuration
    defined in this notebook takes around 13 hours". Before cede3bf both rules failed it (exit 1: "needs ~31.7 GiB", and
    "bfloat16 needs 8.0 (Ampere)"); the installed torch runs bfloat16 emulated there, so bf16 is a warn and the exit 0."""
    import inspect

    from conftest import run_doctor
    from trl_doctor.facts.trl.installed import trainer_class

    if "quantization_config" not in inspect.signature(trainer_class("grpo").__init__).parameters:
        pytest.skip("the installed GRPOTrainer takes no quantization_config (the notebook is written for trl >= 1.x)")
    proc = run_doctor("check", "--no-smoke", "--select", "gpu-capacity,precision-and-attention", "--target", "1xT4",
                      "--format", "json", "--", "python", "grpo_qlora_notebook.py", cwd=FIXTURES / "launch")
    report = json.loads(proc.stdout or "{}")
    assert "results" in report, proc.stderr
    assert proc.returncode == 0, report
    assert result_of(report, "gpu-capacity")["status"] == "pass"
    precision = result_of(report, "precision-and-attention")
    assert precision["status"] == "warn", precision
    assert "the installed TRL's default: GRPOConfig.bf16 is None" in precision["message"], precision["message"]
    assert "Tesla T4" in precision["message"] and "emulated" in precision["message"], precision["message"]

def _quantized_recipe(tmp_path: Path, model: Path, init: dict | None) -> Path:
    import yaml

    recipe = {"model_name_or_path": str(model), "reward_funcs": ["trl.rewards.think_format_reward"],
              "use_peft": True, "lora_r": 16, "per_device_train_batch_size": 4, "num_generations": 4,
              "max_completion_length": 256, "gradient_checkpointing": True}
    if init is not None:
        recipe["model_init_kwargs"] = init
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


@pytest.mark.parametrize("where", ["recipe", "checkpoint"])
def test_a_quantized_load_from_a_recipe_or_a_prequantized_checkpoint(built_fixtures, tmp_path, where):
    model = tmp_path / "qwen2-7b"
    model.mkdir()
    config = json.loads((MODELS / "qwen2-7b-instruct" / "config.json").read_text())
    quant = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    if where == "checkpoint":
        config["quantization_config"] = quant
    (model / "config.json").write_text(json.dumps(config))
    init = {"dtype": "bfloat16", **({"quantization_config": quant} if where == "recipe" else {})}
    code, report = run_json("check", str(_quantized_recipe(tmp_path, model, init)), "--select", "gpu-capacity",
                            "--target", "1xT4", "--no-smoke")
    r = result_of(report, "gpu-capacity")
    source = ("model_init_kwargs.quantization_config" if where == "recipe" else
              "the checkpoint's config.json quantization_config (pre-quantized)")
    assert r["details"]["estimate inputs"]["quantization"] == f"4bit ({source})", r["details"]["estimate inputs"]
    assert code == 0 and r["status"] == "pass", r


# -- issue 46: the KV cache a colocated vLLM's share leaves, against the max_model_len the installed TRL gives it -----

@pytest.mark.other_trl  # trl 0.22.0 from PyPI, first on PYTHONPATH
def test_colocate_kv_cache_is_judged_at_the_length_the_installed_trl_passes(built_fixtures):
    """trl 1.10-1.16 hand the engine vllm_max_model_length, unset here, so vLLM takes Llama 3.1's 131,072 positions
    (16 GiB of KV cache, 9 GiB left in a 0.3 share of 80 GiB beside the weights): fail. trl 0.22 hands it
    max_prompt_length + max_completion_length (512 + 512): the same job's engine fits."""
    from conftest import real_trl

    case = str(FIXTURES / "gpu-capacity" / "bad_vllm_colocate_kv_llama31.yaml")
    for env, status in (({}, "fail" if _trl_at_least("1.10") else None), (real_trl("0.22.0"), "pass")):
        if status is None:
            continue
        code, report = run_json("check", case, "--select", "gpu-capacity", "--target", "1xA100-80GB", env=env)
        r = result_of(report, "gpu-capacity")
        assert r["status"] == status, (env, r)
        kv = r["details"].get("vLLM colocate KV cache")
        if status == "fail":
            assert "max_model_len 131,072" in kv and "16.0 GiB" in r["message"] and "(at most ~72,283 fits)" in r["message"]
        else:
            assert kv is None, kv


def _trl_at_least(release: str) -> bool:
    from importlib.metadata import version as installed

    from packaging.version import Version

    return Version(installed("trl")) >= Version(release)
