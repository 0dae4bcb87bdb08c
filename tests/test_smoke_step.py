"""TD006 through the real command: the installed TRL's GRPOTrainer takes one step on the miniature twin
on the CPU, and broken reward functions are reported by name and cause."""

from __future__ import annotations

import math
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import FIXTURES, real_trl, result_of, run_doctor, run_json

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM


@pytest.mark.slow
def test_healthy_grpo_step_on_the_twin(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "smoke-step" / "ok_grpo_qwen2.yaml"), "--select", "smoke-step,TD009")
    smoke = result_of(report, "smoke-step")
    assert smoke["status"] == "pass", smoke
    d = smoke["details"]
    assert d["device"] == "cpu" and d["trainer"] == "GRPOTrainer"
    assert d["model"].startswith("miniature twin of Qwen2")
    assert math.isfinite(d["loss"]) and math.isfinite(d["grad_norm"]) and d["grad_norm"] > 0
    updated, total = map(int, d["updated tensors"].split("/"))
    assert updated == total > 0
    assert d["reward rewards.length_reward"].startswith("1 calls, 2 completions")
    assert 0 < d["completion mean length"] <= 8  # the smoke step's short completions
    assert code == 0


@pytest.mark.slow
def test_reward_that_raises_names_the_function_file_and_error(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "smoke-step" / "bad_reward_raises.yaml"), "--select", "smoke-step")
    smoke = result_of(report, "smoke-step")
    assert code == 1 and smoke["status"] == "fail"
    assert "reward function rewards.raising_reward raised KeyError: 'answer' at rewards.py:" in smoke["message"]
    assert 'kwargs["answer"]' in smoke["details"]["traceback"]


@pytest.mark.slow
def test_reward_with_wrong_length_is_named(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "smoke-step" / "bad_reward_wrong_length.yaml"), "--select", "smoke-step")
    smoke = result_of(report, "smoke-step")
    assert code == 1 and smoke["status"] == "fail"
    assert "wrong_length_reward" in smoke["message"] and "1" in smoke["message"] and "2" in smoke["message"]


@pytest.mark.slow
def test_issue_end_to_end_gpt2_check_fix_recheck(fixture_copy):
    """The whole path: pad-token finding, the smoke step on the twin, --fix, and a clean re-check."""
    config = str(fixture_copy / "pad-token" / "bad_gpt2_nopad.yaml")
    rules = ("--select", "pad-token,smoke-step,trainer-config")
    code, report = run_json("check", config, *rules)
    pad = result_of(report, "pad-token")
    smoke = result_of(report, "smoke-step")
    assert smoke["details"]["model"].startswith("miniature twin of GPT2")
    if pad["status"] == "fail":
        # a trainer that does not pad by itself: the real step crashes exactly as the rule predicted
        assert smoke["status"] == "fail" and "Asking to pad but the tokenizer does not have a padding token" in smoke["message"]
    else:
        assert pad["status"] == "warn" and smoke["status"] == "pass", smoke
    code, report = run_json("check", config, *rules, "--fix", "--fail-on", "warn")
    assert code == 0, report
    assert [r["status"] for r in report["results"]] == ["pass", "pass", "pass"]
    assert result_of(report, "pad-token")["fix"]["applied"] is True


def smoke(built_fixtures, name: str, *extra: str, **kw) -> tuple[int, dict]:
    code, report = run_json("check", str(built_fixtures / "smoke-step" / name), "--select", "smoke-step", *extra, **kw)
    return code, result_of(report, "smoke-step")


@pytest.mark.slow
def test_reward_without_kwargs_is_a_signature_problem(built_fixtures):
    code, r = smoke(built_fixtures, "bad_reward_no_kwargs.yaml")
    assert code == 1 and r["status"] == "fail"
    assert "reward function rewards.no_kwargs_reward cannot be called the way trl" in r["message"]
    assert "`no_kwargs_reward(prompts, completions)`" in r["message"]
    assert "answer=" in r["message"] and "**kwargs" in r["message"]  # the dataset column TRL passes by name
    assert "unexpected keyword argument" in r["details"]["error"]


@pytest.mark.slow
def test_reward_returning_labels_is_named(built_fixtures):
    code, r = smoke(built_fixtures, "bad_reward_non_numeric.yaml")
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith("reward function rewards.text_reward returned non-numbers (e.g. 'good')")


@pytest.mark.slow
def test_dataset_without_prompt_column_names_the_columns(built_fixtures):
    code, r = smoke(built_fixtures, "bad_dataset_no_prompt.yaml")
    assert code == 1 and r["status"] == "fail"
    assert "the dataset has no `prompt` column (columns: question, answer)" in r["message"]
    assert r["details"]["error"] == "KeyError: 'prompt'"  # the trainer's own error, kept beside the explanation


@pytest.mark.slow
def test_lora_step_updates_only_the_adapters(built_fixtures):
    code, r = smoke(built_fixtures, "ok_grpo_peft.yaml")
    assert r["status"] == "pass", r
    d = r["details"]
    assert d["model class"] == "PeftModelForCausalLM"
    assert d["trainable"] == "8 LoRA adapter tensors"  # q_proj and v_proj, A and B, in 2 layers
    total, trainable = (int(x.replace(",", "")) for x in d["parameters"].replace("(", "").split()[:2])
    assert 0 < trainable < total
    updated, tensors = map(int, d["updated tensors"].split("/"))
    assert tensors == 8 and updated >= 4  # every lora_B moves; lora_A has no gradient while lora_B is still zero


@pytest.mark.slow
@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_ppo_step_with_the_last_trl_that_has_ppo(built_fixtures):
    env = real_trl("1.12.0")
    code, r = smoke(built_fixtures, "ok_ppo_qwen2.yaml", env=env)
    assert r["status"] == "pass", r
    d = r["details"]
    assert d["trainer"] == "PPOTrainer" and d["optimizer steps"] == 1
    assert math.isfinite(d["loss"]) and d["grad_norm"] > 0
    updated, total = map(int, d["updated tensors"].split("/"))
    assert updated == total > 0  # the policy and the value model both train
    assert math.isfinite(d["reward model mean score"])
    code, r = smoke(built_fixtures, "bad_ppo_no_value_model.yaml", env=env)
    assert r["status"] == "fail" and "'NoneType' object has no attribute 'base_model_prefix'" in r["message"], r


def test_ppo_on_a_trl_without_ppo_names_the_release_to_pin(built_fixtures):
    from trl_doctor.facts.trl.installed import trainer_class

    if trainer_class("ppo") is not None:
        pytest.skip(f"trl {version('trl')} has a PPO trainer")
    code, r = smoke(built_fixtures, "ok_ppo_qwen2.yaml")
    assert code == 1 and r["status"] == "fail"
    assert f"trl {version('trl')} has no PPO trainer" in r["message"] and "pin trl==1.12.0" in r["message"]


@pytest.mark.slow
def test_progress_is_shown_on_stderr_while_the_step_runs(built_fixtures):
    proc = run_doctor("check", str(built_fixtures / "smoke-step" / "ok_grpo_qwen2.yaml"), "--select", "smoke-step",
                      env={"TRL_DOCTOR_PROGRESS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "trl-doctor: GRPO trainer run: " in proc.stderr
    assert any(f"run: {stage} (" in proc.stderr for stage in ("train", "trainer init", "logits probe", "config", "import"))
    assert "\x1b" not in proc.stdout  # the report itself stays clean


@pytest.mark.slow
def test_time_limit_turns_a_slow_step_into_a_failure(built_fixtures):
    # the limit counts from the start of the trainer run (the worker's imports are done by then): building the
    # trainer alone takes longer than 50 ms
    code, r = smoke(built_fixtures, "ok_grpo_qwen2.yaml", "--smoke-timeout", "0.05")
    assert code == 1 and r["status"] == "fail"
    assert "did not finish within --smoke-timeout 0.05s" in r["message"]


@pytest.mark.parametrize("error, precision, device, expected", [
    # transformers' TrainingArguments on a pre-Ampere GPU
    ({"error": "Your setup doesn't support bf16/gpu."}, "bf16=True", "cuda", "bf16 is requested (bf16=True) but the cuda cannot do it"),
    # accelerate before 1.x on a machine without CUDA
    ({"error": "fp16 mixed precision requires a GPU (not 'cpu')."}, "fp16=True", "cpu", "fp16 is requested (fp16=True) but it cannot run on a CPU"),
    ({"error": "index out of range in self"}, "bf16=True", "cpu", None),
])
def test_dtype_errors_are_explained(error, precision, device, expected):
    from trl_doctor.rules.smoke_step import _dtype_problem

    got = _dtype_problem(error, {"precision": precision, "device": device})
    assert (got is None) if expected is None else got.startswith(expected), got


def test_out_of_memory_and_kills_are_recognised():
    from trl_doctor.rules.smoke_step import _is_oom, _signal

    assert _is_oom({"error_type": "OutOfMemoryError", "error": "CUDA out of memory. Tried to allocate 2.00 GiB"})
    assert _is_oom({"error_type": "RuntimeError", "error": "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"})
    assert not _is_oom({"error_type": "KeyError", "error": "'prompt'"})
    # a SIGKILL is named as such: only the kernel's own record (read by the supervisor, RunResult.cause) says OOM
    assert _signal(-9) == "killed by SIGKILL" and _signal(-11) == "killed by SIGSEGV"


# -- the real-model decision on a GPU: arithmetic and GPU choice, testable without one ------------------------

def _real_size_ctx(tmp_path, built_fixtures, weights: bool):
    import shutil

    from trl_doctor import Context, Options
    from trl_doctor.context.config import load_config

    model = tmp_path / "qwen2.5-0.5b"
    shutil.copytree(built_fixtures / "gpu-capacity" / "models" / "qwen2.5-0.5b", model)
    if weights:
        (model / "model.safetensors").write_bytes(b"")  # only its presence is read: nothing is loaded
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: {model.name}\ntokenizer_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\n"
                   f"dataset_path: {built_fixtures / 'data' / 'chat.jsonl'}\nreward_funcs: [trl_doctor.x]\n"
                   "per_device_train_batch_size: 16\nnum_generations: 16\nmax_completion_length: 1024\n")
    return Context(load_config(cfg), Options(device="cpu"))


def _gpu(free_gib: float, total_gib: float = 80.0, index: int = 0) -> dict:
    return {"index": index, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": int(total_gib * 1024),
            "memory_free_mib": int(free_gib * 1024)}


def test_real_model_is_used_only_when_its_step_fits(tmp_path, built_fixtures):
    from dataclasses import replace

    from trl_doctor.facts.trainer_run.fingerprint import SCRATCH_BYTES
    from trl_doctor.facts.trainer_run.plan import doctor_overhead, real_model_fits, smoke_plan

    with _real_size_ctx(tmp_path, built_fixtures, weights=True) as ctx:
        plan = smoke_plan(ctx)
        # the step's own sizes, not the config's: 2 sequences of prompt + 8 completion tokens
        assert plan.batch_size == 2 and plan.generation_batch == 2 and plan.vllm_gpu_memory_utilization == 0
        assert plan.policy_params == 494_032_768
        fits, why = real_model_fits(ctx, _gpu(70))
        assert fits, why
        from trl_doctor.facts.memory.plan import estimate

        est = estimate(plan, gpu_total_bytes=70 * 2**30)
        # the doctor's own additions are counted: no copy of the model, only the fingerprints' scratch (fp32 weights)
        extra, _ = doctor_overhead(plan, ctx.meta_model)
        assert extra == SCRATCH_BYTES and "the doctor's own 0.0: fingerprint scratch 32 MiB" in why
        assert float(why.split("~")[1].split()[0]) == round((est.total_bytes + extra) / 2**30, 1)
        # bf16 weights trained in full: the gradient-norm hook's fp32 copy of the largest (embedding) gradient too
        extra16, how = doctor_overhead(replace(plan, param_bytes=2), ctx.meta_model)
        assert extra16 == SCRATCH_BYTES + 151_936 * 896 * 4 and "largest gradient (136,134,656 values)" in how
        # at least fp32 weights (no dtype given: transformers' default), gradients and two AdamW states: 16 bytes
        # a parameter; the rest (reference copy, logits, activations) depends on the TRL version's defaults
        assert est.total_bytes > 494_032_768 * 16
        fits, why = real_model_fits(ctx, _gpu(6))
        assert not fits and "has 6.0 GiB free" in why and "GPU 0 (NVIDIA A100-SXM4-80GB)" in why


def test_real_model_needs_safetensors_weights(tmp_path, built_fixtures):
    from trl_doctor.facts.trainer_run.plan import real_model_fits

    with _real_size_ctx(tmp_path, built_fixtures, weights=False) as ctx:
        fits, why = real_model_fits(ctx, _gpu(70))
        assert not fits and "has no .safetensors weights" in why


def test_step_runs_on_the_first_visible_gpu():
    from trl_doctor.facts.trainer_run.plan import step_gpu

    gpus = [_gpu(10, index=0), _gpu(70, index=1)]
    assert step_gpu(gpus, None)["index"] == 0
    assert step_gpu(gpus, "1")["index"] == 1
    assert step_gpu(gpus, "") is None


def test_out_of_memory_report_carries_the_estimate(tmp_path, built_fixtures):
    from trl_doctor.rules.smoke_step import explain_failure

    error = {"ok": False, "stage": "train", "error_type": "OutOfMemoryError",
             "error": "CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of 79.19 GiB"}
    with _real_size_ctx(tmp_path, built_fixtures, weights=True) as ctx:
        message, extra = explain_failure(error, {"device": "cuda", "model_label": "the real model"}, ctx)
    assert message.startswith("out of memory during the train stage on the cuda with the real model")
    assert extra["memory estimate (one smoke step, real model)"].startswith("~")
    assert any(k.startswith("estimate: policy") for k in extra)


# -- the real-model sample (--sample N, docs/coverage.md C7 and E5) ---------------------------------------------------------

@pytest.mark.slow
def test_sample_of_a_model_that_never_stops_warns_with_the_cap_and_the_eos(built_fixtures):
    code, r = smoke(built_fixtures, "bad_sample_never_stops.yaml", "--sample", "2")
    assert code == 0 and r["status"] == "warn", r
    assert r["message"].startswith("all 8 completions the real model sampled for 2 prompt(s) ran to max_completion_length "
                                   "24 without the eos '<|im_end|>' (id ")
    assert "raise max_completion_length" in r["message"] and "parameters, sampled in" in r["message"]
    assert r["location"]["key"] == "max_completion_length"
    d = r["details"]
    assert d["real-model completions"].startswith("8/8 ran to max_completion_length 24")
    assert "lengths 24-24" in d["real-model completions"]
    assert "qwen2-nostop" in d["real-model sample"] and "2 prompt(s) x 4 completions" in d["real-model sample"]
    assert "--sample 2" in d["real-model sample"]
    assert d["real-model completion (end)"].endswith("answer answer'")
    # cut alike, they score alike: the zero-spread finding comes with it, naming the cause
    assert any(a.startswith("warn: every one of the 2 group(s) of 4 real-model completions (all cut at the cap")
               for a in d["also"]), d.get("also")
    assert "mask_truncated_completions: true" in r["fix"]["description"]


@pytest.mark.slow
def test_sample_with_a_constant_reward_warns_that_no_group_has_spread(built_fixtures):
    code, r = smoke(built_fixtures, "bad_sample_constant_reward.yaml", "--sample", "2")
    assert code == 0 and r["status"] == "warn", r
    assert r["message"].startswith("every one of the 2 group(s) of 4 real-model completions got identical rewards "
                                   "([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])")
    import dataclasses

    from trl import GRPOConfig

    # the installed TRL's default (0.9 in trl 0.15, 1.0 later), read without building a config for this machine
    temperature = next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == "temperature")
    assert "advantages are then 0" in r["message"] and f"raise temperature ({temperature})" in r["message"]
    d = r["details"]
    assert d["real-model completions"].startswith("0/8 ran to max_completion_length")  # they end: no C7
    assert not any("max_completion_length 24 without" in a for a in d.get("also", []))


@pytest.mark.slow
def test_sample_of_a_healthy_model_passes_and_says_what_it_saw(built_fixtures):
    code, r = smoke(built_fixtures, "ok_sample_stops.yaml", "--sample", "2")
    assert code == 0 and r["status"] == "pass", r
    assert "the real model's 8 sampled completions: 0 cut at max_completion_length 24, " in r["message"]
    d = r["details"]
    groups = d["real-model group rewards"]
    # sampled: which groups spread depends on the release's sampling, but not every group may be flat
    assert len(groups) == 2 and any(len(set(g)) > 1 for g in groups)
    flat = sum(len(set(g)) == 1 for g in groups)
    assert f"{flat}/2 groups with no reward spread, in " in r["message"]
    assert float(d["real-model sample"].split(" in ")[1].split("s")[0]) < 20  # the time taken is reported
    assert d["real-model reward rewards.length_reward"].startswith("mean ")


@pytest.mark.slow
def test_without_sample_the_twin_is_not_evidence_about_real_completions(built_fixtures):
    """The step's completions are the twin's: a constant reward makes its gradient zero, which is said as a fact about
    the step, never as a verdict on the real model (that needs --sample)."""
    code, r = smoke(built_fixtures, "bad_sample_constant_reward.yaml")
    assert code == 0 and r["status"] == "pass", r
    assert "every group of the twin's random-weight completions (they say nothing about the real model's rewards) got " \
           "identical rewards, so no gradient flowed in this step" in r["message"]
    d = r["details"]
    assert d["real-model completions"].startswith("not sampled:") and "--sample N" in d["real-model completions"]
    if "step completions ending before the limit" in d:  # where TRL logs completions/clipped_ratio (not trl 0.15)
        assert "not evidence about the real model's completions" in d["step completions ending before the limit"]
    assert "real-model sample" not in d and "also" not in d


def _sized_ctx(tmp_path, built_fixtures, model: str, **options):
    import shutil

    from trl_doctor import Context, Options
    from trl_doctor.context.config import load_config

    folder = tmp_path / model
    shutil.copytree(built_fixtures / "gpu-capacity" / "models" / model, folder)
    (folder / "model.safetensors").write_bytes(b"")  # only its presence is read: nothing is loaded
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: {model}\ntokenizer_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\n"
                   f"dataset_path: {built_fixtures / 'data' / 'chat.jsonl'}\nreward_funcs: [trl_doctor.x]\n"
                   "per_device_train_batch_size: 16\nnum_generations: 16\nmax_completion_length: 1024\n")
    return Context(load_config(cfg), Options(device="cpu", **options))


def test_sample_is_refused_on_the_cpu_for_a_big_or_slow_model(tmp_path, built_fixtures):
    from trl_doctor.facts.trainer_run.plan import sample_plan

    with _sized_ctx(tmp_path, built_fixtures, "llama-3-8b", sample=2) as ctx:
        plan = sample_plan(ctx, twin=True)
    assert plan["n"] == 2 and "prompt_ids" not in plan
    assert plan["refused"].startswith("llama-3-8b has 8.03B parameters: sampling it on the CPU is refused above 1.5B")
    # 0.5B fits the rule of thumb, but 32 completions of up to 1024 tokens would take ~28 minutes by the estimate
    with _sized_ctx(tmp_path / "b", built_fixtures, "qwen2.5-0.5b", sample=2) as ctx:
        plan = sample_plan(ctx, twin=True)
    assert plan["refused"].startswith("32 completions of up to 1024 tokens from 0.49B parameters would take ~")
    assert "over half of --smoke-timeout 300s: lower N, or raise --smoke-timeout" in plan["refused"]
    with _sized_ctx(tmp_path / "c", built_fixtures, "qwen2.5-0.5b", sample=2, smoke_timeout=1e5) as ctx:
        plan = sample_plan(ctx, twin=True)
    assert "refused" not in plan and len(plan["prompt_ids"]) == 2 and plan["num_generations"] == 16
    assert plan["generation"]["max_new_tokens"] == 1024 and plan["generation"]["do_sample"] is True


def test_sample_runs_by_default_only_where_the_step_ran_the_real_model(tmp_path, built_fixtures):
    """No --sample: nothing on the CPU (the twin); on a GPU where the step ran the real model, 2 prompts. The GPU run
    itself is not exercised here (no GPU in CI): the decision is."""
    from trl_doctor.facts.trainer_run.plan import SAMPLE_ON_GPU, sample_plan

    with _sized_ctx(tmp_path, built_fixtures, "qwen2.5-0.5b") as ctx:
        assert sample_plan(ctx, twin=True) == {}
    with _sized_ctx(tmp_path / "b", built_fixtures, "qwen2.5-0.5b", sample=0, smoke_timeout=1e5) as ctx:
        assert sample_plan(ctx, twin=False) == {}
    with _sized_ctx(tmp_path / "c", built_fixtures, "qwen2.5-0.5b", smoke_timeout=1e5) as ctx:
        # the launch machine's GPU, as torch reports it there (the context's cached answer for `ctx.device`)
        ctx._cache[("trl_doctor.context.context.Context.device", ())] = (True, "cuda")
        plan = sample_plan(ctx, twin=False)
    assert plan["n"] == SAMPLE_ON_GPU == 2 and plan["why"].startswith("by default on the GPU")
    assert "refused" not in plan and plan["device"] == "cuda"


@pytest.mark.slow
def test_sample_refuses_pickle_weights(tmp_path, built_fixtures):
    import shutil

    import torch
    from safetensors.torch import load_file

    model = tmp_path / "qwen2-stops-bin"
    shutil.copytree(built_fixtures / "models" / "qwen2-stops", model)
    # the same weights as a pickle, as older checkpoints ship them (transformers 5 no longer writes one)
    torch.save(load_file(str(model / "model.safetensors")), str(model / "pytorch_model.bin"))
    (model / "model.safetensors").unlink()
    assert (model / "pytorch_model.bin").is_file()
    shutil.copy(built_fixtures / "smoke-step" / "rewards.py", tmp_path / "rewards.py")
    config = tmp_path / "c.yaml"
    config.write_text((built_fixtures / "smoke-step" / "ok_sample_stops.yaml").read_text()
                      .replace("../models/qwen2-stops", model.name)
                      .replace("../data/chat.jsonl", str(built_fixtures / "data" / "chat.jsonl")))
    code, report = run_json("check", str(config), "--select", "smoke-step", "--sample", "2")
    r = result_of(report, "smoke-step")
    assert r["status"] == "pass", r
    assert "real-model sample not run: qwen2-stops-bin has no .safetensors weights: the doctor loads no pickle" in r["message"]
    assert r["details"]["real-model sample"].startswith("not run (--sample 2): ")


def _broken_on_this_release(case) -> bool:
    """A healthy case its own folder's expected.yaml expects to fail with the installed releases (an async reward
    function before trl 0.27): the job would fail too, so the step's failure is no false alarm."""
    import yaml

    from test_fixture_cases import expected_statuses

    expected = yaml.safe_load((case.parent / "expected.yaml").read_text())["cases"][case.name]
    return expected_statuses(expected)[0] == ["fail"]


def _healthy_cases(root: Path) -> list[Path]:
    return [c for c in sorted(root.glob("*/ok_*")) if c.suffix in (".yaml", ".yml", ".json")]


# one test per rule folder, so that pytest-xdist spreads the sweep over the cores
HEALTHY_FOLDERS = sorted({c.parent.name for c in _healthy_cases(FIXTURES)})


def test_the_smoke_sweep_covers_every_healthy_case():
    assert len(_healthy_cases(FIXTURES)) > 30
    assert {c.parent.name for c in _healthy_cases(FIXTURES)} == set(HEALTHY_FOLDERS)


@pytest.mark.sweep
@pytest.mark.slow
@pytest.mark.parametrize("folder", HEALTHY_FOLDERS)
def test_no_false_alarm_on_healthy_fixtures(built_fixtures, folder):
    """Every healthy case of every rule, checked as users check it (no --sample): the step's result is what it was
    (pass, or the PPO-on-trl>=1.13 gap its own expected.yaml names), and nothing is said about real completions."""
    import json

    for case in _healthy_cases(built_fixtures):
        if case.parent.name != folder:
            continue
        proc = run_doctor("check", str(case), "--select", "smoke-step", "--format", "json")
        if proc.returncode == 2:  # an input the whole check refuses (e.g. a config-only model without tokenizer)
            assert not proc.stdout and "trl-doctor: error:" in proc.stderr, (case, proc.stderr)
            continue
        r = result_of(json.loads(proc.stdout), "smoke-step")
        gap = r["status"] == "fail" and "has no PPO trainer" in r["message"]
        assert r["status"] in ("pass", "skip") or gap or _broken_on_this_release(case), (case, r["message"])
        assert not any("real-model" in a for a in r["details"].get("also", [])), case
        if r["status"] == "pass":
            assert r["details"]["real-model completions"].startswith("not sampled"), case


@pytest.mark.other_trl  # trl 1.13.0 from PyPI, first on PYTHONPATH (it has no PPO trainer: real_trl's probe skips)
def test_an_async_callable_class_reward_fails_as_trl_1_13_calls_it(built_fixtures):
    """Issue 46: trl 1.13 detects async rewards with inspect.iscoroutinefunction, False for an object whose
    __call__ is async: the job calls it without awaiting and dies at its first step. The smoke step records the
    reward through an object of the same kind (never an async function wrapper, which that TRL would await), so it
    fails there as the job does; on the installed TRL (>= 1.14 awaits it) the same case passes."""
    from conftest import FIXTURES, pypi_release

    case = FIXTURES / "smoke-step" / "bad_reward_async_callable_class.yaml"
    proc = run_doctor("check", str(case), "--select", "smoke-step", "--format", "json",
                      env=pypi_release("trl", "1.13.0"))
    import json

    smoke = result_of(json.loads(proc.stdout), "smoke-step")
    assert smoke["status"] == "fail" and "'coroutine' object is not iterable" in smoke["message"], smoke["message"]


def _liger_lora(variant: str, *options: str, env: dict | None = None) -> tuple[int, dict]:
    import json

    proc = run_doctor("check", "--select", "smoke-step", *options, "--format", "json", "--", "python",
                      "grpo_liger_lora.py", variant, cwd=FIXTURES / "launch", env=env)
    assert proc.stdout, proc.stderr
    return proc.returncode, result_of(json.loads(proc.stdout), "smoke-step")


@pytest.mark.slow
@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_trls_liger_checks_run_though_the_step_runs_without_liger(built_fixtures):
    """docs/coverage.md A9: the step turns Liger off on a machine without a GPU or liger-kernel (launch_only), so
    TRL's own checks of what may go with it never ran: trl 1.9-1.14 refuse a LoRA on lm_head beside use_liger_kernel in
    GRPOTrainer.__init__, and the doctor passed that job. The trainer is now built once with the launch's Liger keys on
    first: TRL's refusal fails the step with its words (also under --no-smoke, where the probes build it), and its
    ImportError for liger-kernel, which follows its checks, lets the step go on. TRL's own verdict: the script itself,
    run on this CPU with trl 1.12.0, stops with the same ValueError."""
    import sys

    from truths import truth_run

    env = real_trl("1.12.0", "grpo")

    def script_itself(peft: str):  # TRL's own verdict, recorded (tests/truths.py)
        return truth_run(f"smoke_step/grpo_liger_lora-{peft}", [sys.executable, "grpo_liger_lora.py", peft],
                         FIXTURES / "launch", env={**env, "FIXTURE_ON_CPU": "1"}, timeout=300,
                         reads=("fixtures/launch/grpo_liger_lora.py", "fixtures/data/prompts.jsonl"))

    words = "`use_liger_kernel=True` is incompatible with applying a PEFT adapter to `lm_head`"
    truth = script_itself("lm_head")
    assert truth.returncode != 0 and f"ValueError: {words}" in truth.stderr, truth.stderr[-2000:]
    for options in ((), ("--no-smoke",)):
        code, r = _liger_lora("lm_head", *options, env=env)
        assert code == 1 and r["status"] == "fail", r
        assert r["message"].startswith(f"GRPOTrainer refuses the launch's Liger settings at construction (ValueError: "
                                       f"{words}"), r["message"]
        assert r["details"]["failed at stage"] == "trainer init with Liger on", r["details"]
    # issue 58, class 5: a PromptTuningConfig reached the step as LoRA keys, so TRL's refusal of prompt learning
    # beside Liger never ran and the doctor passed; the step now gets the script's own config object. The variant is
    # TRL's own test of that refusal run as a script: huggingface/trl @ ae69d4b150d385bbb3da9336e8eb74b49966f246
    # (#6186) tests/test_grpo_trainer.py test_liger_kernel_with_peft_prompt_learning_raises builds GRPOTrainer with
    # PromptTuningConfig(task_type=CAUSAL_LM, num_virtual_tokens=8) beside use_liger_kernel=True and expects this
    # ValueError (its hub model, reward model and dataset stood in for by the fixtures')
    words = "`use_liger_kernel=True` is incompatible with prompt-learning PEFT methods"
    truth = script_itself("prompt_tuning")
    assert truth.returncode != 0 and f"ValueError: {words}" in truth.stderr, truth.stderr[-2000:]
    code, r = _liger_lora("prompt_tuning", "--no-smoke", env=env)
    assert code == 1 and r["status"] == "fail" and words in r["message"], r
    code, r = _liger_lora("projections", env=env)  # TRL's notebook's LoRA: its checks pass, the step runs
    assert code == 0 and r["status"] == "pass", r
    assert any(n.startswith("use_liger_kernel: off") for n in r["details"]["left out of the step (the launch machine's)"])


@pytest.mark.slow
def test_a_trainer_built_with_liger_is_let_go_and_the_step_runs_without_it(built_fixtures):
    """Where the installed TRL builds its trainer with use_liger_kernel on without liger-kernel (trl 1.15+: Liger's
    layer kernels are applied when training starts), that trainer is let go and the step runs without Liger; what TRL
    said while building it is heard (trl 1.16: use_liger_kernel is deprecated for the Hub's kernels). A release whose
    checks refuse or import liger-kernel at construction is the test above."""
    from trl_doctor.facts.trl.installed import trl_root

    text = (trl_root() / "trainer" / "grpo_trainer.py").read_text(encoding="utf-8")
    if "is incompatible with applying a PEFT adapter to `lm_head`" in text or "Liger is required" in text:
        pytest.skip(f"trl {version('trl')} refuses or asks for liger-kernel at construction")
    code, r = _liger_lora("projections")
    assert code == 0 and r["status"] in ("pass", "warn"), r
    assert r["details"]["updated tensors"], r["details"]
    if "deprecated" in text:
        assert any("use_liger_kernel=True` is deprecated" in w for w in r["details"].get("library warnings", [])), r
    # a release that refuses a LoRA on lm_head whatever Liger says (trl 1.15+): the refusal is not laid on Liger
    code, r = _liger_lora("lm_head")
    if "Applying a PEFT adapter to `lm_head` is not supported" in text:
        assert code == 1 and r["status"] == "fail", r
        assert r["details"]["failed at stage"] == "trainer init" and "Liger" not in r["message"], r
