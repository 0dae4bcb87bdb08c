"""TD019 distributed-setup: device_map under a multi-process launch (H9), PEFT + ZeRO-3 + non-reentrant
checkpointing (H2), PEFT + ZeRO-3 on deepspeed 0.19.2 (H3, KI015), and DeepSpeed without the deepspeed package on
the launch machine. The rule runs through the real command on fixtures/distributed-setup/ and on a launch command;
what the installed trainer does itself is read from its source, so the tests compare with that source too. GPUs
are faked only at NVML (tests/fake_nvml)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from conftest import FIXTURES, check_here, result_of, run_doctor

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

HERE = FIXTURES / "distributed-setup"
FAKE_NVML = Path(__file__).resolve().parent / "fake_nvml"
GPUS_4 = HERE / "gpus" / "4x-a100-80g.json"


def fake_env(gpus: Path | None) -> dict:
    if gpus is None:
        return {}
    path = os.pathsep.join(p for p in (str(FAKE_NVML), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "TRL_DOCTOR_FAKE_GPUS": str(gpus)}


def check(config: Path, *args: str, gpus: Path | None = None) -> tuple[int, dict]:
    code, report = check_here(str(config), "--select", "distributed-setup", "--no-smoke", *args, gpus=gpus)
    return code, result_of(report, "TD019")


def trainer_text() -> str:
    from trl_doctor.facts.trl.installed import trainer_source

    return trainer_source("grpo")[1]


# -- pure pieces --------------------------------------------------------------------------------------------------

def test_which_device_maps_spread_the_model():
    from trl_doctor.rules.distributed_setup import spreads

    for dm in ("auto", "balanced", "balanced_low_0", "sequential", {"model.layers.0": 0, "lm_head": 1}):
        assert spreads(dm), dm
    for dm in ("cuda:0", "cpu", 0, {"": 0}, {"model": 0, "lm_head": 0}, None):
        assert not spreads(dm), dm


def test_mixed_dtype_window_with_real_versions():
    from trl_doctor.facts.trl.versions import load_table
    from trl_doctor.rules.distributed_setup import MIXED_DTYPE_ISSUE, mixed_dtype_problem

    entry = next(e for e in load_table() if e["id"] == MIXED_DTYPE_ISSUE)
    args = dict(zero3_peft=True, quantized=False, base_dtype="bfloat16", trainer_keeps_adapter_dtype=False)
    why = mixed_dtype_problem({"deepspeed": "0.19.2", "peft": "0.17.1"}, entry, **args)
    assert why is not None and "deepspeed 0.19.2" in why and "bfloat16" in why
    for installed in ({"deepspeed": "0.19.3", "peft": "0.17.1"}, {"deepspeed": "0.19.1", "peft": "0.17.1"},
                      {"deepspeed": "0.19.2", "peft": "0.11.1"}, {"deepspeed": None, "peft": "0.17.1"}):
        assert mixed_dtype_problem(installed, entry, **args) is None, installed
    bad = {"deepspeed": "0.19.2", "peft": "0.17.1"}
    assert mixed_dtype_problem(bad, entry, **{**args, "trainer_keeps_adapter_dtype": True}) is None  # trl#6091
    assert mixed_dtype_problem(bad, entry, **{**args, "quantized": True}) is None  # QLoRA: TRL casts the adapters
    assert mixed_dtype_problem(bad, entry, **{**args, "base_dtype": "float32"}) is None  # one dtype throughout
    assert mixed_dtype_problem(bad, entry, **{**args, "zero3_peft": False}) is None


def test_trainer_handling_is_read_from_the_installed_source():
    from trl_doctor.facts.launch.launcher import trainer_distributed_handling

    text = trainer_text()
    h = trainer_distributed_handling("grpo")
    forces = 'gradient_checkpointing_kwargs["use_reentrant"] = True' in text
    assert bool(h.forces_reentrant) == forces
    assert bool(h.keeps_adapter_dtype) == ('["autocast_adapter_dtype"] = False' in text)
    assert bool(h.drops_device_map) == ('model_init_kwargs["device_map"] = None' in text)
    if h.drops_device_map:
        assert set(h.drops_device_map) <= {"MULTI_GPU", "DEEPSPEED", "FSDP", "XLA"}
        line = int(h.drops_device_map_at.rsplit(":", 1)[1])
        assert "device_map" in text.splitlines()[line - 1] or "device_map" in text.splitlines()[line]


def test_checkpointing_default_is_what_the_installed_transformers_does(tmp_path):
    """No use_reentrant in the config: the value the rule reads is the one transformers' own
    gradient_checkpointing_enable() passes to torch's checkpoint on a real (tiny) model."""
    import functools

    import transformers

    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context, Options
    from trl_doctor.facts.launch.settings import checkpointing_reentrant

    model_dir = FIXTURES / "models" / "qwen2-chat"
    config = tmp_path / "gc.yaml"
    config.write_text(f"model_name_or_path: {model_dir}\nreward_funcs: [trl.rewards.think_format_reward]\n"
                      "gradient_checkpointing: true\n")
    with Context(load_config(config), Options(smoke=False)) as ctx:
        value, where = checkpointing_reentrant(ctx)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir))
    model.gradient_checkpointing_enable()
    funcs = [m._gradient_checkpointing_func for m in model.modules() if hasattr(m, "_gradient_checkpointing_func")]
    partials = [f for f in funcs if isinstance(f, functools.partial)]
    if not partials:
        pytest.skip("transformers wraps its checkpoint function in a way this test does not read")
    actual = partials[0].keywords.get("use_reentrant", True)
    from trl_doctor.facts.launch.launcher import trainer_reentrant_default

    if trainer_reentrant_default("grpo") is None:  # the trainer sets nothing: transformers' default decides
        assert value is actual, (value, where)
        assert "transformers" in where
    config.write_text(config.read_text() + "gradient_checkpointing_kwargs: {use_reentrant: true}\n")
    with Context(load_config(config), Options(smoke=False)) as ctx:
        assert checkpointing_reentrant(ctx) == (True, "gradient_checkpointing_kwargs in the config")


# -- through the command ---------------------------------------------------------------------------------------------

def test_device_map_auto_names_the_processes_and_the_fix(built_fixtures):
    code, r = check(HERE / "bad_device_map_auto_4_processes.yaml")
    if 'model_init_kwargs["device_map"] = None' in trainer_text():
        assert code == 0 and r["status"] == "pass" and "so the setting is dropped" in r["details"]["device_map"]
        return
    assert code == 1 and r["status"] == "fail"
    assert "model_init_kwargs sets device_map='auto' and the launch starts 4 training processes" in r["message"]
    assert "in any distributed mode" in r["message"] and "remove device_map from model_init_kwargs" in r["message"]


def test_one_process_with_device_map_auto_passes(built_fixtures):
    code, r = check(HERE / "ok_device_map_auto_one_process.yaml")
    assert code == 0 and r["status"] == "pass" and "one process" in r["details"]["device_map"]


def test_more_processes_from_the_command_line_turn_it_into_a_failure(built_fixtures, tmp_path):
    """Without the trainer's own drop (a model id loaded by a trainer that keeps device_map), the process count
    decides; --num-processes overrides num_processes like `accelerate launch --num_processes`."""
    if 'model_init_kwargs["device_map"] = None' in trainer_text():
        pytest.skip("the installed trainer drops device_map itself under MULTI_GPU: see the launch-command test")
    code, r = check(HERE / "ok_device_map_auto_one_process.yaml", "--num-processes", "2")
    assert code == 1 and r["status"] == "fail" and "2 training processes (--num-processes" in r["message"]


def test_a_script_that_loads_with_device_map_auto_fails_under_two_processes(built_fixtures, monkeypatch):
    """The script loads the policy itself with device_map="auto": no trainer drops that for it."""
    monkeypatch.chdir(HERE)
    proc = run_doctor("check", "--no-smoke", "--select", "distributed-setup", "--num-processes", "2", "--format", "json",
                      "--", "python", "preload_device_map_auto.py")
    assert proc.stdout, proc.stderr
    r = result_of(json.loads(proc.stdout), "TD019")
    assert proc.returncode == 1 and r["status"] == "fail", r
    assert "the script loads the policy with device_map='auto' and the launch starts 2 training processes" in r["message"]
    assert "remove device_map from the script's from_pretrained call" in r["message"]
    proc = run_doctor("check", "--no-smoke", "--select", "distributed-setup", "--num-processes", "1", "--format", "json",
                      "--", "python", "preload_device_map_auto.py")
    r = result_of(json.loads(proc.stdout), "TD019")
    assert proc.returncode == 0 and r["status"] == "pass", r


def test_peft_zero3_non_reentrant(built_fixtures):
    code, r = check(HERE / "bad_peft_zero3_nonreentrant.yaml")
    if 'gradient_checkpointing_kwargs["use_reentrant"] = True' in trainer_text():
        assert code == 0 and r["status"] == "pass"
        assert "forces use_reentrant=True for PEFT + ZeRO-3" in r["details"]["gradient checkpointing"]
        return
    assert code == 1 and r["status"] == "fail"
    assert "PEFT + DeepSpeed ZeRO-3" in r["message"] and "use_reentrant=False (gradient_checkpointing_kwargs" in r["message"]
    assert "CheckpointError" in r["message"] and "{use_reentrant: true}" in r["message"]


def test_zero3_from_the_trainer_configs_deepspeed_json(built_fixtures, tmp_path):
    """`deepspeed: ds.json` in the config is read like the accelerate config's ZeRO stage."""
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}))
    config = tmp_path / "ds.yaml"
    config.write_text((HERE / "bad_peft_zero3_nonreentrant.yaml").read_text()
                      .replace("accelerate_config: accelerate_zero3_4gpu.yaml", "deepspeed: ds.json\nnum_processes: 2")
                      .replace("../", str(FIXTURES) + "/").replace("rewards.length_reward", "trl.rewards.think_format_reward"))
    code, r = check(config)
    assert r["details"]["sharding"].startswith("DeepSpeed ZeRO-3 (`deepspeed: ds.json` in the config)"), r
    assert "gradient checkpointing" in r["details"]


def test_deepspeed_missing_is_judged_on_the_launch_machine_only(built_fixtures):
    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    case = HERE / "bad_deepspeed_not_installed.yaml"
    code, r = check(case, gpus=GPUS_4)
    assert code == 1 and r["status"] == "fail"
    assert "DeepSpeed ZeRO-2 is configured" in r["message"] and "pip3 install deepspeed" in r["message"]
    # checked for the named launch machine in this environment: the launch's environment lacks it
    code, r = check(case, "--target", "4xH100-80GB", "--target-env", "this", gpus=GPUS_4)
    assert code == 1 and r["status"] == "fail" and "environment of the launch on 4xH100-80GB" in r["message"]
    # ... in another environment (--target-env other): what is installed here is not what the job gets
    code, r = check(case, "--target", "4xH100-80GB", "--target-env", "other", gpus=GPUS_4)
    assert code == 0 and r["status"] == "pass" and "needs it on --target 4xH100-80GB" in r["details"]["deepspeed"]
    code, r = check(case, gpus=HERE / "gpus" / "no-driver.json")
    assert code == 0 and r["status"] == "pass" and "no GPU here" in r["details"]["deepspeed"]
