"""The launch machine, not the checking machine: a recipe written for GPUs, checked on a machine without one (a
laptop, a CPU CI runner), gets no verdict from the missing GPU; `--target NxMODEL` judges the GPUs it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import check_here, result_of, run_doctor, run_json

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "launch-machine"
RECIPE = str(HERE / "recipe_r1_math.yaml")
GPU_RULES = "gpu-capacity,precision-and-attention,batch-geometry,version-skew,vllm-tokenizer-drift"


def trl_has_vllm_mode() -> bool:
    import dataclasses

    from trl import GRPOConfig

    return "vllm_mode" in {f.name for f in dataclasses.fields(GRPOConfig)}


def static_rules() -> str:
    """The recipe is today's (vllm_mode: trl 0.18 and later); an older TRL rightly refuses that key (trainer-config)."""
    return GPU_RULES + (",trainer-config" if trl_has_vllm_mode() else "")


@pytest.fixture(autouse=True)
def no_gpu_here(built_fixtures):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: it may be the launch machine")


def test_a_gpu_recipe_checked_without_a_gpu_fails_nothing():
    code, report = check_here(RECIPE, "--no-smoke", "--select", static_rules())
    assert code == 0, [(r["id"], r["status"], r["message"]) for r in report["results"] if r["status"] != "pass"]
    gpu = result_of(report, "gpu-capacity")
    assert gpu["status"] == "skip" and "pass --target" in gpu["message"]
    if trl_has_vllm_mode():  # tf32 is refused by TrainingArguments here, not on the launch machine: it still builds
        config = result_of(report, "trainer-config")
        assert config["status"] == "pass" and "tf32=None" in config["details"]["set by the doctor to build it here"]
    precision = result_of(report, "precision-and-attention")
    assert precision["status"] == "pass" and "not judged (this is not the launch machine" in \
        precision["details"]["flash attention package"]


@pytest.mark.slow
def test_the_probes_and_the_step_run_with_what_this_machine_has():
    code, report = run_json("check", RECIPE, "--select", "smoke-step,logits-contract")
    logits = result_of(report, "logits-contract")
    # the pair trl#2770 was reported on (trl 0.15 + transformers 4.48, the legacy lane): Qwen2 ignores
    # logits_to_keep there, a real finding, a warn (it costs memory but trains; no launch GPU to say it overflows);
    # everywhere else the probe passes
    from importlib.metadata import version

    from packaging.version import Version

    broken_pair = Version(version("trl")) < Version("0.16") and Version(version("transformers")) < Version("4.49")
    assert logits["status"] == ("warn" if broken_pair else "pass"), logits
    assert code == 0, report
    smoke = result_of(report, "smoke-step")
    assert smoke["status"] == "pass"
    assert "tf32 off on this CPU" in smoke["details"]["precision"]  # what it changed, said


def test_target_judges_the_named_gpus_in_this_environment():
    """--target names the launch machine's GPUs; with --target-env this the launch runs in this Python environment:
    flash-attn, missing here, is missing there (issue 21: judge the launch machine). With the default (auto) a torch
    built without CUDA is no GPU job's environment: the package is named, not judged."""
    args = ("check", RECIPE, "--no-smoke", "--select", "precision-and-attention", "--target", "8xH100-80GB")
    code, report = run_json(*args, "--target-env", "this")
    precision = result_of(report, "precision-and-attention")
    missing = precision["details"].get("flash attention package", "").startswith("not installed")
    if missing:
        assert code == 1 and precision["status"] == "fail", precision
        assert "flash_attention_2, but the package flash-attn (module flash_attn) is not installed" in precision["message"]
    else:  # a machine with flash-attn: nothing to blame
        assert precision["status"] == "pass", precision
    from trl_doctor.context.env import torch_cuda_version

    code, report = run_json(*args)
    precision = result_of(report, "precision-and-attention")
    if missing and torch_cuda_version() is None:
        assert code == 0 and precision["status"] == "pass", precision
        assert "not judged" in precision["details"]["flash attention package"], precision["details"]


def test_target_env_without_target_is_one_line_and_exit_2():
    proc = run_doctor("check", RECIPE, "--no-smoke", "--target-env", "this")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "give --target too" in proc.stderr


def test_target_judges_the_named_gpus():
    code, report = check_here(RECIPE, "--no-smoke", "--select", GPU_RULES, "--target", "8xH100-80GB",
                            "--target-env", "other")
    assert code == 0, report
    geometry = result_of(report, "batch-geometry")
    assert "at 8 processes (--target 8xH100-80GB" in geometry["message"]
    gpu = result_of(report, "gpu-capacity")
    assert gpu["status"] == "pass" and gpu["details"]["judged against"].startswith("--target 8xH100-80GB")
    assert "compute capability 9.0" in result_of(report, "precision-and-attention")["message"]


def test_target_an_older_gpu_fails_what_it_cannot_do():
    code, report = check_here(RECIPE, "--no-smoke", "--select", "precision-and-attention", "--target", "1xT4")
    precision = result_of(report, "precision-and-attention")
    assert code == 1 and precision["status"] == "fail"
    # TrainingArguments refuses tf32 below Ampere; bf16 there trains emulated with torch >= 2.1 (issue 30): a warn
    assert precision["message"].startswith("tf32: true but GPU 0 (Tesla T4)"), precision["message"]
    assert any(a.startswith("warn: bf16 is on") and "Tesla T4" in a and "emulated" in a
               for a in precision["details"]["also"]), precision["details"]["also"]


def test_target_memory_for_a_small_gpu():
    code, report = check_here(RECIPE, "--no-smoke", "--select", "gpu-capacity", "--target", "2xl4")
    gpu = result_of(report, "gpu-capacity")
    assert gpu["details"]["judged against"].startswith("--target 2xL4")  # model names are case-insensitive


@pytest.mark.parametrize("spec", ["3xFOO", "0xH100-80GB", "H100"])
def test_a_bad_target_is_one_line_and_exit_2(spec):
    proc = run_doctor("check", RECIPE, "--target", spec)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"trl-doctor: error: --target {spec!r}")


def test_deepspeed_missing_is_judged_on_the_launch_machine_only(tmp_path):
    """A ZeRO-3 accelerate config without the deepspeed package: one verdict (distributed-setup's), a fail only on
    the launch machine; version-skew does not repeat it."""
    from importlib.util import find_spec

    if find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    recipe = tmp_path / "ds.yaml"
    recipe.write_text((HERE / "recipe_r1_math.yaml").read_text().replace("../", str(HERE.parent) + "/")
                      + f"accelerate_config: {HERE.parent / 'launch' / 'zero3_4gpu.yaml'}\n")
    rules = ("--no-smoke", "--select", "distributed-setup,version-skew")
    code, report = run_json("check", str(recipe), *rules)
    dist, skew = result_of(report, "distributed-setup"), result_of(report, "version-skew")
    assert dist["status"] == "pass" and "needs it on the launch machine" in dist["details"]["deepspeed"], dist
    assert "deepspeed" not in skew["message"], skew
    # on a machine with GPUs (NVML faked), this is the launch machine: accelerate launch would stop here
    from test_fixture_cases import fake_gpu_env

    env = fake_gpu_env(Path(__file__).resolve().parent.parent / "fixtures" / "batch-geometry" / "gpus" / "four-a100.json")
    code, report = run_json("check", str(recipe), *rules, env=env)
    dist, skew = result_of(report, "distributed-setup"), result_of(report, "version-skew")
    assert code == 1 and dist["status"] == "fail" and "deepspeed package is not installed" in dist["message"]
    assert "deepspeed" not in skew["message"], skew


def test_target_is_parsed_once_by_the_front_door_and_carried_to_the_worker():
    """Issue 32 item 4: the front door parses --target (exit 2 there when bad) and the worker's options carry the
    GPUs it found across the pipe; the launch fact reads those, not the text again."""
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context
    from trl_doctor.facts.launch.launcher import launch
    from trl_doctor.front.settings import Asked, options_for, resolve
    from trl_doctor.options import Options

    settings = resolve(Asked.of(target="2xL4", isolated=True), None)
    assert [g["name"] for g in settings.target_gpus] == ["NVIDIA L4", "NVIDIA L4"]
    options = Options.from_dict(json.loads(json.dumps(options_for(settings).to_dict())))
    assert options == options_for(settings) and options.target_gpus == settings.target_gpus
    # the fact reads the carried GPUs: a text that says otherwise is not parsed again
    carried = Options(smoke=False, target="1xT4", target_gpus=settings.target_gpus)
    with Context(load_config(Path(RECIPE)), carried) as ctx:
        found = launch(ctx)
    assert [g["name"] for g in found.gpus] == ["NVIDIA L4", "NVIDIA L4"] and found.target == "2xL4"
