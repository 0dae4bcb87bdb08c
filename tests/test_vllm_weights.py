"""TD020 vllm-weights through the real command, and its readers on the source of other releases.

The fixture cases (fixtures/vllm-weights/expected.yaml, run by test_fixture_cases.py) give the verdicts on the
installed TRL: 4-bit / 8-bit with server and colocate mode, ZeRO-3 without gathering and trl 0.14-0.15's
vllm_device (those two fail in the legacy lane, trl 0.15.2). Here: the weight-sync reader on excerpts of trl 0.14.0,
0.15.2 and 0.19.1 (releases no lane installs), the quantization sources, vLLM's registry reader, the architecture
verdict where vllm is installed, and that no healthy fixture of any rule trips the rule.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from test_fixture_cases import fake_pynvml
from conftest import FIXTURES, result_of, run_json

from trl_doctor.facts.vllm.support import quantization, read_sync, registry_architectures

HERE = FIXTURES / "vllm-weights"
FAKE_NVML_DIR = Path(__file__).resolve().parent / "fake_nvml"
FOUR_A100 = HERE / "gpus" / "4x-a100-80g.json"


def check(config: Path, env: dict | None = None) -> tuple[int, dict]:
    code, report = run_json("check", str(config), "--select", "vllm-weights", "--no-smoke", **({"env": env} if env else {}))
    return code, result_of(report, "TD020")


@pytest.fixture()
def fake_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())  # the NVML stand-in (tests/fake_nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_NVML_DIR), os.environ.get("PYTHONPATH")])))

    def use(gpus: Path):
        monkeypatch.setenv("TRL_DOCTOR_FAKE_GPUS", str(gpus))
    return use


# -- the weight sync, read from source ------------------------------------------------------------------------

# trl 0.14.0, GRPOTrainer._prepare_inputs: the PEFT model's state dict goes to vLLM as it is (trl#2698)
TRL_0140 = '''
        if self.args.use_vllm:
            # First, have main process load weights if needed
            if self.state.global_step != self._last_loaded_step:
                with unwrap_model_for_generation(model, self.accelerator) as unwrapped_model:
                    state_dict = unwrapped_model.state_dict()
                if self.accelerator.is_main_process:
                    llm_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
                    llm_model.load_weights(state_dict.items())
'''

# trl 0.15.2, GRPOTrainer._move_model_to_vllm
TRL_0152 = '''
    def _move_model_to_vllm(self):
        with unwrap_model_for_generation(
            self.model, self.accelerator, gather_deepspeed3_params=self.args.ds3_gather_for_generation
        ) as unwrapped_model:
            if is_compiled_module(unwrapped_model):
                unwrapped_model = unwrapped_model._orig_mod
            if is_peft_model(unwrapped_model):
                unwrapped_model.merge_adapter()
                state_dict = unwrapped_model.state_dict()
                # Remove base_model and base_layer prefixes
                state_dict = {
                    k.removeprefix("base_model.model.").replace(".base_layer", ""): v for k, v in state_dict.items()
                }
                # Remove values with adapter prefix (example: "_lora")
                state_dict = {k: v for k, v in state_dict.items() if unwrapped_model.prefix not in k}
                # When module to save, remove its prefix and discard the original module
                state_dict = {
                    k.replace("modules_to_save.default.", ""): v
                    for k, v in state_dict.items()
                    if "original_module" not in k
                }
            else:
                state_dict = unwrapped_model.state_dict()
            if self.accelerator.is_main_process:
                llm_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
                llm_model.load_weights(state_dict.items())
'''

# trl 0.19.1, GRPOTrainer._move_model_to_vllm (abridged): gathers under ZeRO-3 whatever ds3_gather_for_generation says
TRL_0191 = '''
    def _move_model_to_vllm(self):
        deepspeed_plugin = self.accelerator.state.deepspeed_plugin
        zero_stage_3 = deepspeed_plugin is not None and deepspeed_plugin.zero_stage == 3
        if zero_stage_3:
            import deepspeed
            gather_if_zero3 = deepspeed.zero.GatheredParameters
        else:
            gather_if_zero3 = nullcontext
        if is_peft_model(self.model):
            with gather_if_zero3(list(self.model.parameters())):
                self.model.merge_adapter()
                for name, param in self.model.named_parameters():
                    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                    if self.model.prefix in name:
                        continue
                    if "original_module" in name:
                        continue
                    name = name.replace("modules_to_save.default.", "")
                    if self.vllm_mode == "server" and self.accelerator.is_main_process:
                        self.vllm_client.update_named_param(name, param.data)
                    elif self.vllm_mode == "colocate":
                        llm_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
                        llm_model.load_weights([(name, param.data)])
'''


def test_sync_reader_on_trl_0140_finds_no_peft_handling():
    r = read_sync([("trl/trainer/grpo_trainer.py", TRL_0140)])
    assert r.push and "load_weights(state_dict.items())" in r.push
    assert (r.merges_peft, r.strips_base_layer, r.drops_adapter, r.strips_modules_to_save) == (None, None, None, None)
    assert r.ds3_gather_flag is None and r.quantizes_4bit_engine is None and r.refuses_8bit is None


def test_sync_reader_on_trl_0152_finds_the_peft_renames_and_the_gather_flag():
    r = read_sync([("trl/trainer/grpo_trainer.py", TRL_0152)])
    assert r.merges_peft and r.strips_base_layer and r.drops_adapter
    assert "modules_to_save.default." in r.strips_modules_to_save and "original_module" in r.drops_original_module
    assert r.ds3_gather_flag and "ds3_gather_for_generation" in r.ds3_gather_flag
    assert r.quantizes_4bit_engine is None and r.refuses_8bit is None


def test_sync_reader_on_trl_0191_gathers_regardless_of_the_flag():
    r = read_sync([("trl/trainer/grpo_trainer.py", TRL_0191)])
    assert r.push and r.merges_peft and r.strips_modules_to_save and r.drops_original_module
    assert r.ds3_gather_flag is None


def test_sync_reader_finds_the_colocated_engine_quantization():
    text = '''
            quantization = None
            if is_bitsandbytes_available():
                for _, module in model.named_modules():
                    if isinstance(module, bnb.nn.Linear4bit):
                        quantization = "bitsandbytes"
                        break
                    elif isinstance(module, bnb.nn.Linear8bitLt):
                        raise ValueError("vLLM does not support in-flight 8-bit quantization.")
            self.llm = LLM(model=model.name_or_path, quantization=quantization)
    def sync_weights(self):
        for name, param in self._iter_named_params():
            self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights([(name, param)])
'''
    r = read_sync([("trl/generation/vllm_generation.py", text)])
    assert r.quantizes_4bit_engine.startswith("trl/generation/vllm_generation.py:6:")
    assert "in-flight 8-bit" in r.refuses_8bit


# -- quantization sources ---------------------------------------------------------------------------------

def test_quantization_sources(tmp_path):
    assert quantization({"load_in_4bit": "true"}, {}, None).kind == "4bit"
    assert quantization({"load_in_8bit": True}, {}, None).kind == "8bit"
    q = quantization({}, {"quantization_config": {"load_in_4bit": True}}, None)
    assert q.kind == "4bit" and "model_init_kwargs.quantization_config" in q.source
    assert quantization({}, {"quantization_config": {"quant_method": "gptq", "bits": 4}}, None).kind is None
    (tmp_path / "config.json").write_text(json.dumps(
        {"quantization_config": {"quant_method": "bitsandbytes", "_load_in_4bit": True, "load_in_4bit": True}}))
    q = quantization({}, {}, tmp_path)
    assert q.kind == "4bit" and "config.json" in q.source
    assert quantization({"load_in_4bit": False}, {"dtype": "bfloat16"}, FIXTURES / "models" / "qwen2-chat").kind is None


# -- vLLM's registry ----------------------------------------------------------------------------------------

def test_registry_reader_takes_the_dicts_vllm_models_merges():
    text = '''
_TEXT_GENERATION_MODELS = {
    # [Decoder-only]
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("qwen2", "Qwen2ForCausalLM"),
}
_EMBEDDING_MODELS = {"BertModel": ("bert", "BertEmbeddingModel")}
_NOT_MERGED_MODELS = {"GhostForCausalLM": ("ghost", "Ghost")}
_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_EMBEDDING_MODELS,
}
'''
    assert registry_architectures(text) == {"LlamaForCausalLM", "Qwen2ForCausalLM", "BertModel"}


def test_unsupported_architecture_fails_where_vllm_is_installed(built_fixtures):
    pytest.importorskip("vllm")
    code, r = check(HERE / "arch_unsupported.yaml")
    assert code == 1 and r["status"] == "fail", r
    assert "Tiny5ForCausalLM" in r["message"] and "use_vllm: false" in r["message"]
    assert "registry.py" in r["details"]["vLLM architectures"]


def test_supported_architecture_passes_where_vllm_is_installed(built_fixtures):
    pytest.importorskip("vllm")
    code, r = check(HERE / "ok_bf16_colocate.yaml")
    assert r["status"] == "pass" and "architectures)" in r["details"]["vLLM architectures"], r


def test_architecture_not_judged_without_vllm(built_fixtures):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed: the architecture is judged (test above)")
    code, r = check(HERE / "arch_unsupported.yaml")
    assert code == 0 and r["status"] == "pass"
    assert "not judged" in r["details"]["vLLM architectures"] and "not judged" in r["message"]


# -- no false alarm ------------------------------------------------------------------------------------------

def test_server_overlap_is_judged_on_the_visible_gpus(built_fixtures, fake_gpus, monkeypatch):
    """All 4 GPUs training with a local server fails (the server's GPU also trains); the same launch with
    CUDA_VISIBLE_DEVICES hiding GPU 0 (where the server runs) passes."""
    fake_gpus(FOUR_A100)
    code, r = check(HERE / "bad_server_local_all_gpus.yaml")
    if r["details"]["vLLM mode"].startswith("device"):
        pytest.skip("this TRL has no server mode (vllm_device): bad_server_local_all_gpus is judged as G3 there")
    assert code == 1 and r["status"] == "fail", r
    assert "CUDA_VISIBLE_DEVICES=0 trl vllm-serve" in r["message"]
    assert "CUDA_VISIBLE_DEVICES=1,2,3 accelerate launch --num_processes 3" in r["message"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2,3")
    code, r = check(HERE / "bad_server_local_all_gpus.yaml")
    assert code == 0 and r["status"] == "pass", r


def test_a_quantization_config_object_in_model_init_kwargs_is_seen(built_fixtures):
    """A script that sets `model_init_kwargs` itself hands TRL the BitsAndBytesConfig object (TRL's
    get_quantization_config returns one), not the mapping a recipe writes: the 4-bit policy under vLLM server mode
    fails here as the recipe's mapping does, and precision-and-attention says the weights load quantized
    (corpus/qlora_grpo_vllm: both passed while the object went unread)."""
    import dataclasses

    from conftest import run_doctor
    from trl import GRPOConfig

    if "vllm_mode" not in {f.name for f in dataclasses.fields(GRPOConfig)}:
        pytest.skip("this TRL has no vllm_mode (server mode from trl 0.18): the launch's --vllm_mode stops its parser")

    command = ["python", "grpo_qlora_init_kwargs.py", "--model_name_or_path", "../models/qwen2-chat", "--dataset_name",
               "../data/chat.jsonl", "--output_dir", "out/qlora-object", "--num_generations", "2",
               "--per_device_train_batch_size", "2", "--max_completion_length", "32", "--report_to", "none",
               "--use_peft", "--load_in_4bit", "--lora_target_modules", "q_proj", "v_proj",
               "--use_vllm", "--vllm_mode", "server"]
    proc = run_doctor("check", "--no-smoke", "--select", "vllm-weights,precision-and-attention", "--format", "json",
                      "--", *command, cwd=FIXTURES / "launch")
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    weights = result_of(report, "vllm-weights")
    assert weights["status"] == "fail", weights
    assert "`model_init_kwargs.quantization_config` (bitsandbytes 4-bit) with vLLM (server mode)" in weights["message"]
    assert "packed 4-bit tensors" in weights["message"], weights
    precision = result_of(report, "precision-and-attention")
    text = precision["message"] + json.dumps(precision.get("details") or {})
    assert "bitsandbytes 4bit loading" in text, precision
    assert "weights load as float32" not in text, precision
