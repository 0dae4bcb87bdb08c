"""TD015 precision-and-attention through the real command: bf16/fp16 against the GPUs (fake NVML), flash
attention against its package and the GPU, and the load dtype against the checkpoint with the meta model's exact
parameter count (fixtures/precision-and-attention/models hold config.json files only: Qwen2.5-0.5B and
Llama-3-8B, both bfloat16 checkpoints).

GPUs come from tests/fake_nvml, put in place of pynvml in this process (the fixture test puts it on PYTHONPATH
of a subprocess). For an installed flash-attn, a stand-in distribution (a `flash_attn` module and its
dist-info metadata, nothing else) is put on PYTHONPATH of a subprocess: the rule only looks the package up.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from test_fixture_cases import fake_pynvml
from conftest import FIXTURES, check_here, result_of, run_json

HERE = FIXTURES / "precision-and-attention"
FAKE_NVML_DIR = Path(__file__).resolve().parent / "fake_nvml"
TRL = Version(version("trl"))
LLAMA_8B = 8_030_261_248  # parameters, counted by hand in tests/test_gpu_capacity.py


@pytest.fixture()
def fake_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())  # the NVML stand-in (tests/fake_nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # the check's worker is another process: it finds the stand-in first on its PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_NVML_DIR), os.environ.get("PYTHONPATH")])))

    def use(gpus):
        monkeypatch.setenv("TRL_DOCTOR_FAKE_GPUS", str(HERE / "gpus" / gpus) if isinstance(gpus, (str, Path)) else json.dumps(gpus))
    return use


def check(config: Path, target: str | None = None, target_env: str | None = None,
          env: dict | None = None) -> tuple[int, dict]:
    """(exit status, TD015's result) of `check CONFIG --select precision-and-attention --no-smoke [--target ...]`: in
    this process (the rule harness, NVML answering through the stand-in), or with `env` (an installed package's
    stand-in on PYTHONPATH) the command in a process of its own."""
    if env:
        more = (*(("--target", target) if target else ()), *(("--target-env", target_env) if target_env else ()))
        code, report = run_json("check", str(config), "--select", "precision-and-attention", "--no-smoke", *more, env=env)
        return code, result_of(report, "TD015")
    from trl_doctor.testing import judge

    asked = {"target": target, **({"target_env": target_env} if target_env else {})}
    judged = judge(config, "precision-and-attention", smoke=False, **asked)
    return judged.code, judged.as_dict()


def fix_twice(config: Path) -> dict:
    """--fix, then a second --fix that must change nothing; the result after the first."""
    code, report = run_json("check", str(config), "--select", "precision-and-attention", "--no-smoke", "--fix")
    result = result_of(report, "TD015")
    assert result["fix"]["applied"] is True and [a["file"] for a in report["applied"]] == [str(config)], result
    text = config.read_text()
    code, again = run_json("check", str(config), "--select", "precision-and-attention", "--no-smoke", "--fix")
    assert again["applied"] == [] and config.read_text() == text
    return result


# -- precision against the GPU ------------------------------------------------------------------------------

def test_bf16_on_a_t4_runs_emulated_and_the_fix_turns_it_off(fixture_copy, fake_gpus):
    """Issue 30, class 4: the installed torch (>= 2.1) counts an emulated bfloat16, and transformers asks it, so bf16
    on a T4 trains, far slower: a warn that names the reading of both sources; torch 2.0 refused it (a fail)."""
    from trl_doctor.rules.precision_and_attention import bf16_below_ampere

    fake_gpus("t4.json")
    config = fixture_copy / "precision-and-attention" / "bad_bf16_t4.yaml"
    code, r = check(config)
    assert bf16_below_ampere().runs is True
    assert code == 0 and r["status"] == "warn", r
    assert "GPU 0 (Tesla T4) has compute capability 7.5, below the 8.0 (Ampere)" in r["message"]
    assert "the installed releases train it emulated" in r["message"]
    assert "torch's cuda.is_bf16_supported() counts an emulated bfloat16" in r["message"]
    assert r["fix"]["description"].startswith("set bf16: false")
    result = fix_twice(config)
    assert result["status"] == "pass" and result["message"].startswith("fp32 on 1 GPU"), result
    assert yaml.safe_load(config.read_text())["bf16"] is False
    assert config.read_text().startswith("# bf16 on a Tesla T4")  # the comment is kept


def test_bf16_by_trl_default(built_fixtures, fake_gpus):
    fake_gpus("t4.json")
    code, r = check(HERE / "bad_bf16_default_t4.yaml")
    from trl_doctor.facts.trl.installed import config_class

    default = next(f.default for f in __import__("dataclasses").fields(config_class("grpo")) if f.name == "bf16")
    if default is None:  # trl >= 0.19: bf16=None becomes `not fp16` (emulated on a T4 with torch >= 2.1: a warn)
        assert r["status"] == "warn", r
        assert "bf16 is on (the installed TRL's default: GRPOConfig.bf16 is None, which its __post_init__ makes " \
               "`not fp16`)" in r["message"]
    else:
        assert r["status"] == "pass" and r["message"].startswith("fp32"), r
    # on an Ampere GPU the same default is fine, and the pass names where bf16 came from
    fake_gpus("a10g.json")
    code, r = check(HERE / "ok_bf16_default_a10g.yaml")
    assert r["status"] == "pass", r
    if default is None:
        assert "bf16 (the installed TRL's default" in r["message"] and "compute capability 8.6" in r["message"]


def test_no_gpu(built_fixtures, fake_gpus, tmp_path):
    fake_gpus("no-driver.json")
    # this machine is not the launch machine: no verdict from its lack of a GPU, and the way to get one
    code, r = check(HERE / "ok_fp16_no_gpu_here.yaml")
    assert code == 0 and r["status"] == "pass" and r["message"].startswith("fp16 (")
    assert "Driver Not Loaded" in r["message"] and "pass --target" in r["message"]
    config = tmp_path / "bf16.yaml"
    config.write_text(f"model_name_or_path: {HERE / 'models' / 'qwen2.5-0.5b'}\nbf16: true\n")
    code, r = check(config)
    assert r["status"] == "pass" and "no GPU here to check it against" in r["message"], r
    # a config that names no precision raises no alarm on a CPU development box
    code, r = check(HERE / "ok_bf16_default_a10g.yaml")
    assert r["status"] == "pass" and "no GPU here to check it against" in r["message"], r
    config.write_text(f"model_name_or_path: {HERE / 'models' / 'qwen2.5-0.5b'}\nuse_cpu: true\nbf16: true\n")
    code, r = check(config)
    assert r["status"] == "pass" and "use_cpu: true" in r["message"], r


def test_vllm_takes_the_checkpoint_dtype(built_fixtures, fake_gpus):
    fake_gpus("t4.json")
    code, r = check(HERE / "bad_vllm_bf16_checkpoint_t4.yaml")
    assert r["status"] == "fail" and "vLLM loads the checkpoint's dtype (bfloat16, config.json)" in r["message"], r
    assert "Bfloat16 is only supported on GPUs with compute capability of at least 8.0" in r["message"]
    code, r = check(HERE / "ok_fp16_t4.yaml")  # the same GPU without vLLM: fp16 over fp32 weights is the recipe
    assert r["status"] == "pass", r


# -- attention ----------------------------------------------------------------------------------------------

def flash_attn_standin(root: Path, dist: str = "flash-attn", module: str = "flash_attn", ver: str = "2.7.4.post1") -> Path:
    """A distribution that is only a name and a version: what the rule looks up, nothing it could run."""
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(f"__version__ = {ver!r}\n")
    info = root / f"{dist.replace('-', '_')}-{ver}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {ver}\n")
    (info / "top_level.txt").write_text(f"{module}\n")
    return root


def gpu_env(gpus: str, *paths: Path) -> dict:
    path = os.pathsep.join([str(FAKE_NVML_DIR), *map(str, paths), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, "TRL_DOCTOR_FAKE_GPUS": str(HERE / "gpus" / gpus)}


def test_flash_attention_without_its_package(fixture_copy, fake_gpus):
    fake_gpus("a100-80g.json")
    config = fixture_copy / "precision-and-attention" / "bad_flash_attn_missing.yaml"
    code, r = check(config)
    assert code == 1 and r["status"] == "fail", r
    assert "model_init_kwargs: flash_attention_2, but the package flash-attn (module flash_attn) is not installed" in r["message"]
    assert r["details"]["attn_implementation"] == "flash_attention_2 (model_init_kwargs)"
    result = fix_twice(config)
    assert result["status"] == "pass", result
    written = yaml.safe_load(config.read_text())["model_init_kwargs"]
    assert written == {"dtype": "bfloat16", "attn_implementation": "sdpa"}  # the other key is kept


def test_flash_attention_against_the_gpu(built_fixtures, tmp_path):
    site = flash_attn_standin(tmp_path / "site")
    config = tmp_path / "fa2.yaml"
    config.write_text(f"model_name_or_path: {HERE / 'models' / 'qwen2.5-0.5b'}\nbf16: false\nfp16: true\n"
                      "attn_implementation: flash_attention_2\n")
    code, r = check(config, env=gpu_env("t4.json", site))
    assert r["status"] == "fail", r
    assert "GPU 0 (Tesla T4) has compute capability 7.5 and FlashAttention2 needs 8.0 (Ampere)" in r["message"]
    assert r["fix"]["description"] == "set attn_implementation: sdpa in fa2.yaml"
    assert r["details"]["flash attention package"] == "flash-attn 2.7.4.post1"
    code, r = check(config, env=gpu_env("a100-80g.json", site))
    assert r["status"] == "pass" and "FlashAttention2 (flash-attn 2.7.4.post1) on compute capability 8.0" in r["message"], r
    # FlashAttention 3 is a Hopper kernel with a package of its own
    config.write_text(config.read_text().replace("flash_attention_2", "flash_attention_3"))
    code, r = check(config, env=gpu_env("a100-80g.json", site))
    assert r["status"] == "fail" and "flash-attn-3 (module flash_attn_interface) is not installed" in r["message"], r


def test_flash_attention_that_does_not_import_against_this_torch(built_fixtures, tmp_path):
    """Installed is not enough: a flash-attn wheel built for another torch fails at import with an undefined symbol."""
    config = tmp_path / "fa2.yaml"
    config.write_text(f"model_name_or_path: {HERE / 'models' / 'qwen2.5-0.5b'}\nbf16: true\ndtype: bfloat16\n"
                      "attn_implementation: flash_attention_2\n")
    code, r = check(config, env=gpu_env("h100-80g.json", HERE / "site" / "flash-attn-broken"))
    assert code == 1 and r["status"] == "fail", r
    assert "flash-attn 2.8.3 does not import against torch" in r["message"] and "undefined symbol" in r["message"]
    assert r["details"]["flash attention import"].startswith("ImportError: ")
    assert r["fix"]["description"] == "set attn_implementation: sdpa in fa2.yaml"
    # the same package importing: FlashAttention2 on the H100 passes
    code, r = check(config, env=gpu_env("h100-80g.json", HERE / "site" / "flash-attn-2.8.3"))
    assert r["status"] == "pass" and "FlashAttention2 (flash-attn 2.8.3) on compute capability 9.0" in r["message"], r


def test_flash_attention_with_fp32_weights_needs_autocast(built_fixtures, tmp_path):
    site = HERE / "site" / "flash-attn-2.8.3"
    config = tmp_path / "fa2.yaml"
    config.write_text(f"model_name_or_path: {HERE / 'models' / 'qwen2.5-0.5b'}\nbf16: false\n"
                      "attn_implementation: flash_attention_2\n")
    code, r = check(config, env=gpu_env("h100-80g.json", site))
    assert r["status"] == "fail" and "loaded in float32" in r["message"] and "neither bf16 nor fp16" in r["message"], r
    config.write_text(config.read_text().replace("bf16: false", "bf16: true"))  # accelerate's autocast casts them
    code, r = check(config, env=gpu_env("h100-80g.json", site))
    assert r["status"] == "pass", r


def test_flash_attention_for_a_target_in_another_environment(built_fixtures, tmp_path):
    """--target with --target-env other: the package is the launch environment's (not judged), never a pass that
    reads "FlashAttention2 (None)"; the target's GPUs are still judged."""
    config = tmp_path / "fa2.yaml"
    config.write_text(f"model_name_or_path: {HERE / 'models' / 'qwen2.5-0.5b'}\nbf16: true\ndtype: bfloat16\n"
                      "attn_implementation: flash_attention_2\n")
    env = gpu_env("no-driver.json")
    code, r = check(config, "8xH100-80GB", "other", env=env)
    assert r["status"] == "pass" and "None" not in r["message"], r
    assert "FlashAttention2 (its package not judged here) on compute capability 9.0" in r["message"]
    assert "not judged (the launch machine's Python environment is another" in r["details"]["flash attention package"]
    config.write_text(config.read_text().replace("bf16: true\ndtype: bfloat16", "fp16: true\nbf16: false\ndtype: float16"))
    code, r = check(config, "1xT4", "other", env=env)
    assert r["status"] == "fail" and "compute capability 7.5" in r["message"], r
    # --target in this environment: the missing package is judged
    code, r = check(config, "1xA100-80GB", "this", env=env)
    assert r["status"] == "fail" and "is not installed" in r["message"], r


# -- the load dtype -----------------------------------------------------------------------------------------

def test_lora_base_loaded_in_fp32(fixture_copy, fake_gpus):
    fake_gpus("a100-80g.json")
    config = fixture_copy / "precision-and-attention" / "bad_lora_fp32_base.yaml"
    # on a T4 no bfloat16 weights are proposed: only the bf16 finding's own fix, where bf16 is on
    fake_gpus("t4.json")
    code, r = check(config)
    assert "model_init_kwargs" not in (r["fix"] or {}).get("description", ""), r
    fake_gpus("a100-80g.json")
    code, r = check(config)
    assert code == 0 and r["status"] == "warn", r
    # 8,030,261,248 parameters × 4 bytes = 29.9 GiB, × 2 bytes = 15.0 GiB
    assert "takes 29.9 GiB instead of 15.0 GiB (8,030,261,248 parameters), 15.0 GiB for no gain" in r["message"]
    assert r["details"]["policy parameters"] == f"{LLAMA_8B:,} (meta-device model)"
    if r["fix"] is None:  # the mixed precision is not bf16 (trl < 0.19 defaults to fp32): no dtype is written
        assert TRL < Version("0.19")
        return
    result = fix_twice(config)
    assert result["status"] == "pass", result
    key = r["fix"]["description"].split("model_init_kwargs.")[1].split(":")[0]
    assert yaml.safe_load(config.read_text())["model_init_kwargs"] == {key: "bfloat16"}


def test_full_fine_tune_that_fp32_does_not_fit(built_fixtures, fake_gpus):
    fake_gpus("a100-80g.json")
    code, r = check(HERE / "bad_full_finetune_fp32_8b.yaml")
    assert r["status"] == "warn" and r["fix"] is None, r
    assert "take 119.7 GiB, more than GPU 0 (NVIDIA A100-SXM4-80GB)'s 80.0 GiB" in r["message"]
    assert "(59.8 GiB in bfloat16)" in r["message"]
    # the same small model keeps its fp32 master weights without a word
    code, r = check(HERE / "ok_bf16_default_a10g.yaml")
    assert r["status"] == "pass" and "fp32 master weights for a full fine-tune, 7.4 GiB" in r["message"], r


def test_fp16_weights_under_fp16_mixed_precision(fixture_copy, fake_gpus):
    fake_gpus("t4.json")
    config = fixture_copy / "precision-and-attention" / "bad_fp16_weights_fp16.yaml"
    code, r = check(config)
    assert code == 1 and r["status"] == "fail" and "Attempting to unscale FP16 gradients" in r["message"], r
    result = fix_twice(config)
    assert result["status"] == "pass", result
    assert yaml.safe_load(config.read_text())["model_init_kwargs"] == {"dtype": "float32"}


# -- no false alarm, and the cost --------------------------------------------------------------------------

def test_adds_little_to_a_check(built_fixtures, fake_gpus):
    """With the TRL config and the meta model loaded by the rules that share them, the rule takes well under a second."""
    fake_gpus("a100-80g.json")
    _, report = check_here(str(HERE / "bad_lora_fp32_base.yaml"), "--no-smoke",
                         "--select", "trainer-config,gpu-capacity,precision-and-attention")
    assert result_of(report, "TD015")["duration_s"] < 1.0


# -- Gemma's attention (docs/coverage.md H6) -----------------------------------------------------------------------------

def _gemma2_class():
    from transformers import Gemma2ForCausalLM

    return Gemma2ForCausalLM


def test_gemma2_with_sdpa(fixture_copy, fake_gpus):
    fake_gpus("a100-80g.json")
    config = fixture_copy / "precision-and-attention" / "bad_gemma2_sdpa.yaml"
    code, r = check(config)
    tf = version("transformers")
    if _gemma2_class()._supports_sdpa is False:  # the installed transformers refuses sdpa for Gemma 2 at loading
        assert code == 1 and r["status"] == "fail", r
        assert (f"model_init_kwargs: sdpa, but transformers {tf}'s Gemma2ForCausalLM has no sdpa path" in r["message"]
                and "attn_logit_softcapping=50.0" in r["message"]
                and "does not support an attention implementation through torch.nn.functional.scaled_dot_product_attention"
                in r["message"]), r
    else:  # it runs it, and says in training that Gemma 2 should train with eager
        assert code == 0 and r["status"] == "warn", r
        assert "gemma2 trains with sdpa attention (model_init_kwargs: sdpa)" in r["message"], r
        assert "transformers#32390" in r["message"]
    assert r["details"]["Gemma attention"] == "gemma2, model_init_kwargs: sdpa"
    assert r["fix"]["description"] == "set model_init_kwargs.attn_implementation: eager in bad_gemma2_sdpa.yaml"
    result = fix_twice(config)
    assert result["status"] == "pass" and "gemma2 with eager attention (model_init_kwargs: eager)" in result["message"]
    assert yaml.safe_load(config.read_text())["model_init_kwargs"] == {"attn_implementation": "eager"}


def test_gemma2_default_attention_is_the_installed_transformers(fixture_copy, fake_gpus):
    """No attention named: the verdict follows what the installed transformers picks for Gemma2ForCausalLM."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fake_gpus("a100-80g.json")
    config = fixture_copy / "precision-and-attention" / "bad_gemma2_default_attention.yaml"
    with torch.device("meta"):
        picked = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(fixture_copy / "models" / "gemma2-tiny")
                                                  ).config._attn_implementation
    code, r = check(config)
    said = f"no attn_implementation set: transformers {version('transformers')}'s default for Gemma2ForCausalLM is {picked}"
    assert r["details"]["Gemma attention"] == f"gemma2, {said}", r
    if picked == "eager":
        assert r["status"] == "pass" and f"gemma2 with eager attention ({said})" in r["message"], r
        return
    assert r["status"] == "warn" and f"gemma2 trains with {picked} attention ({said})" in r["message"], r
    # nothing chose the attention: eager goes into model_init_kwargs
    result = fix_twice(config)
    assert result["status"] == "pass", result
    assert yaml.safe_load(config.read_text())["model_init_kwargs"] == {"attn_implementation": "eager"}


def test_gemma2_with_flash_attention_gets_eager_not_sdpa(fixture_copy, fake_gpus):
    fake_gpus("a100-80g.json")
    config = fixture_copy / "precision-and-attention" / "bad_gemma2_flash_attention.yaml"
    code, r = check(config)
    assert code == 1 and r["status"] == "fail", r
    assert "flash-attn (module flash_attn) is not installed" in r["message"]
    assert r["message"].endswith("or use `attn_implementation: eager`"), r["message"]
    # the Gemma finding is reported beside the missing package, not hidden by it
    (also,) = r["details"]["also"]
    assert also.startswith("warn: gemma2 trains with flash_attention_2 attention (attn_implementation: flash_attention_2)")
    assert r["fix"]["description"] == "set attn_implementation: eager in bad_gemma2_flash_attention.yaml"
    result = fix_twice(config)
    assert result["status"] == "pass", result
    assert yaml.safe_load(config.read_text())["attn_implementation"] == "eager"


def test_gemma3_text_on_sdpa_warns(built_fixtures, fake_gpus, tmp_path):
    """A Gemma 3 text model (config.json only: the rule builds it on the meta device) left to transformers' default."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if "gemma3_text" not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"transformers {version('transformers')} has no Gemma 3")
    fake_gpus("a100-80g.json")
    model = tmp_path / "gemma3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 320, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "max_position_embeddings": 512, "dtype": "bfloat16"}))
    config = tmp_path / "g3.yaml"
    config.write_text("model_name_or_path: gemma3\nreward_funcs: [trl.rewards.think_format_reward]\n"
                      "model_init_kwargs: {dtype: bfloat16}\n")
    code, r = check(config)
    findings = [r["message"], *r["details"].get("also", [])]
    gemma = [m for m in findings if "gemma3_text trains with" in m]
    assert gemma and "train Gemma with `attn_implementation: eager`" in gemma[0], r
    result = fix_twice(config)
    assert yaml.safe_load(config.read_text())["model_init_kwargs"] == {"dtype": "bfloat16", "attn_implementation": "eager"}
    assert "gemma3_text with eager attention (model_init_kwargs: eager)" in result["message"], result


# -- a recipe's ModelConfig keys the script never passes on (the mini-R1 recipe's defect) ----------------------

def _model_keys_verdict(*command: str) -> dict:
    from conftest import run_doctor

    proc = run_doctor("check", "--no-smoke", "--select", "precision-and-attention", "--format", "json", "--", *command,
                      cwd=FIXTURES / "launch")
    assert proc.stdout, proc.stderr
    return result_of(json.loads(proc.stdout), "precision-and-attention")


def test_model_config_keys_that_never_reach_the_model(built_fixtures, tmp_path):
    """TRL's parser puts `attn_implementation` and the dtype into ModelConfig; only the script decides whether the
    model loads with them. A script that hands the trainer the model's name without model_init_kwargs, or loads the
    model itself without them, trains with transformers' defaults: a warning naming each key and where it was set."""
    import dataclasses

    from trl import ModelConfig

    dtype = "dtype" if "dtype" in {f.name for f in dataclasses.fields(ModelConfig)} else "torch_dtype"
    by_name = ["python", "grpo_lora_recipe.py", "--model_name_or_path", "../models/qwen2-chat", "--dataset_name",
               "../data/chat.jsonl", "--output_dir", "out/keys", "--num_generations", "2",
               "--per_device_train_batch_size", "2", "--max_completion_length", "32", "--report_to", "none"]
    result = _model_keys_verdict(*by_name, f"--{dtype}", "bfloat16", "--attn_implementation", "sdpa")
    assert result["status"] == "warn", result
    assert result["message"].startswith(
        f"the command line sets `{dtype}: bfloat16` and `attn_implementation: sdpa` for TRL's ModelConfig, but they "
        "never reach the model: the script gives GRPOTrainer the model's name and no `model_init_kwargs`")
    assert "transformers' default attention" in result["message"]
    assert result["details"]["ModelConfig keys that do not reach the model"] == {
        dtype: "bfloat16 (the command line)", "attn_implementation": "sdpa (the command line)"}

    # the same keys given to the trainer through model_init_kwargs (a recipe's mapping) reach the model
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({dtype: "bfloat16", "attn_implementation": "sdpa",
                                      "model_init_kwargs": {dtype: "bfloat16", "attn_implementation": "sdpa"}}))
    result = _model_keys_verdict(*by_name, "--config", str(recipe))
    assert "ModelConfig keys that do not reach the model" not in result["details"], result

    # a script that loads the model itself with ModelConfig's dtype but not its attention
    own = ["python", "grpo_system_prompt.py", "--config", "grpo_system_prompt.yaml", f"--{dtype}", "bfloat16"]
    assert "ModelConfig keys that do not reach the model" not in _model_keys_verdict(*own)["details"]
    result = _model_keys_verdict(*own, "--attn_implementation", "sdpa")
    assert result["status"] == "warn", result
    assert result["message"].startswith(
        "the command line sets `attn_implementation: sdpa` for TRL's ModelConfig, but it never reaches the model: the "
        "script loads the model itself without it")
    assert "pass it to the script's from_pretrained (attn_implementation=model_args.attn_implementation)" in result["message"]


# torch 2.0.1's torch/cuda/__init__.py, is_bf16_supported as released (before the emulated fallback of torch 2.1)
TORCH_201 = '''
def is_bf16_supported():
    r"""Returns a bool indicating if the current CUDA/ROCm device supports dtype bfloat16"""
    if torch.version.hip:
        return True

    cu_vers = torch.version.cuda
    if cu_vers is not None:
        cuda_maj_decide = int(cu_vers.split('.')[0]) >= 11
    else:
        cuda_maj_decide = False
    return torch.cuda.get_device_properties(torch.cuda.current_device()).major >= 8 and cuda_maj_decide
'''


@pytest.mark.release_free
def test_the_bf16_reading_of_torch_2_0_and_of_the_installed_torch():
    from trl_doctor.rules.precision_and_attention import _torch_emulates

    assert _torch_emulates(TORCH_201) == (False, "torch's cuda.is_bf16_supported() requires compute capability 8.0")
    emulates, words = _torch_emulates()  # torch 2.13: including_emulation=True, with the bfloat16-tensor fallback
    assert emulates is True, words



def test_a_model_the_script_loads_without_a_dtype_takes_from_pretrained_default(built_fixtures, tmp_path):
    """A script that loads the policy itself with no dtype gets from_pretrained's own default: 'auto' from
    transformers 5 (the checkpoint's dtype, here bfloat16), float32 before. TRL's ModelConfig default (float32 in
    trl 1.x) is no part of it: the script never built a ModelConfig, and the capture records no dtype."""
    import shutil

    from transformers import __version__ as transformers_version

    model = tmp_path / "qwen2-bf16"
    shutil.copytree(FIXTURES / "models" / "qwen2-chat", model)
    config = json.loads((model / "config.json").read_text())
    config.pop("torch_dtype", None)
    config["dtype"] = "bfloat16"
    (model / "config.json").write_text(json.dumps(config))
    script = tmp_path / "own_load.py"
    script.write_text(
        "from datasets import load_dataset\n"
        "from transformers import AutoModelForCausalLM\n"
        "from trl import GRPOConfig, GRPOTrainer\n\n"
        "def reward_len(completions, **kwargs):\n"
        "    return [-abs(20 - len(c[-1]['content'])) for c in completions]\n\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(model)!r})\n"
        f"dataset = load_dataset('json', data_files={str(FIXTURES / 'data' / 'chat.jsonl')!r}, split='train')\n"
        "args = GRPOConfig(output_dir='out', per_device_train_batch_size=2, num_generations=2,\n"
        "                  max_completion_length=16, report_to='none')\n"
        "GRPOTrainer(model=model, reward_funcs=reward_len, args=args, train_dataset=dataset).train()\n")
    from conftest import run_doctor

    proc = run_doctor("check", "--no-smoke", "--select", "precision-and-attention", "--format", "json", "--",
                      "python", script.name, cwd=tmp_path)
    assert proc.stdout, proc.stderr
    result = result_of(json.loads(proc.stdout), "precision-and-attention")
    load = result["details"]["load dtype"]
    assert "ModelConfig" not in load, load
    assert "the script's from_pretrained without a dtype" in load, load
    if Version(transformers_version).major >= 5:
        assert load.startswith("bfloat16"), load
    else:
        assert load.startswith("float32"), load
