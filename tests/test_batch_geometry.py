"""TD010 batch-geometry: the installed TRL's batch arithmetic, read from its code, on the config's values.

The reading is checked against the installed config class itself (built with its world_size set to a process
count), the rule runs through the real command on the fixtures, --fix is applied to a private copy, and the PPO
cases run against the real trl 1.12.0 (the last release with PPO) from PyPI. GPUs come from the fake NVML layer
(tests/fake_nvml), put in place of pynvml for the in-process runs exactly as the fixture test puts it on
PYTHONPATH for a subprocess.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import warnings
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from test_fixture_cases import fake_pynvml
from conftest import FIXTURES, check_here, real_trl, result_of, run_json, trl_has
from trl_doctor.facts.trl.installed import config_class

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

HERE = FIXTURES / "batch-geometry"
FAKE_NVML = Path(__file__).resolve().parent / "fake_nvml" / "pynvml.py"
TRL = Version(version("trl"))


@pytest.fixture()
def fake_gpus(monkeypatch):
    """Make NVML report the GPUs of a fixtures/batch-geometry/gpus/*.json file (or a dict) in this process."""
    import json

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())  # the NVML stand-in (tests/fake_nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    from trl_doctor.facts.launch.launcher import _default_accelerate_config

    if _default_accelerate_config() is not None:  # hide this machine's accelerate default config
        # (only then: HF_HOME is read when the libraries are imported, so the checks start fresh workers)
        monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    # the check's worker is another process: it finds the stand-in first on its PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_NVML.parent), os.environ.get("PYTHONPATH")])))

    def use(gpus):
        monkeypatch.setenv("TRL_DOCTOR_FAKE_GPUS", str(HERE / "gpus" / gpus) if isinstance(gpus, (str, Path)) else json.dumps(gpus))
    return use


def check(config: Path, *args: str) -> tuple[int, dict]:
    code, report = check_here(config, "--select", "batch-geometry", "--no-smoke", *args)  # --fix: the command
    return code, result_of(report, "TD010")


def a100(n: int) -> dict:
    one = {"name": "NVIDIA A100-SXM4-80GB", "total_mib": 81920, "free_mib": 81050, "compute_capability": "8.0"}
    return {"gpus": [dict(one) for _ in range(n)]}


# -- the reading against the installed config class ------------------------------------------------------

def test_reading_agrees_with_the_installed_config_class():
    """Every config of a grid: the reading finds a violation in the config class exactly where the class itself
    (built at that world_size) raises, and TRL's first error is one of the reading's messages."""
    from trl_doctor.facts.trl.geometry import Evaluator as _State, config_values, installed_reading
    from trl_doctor.facts.trl.geometry import probe_class as _probe_class
    from trl_doctor.rules.batch_geometry import _same

    for trainer in ("grpo", "rloo"):
        cls = config_class(trainer)
        fields = {f.name for f in dataclasses.fields(cls)}
        reading = installed_reading(trainer, cls)
        grid = {"per_device_train_batch_size": [2, 3, 4], "num_generations": [1, 2, 4, 8],
                "gradient_accumulation_steps": [1, 3], "eval_strategy": ["no", "steps"],
                "per_device_eval_batch_size": [3, 8]}
        if "generation_batch_size" in fields:
            grid["generation_batch_size"] = [None, 12]
            grid["steps_per_generation"] = [None, 2]
        checked = found = 0
        for procs in (1, 2, 4):
            for combo in itertools.product(*grid.values()):
                raw = {k: v for k, v in zip(grid, combo) if v is not None and k in fields}
                problems, _ = _State(reading, procs).run(config_values(cls, raw))
                in_class = [p for p in problems if p.kind == "config"]
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        _probe_class(cls, procs)(output_dir="/tmp/trl-doctor-unused", use_cpu=True, **raw)
                    error = None
                except ValueError as exc:
                    error = str(exc)
                checked += 1
                found += bool(problems)
                assert bool(in_class) == bool(error), (trainer, procs, raw, in_class, error)
                if error:
                    assert any(_same(error, p.message) for p in in_class), (trainer, procs, raw, in_class, error)
        assert found > checked // 4  # the grid has plenty of violations, not only healthy configs


def test_reading_covers_the_trainer_checks_of_older_trl():
    """Where the checks live in the trainer's __init__ (trl < 0.18), they are read from its source too."""
    from trl_doctor.facts.trl.geometry import installed_reading

    reading = installed_reading("grpo", config_class("grpo"))
    kinds = {u.kind for u in reading.units}
    assert "trainer" in kinds or "config" in kinds
    if "generation_batch_size" not in {f.name for f in dataclasses.fields(config_class("grpo"))}:
        assert any(u.kind == "trainer" and "grpo_trainer.py" in u.where for u in reading.units)


# -- the rule through the command ------------------------------------------------------------------------

def test_one_process_names_the_numbers_and_the_smallest_fix(built_fixtures, fake_gpus):
    fake_gpus("one-a10g.json")
    code, r = check(HERE / "bad_grpo_one_process.yaml")
    assert code == 1 and r["status"] == "fail"
    assert "at 1 process (1 visible GPU" in r["message"]
    assert "num_generations (8)" in r["message"] or "number of generations per prompt (8)" in r["message"]
    if TRL >= Version("0.17"):  # gradient accumulation is part of the generation batch
        assert "set gradient_accumulation_steps: 4" in r["message"]
        assert r["fix"]["description"].startswith("set gradient_accumulation_steps: 4 in bad_grpo_one_process.yaml")
    else:  # trl 0.15-0.16 divide per-device × processes only: accumulation does not help there
        assert "set num_generations: 2" in r["message"]
    assert r["details"]["geometry"]["processes"] == 1
    assert any(site.endswith(")") for site in r["details"]["read from"])


def test_the_same_config_on_four_processes_passes(built_fixtures, fake_gpus):
    fake_gpus(a100(4))
    code, r = check(HERE / "bad_grpo_one_process.yaml")
    assert code == 0 and r["status"] == "pass", r
    assert "at 4 processes (4 visible GPUs" in r["message"]
    # and the config written for 4 processes fails when launched on one, whatever the GPUs say
    code, r = check(HERE / "ok_grpo_four_processes.yaml", "--num-processes", "1")
    assert r["status"] == "fail" and "at 1 process (--num-processes)" in r["message"], r


def test_process_count_sources(built_fixtures, fake_gpus, tmp_path, monkeypatch):
    fake_gpus(a100(4))
    base = f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\nper_device_train_batch_size: 4\nnum_generations: 4\n"
    config = tmp_path / "c.yaml"

    def procs(extra: str = "", *args: str) -> tuple[int, str]:
        config.write_text(base + extra)
        _, r = check(config, *args)
        return r["details"]["geometry"]["processes"], r["details"]["processes"]

    assert procs() == (4, "4 (4 visible GPUs: accelerate launch starts one process per GPU)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    assert procs()[0] == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert procs("num_processes: 3\n")[1].startswith("3 (`num_processes` in the config")
    assert procs("num_processes: 3\n", "--num-processes", "2") == (2, "2 (--num-processes)")
    (tmp_path / "acc.yaml").write_text("distributed_type: MULTI_GPU\nnum_machines: 2\nnum_processes: 16\n")
    assert procs("accelerate_config: acc.yaml\n") == (16, "16 (`accelerate_config: acc.yaml` sets num_processes 16)")
    assert procs("config_file: acc.yaml\n")[0] == 16  # accelerate launch's own flag
    from trl_doctor.facts.trl.installed import trl_root

    if (trl_root() / "accelerate_configs" / "zero2.yaml").is_file():  # TRL's built-in names (trl >= 1.0's CLI)
        shipped = yaml.safe_load((trl_root() / "accelerate_configs" / "zero2.yaml").read_text())["num_processes"]
        assert procs("accelerate_config: zero2\n")[0] == shipped
    _, words = procs("accelerate_config: missing.yaml\n")
    assert words.startswith("4 (4 visible GPUs")  # a name that is no file falls through, and says so
    home = tmp_path / "hf"
    (home / "accelerate").mkdir(parents=True)
    (home / "accelerate" / "default_config.yaml").write_text("num_processes: 6\n")
    monkeypatch.setenv("HF_HOME", str(home))
    assert procs()[0] == 6  # accelerate launch reads its default config when none is named
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    fake_gpus({"error": "driver_not_loaded"})
    config.write_text(base)
    _, r = check(config)
    assert r["details"]["geometry"]["processes"] == 1
    assert "pass --num-processes N" in r["details"]["process count note"]


def test_the_launch_fact_reads_the_accelerate_settings(built_fixtures, fake_gpus, tmp_path):
    """The Launch fact: processes and where they come from, the visible GPUs, and the accelerate config read
    as written (its DeepSpeed JSON too); TRL's built-in configs by name."""
    import json

    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context
    from trl_doctor.facts.launch.launcher import DeepSpeedSettings, launch
    from trl_doctor.facts.trl.installed import trl_root

    fake_gpus(a100(2))
    base = f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\nper_device_train_batch_size: 4\nnum_generations: 4\n"
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "none"}}}))
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 8\n"
                                       "deepspeed_config:\n  deepspeed_config_file: ds.json\n")
    config = tmp_path / "c.yaml"

    def read(extra: str = ""):
        config.write_text(base + extra)
        with Context(load_config(config)) as ctx:
            found = launch(ctx)
            assert launch(ctx) is found  # one answer per check
            return found

    found = read("accelerate_config: acc.yaml\n")
    assert (found.processes, found.processes_from) == (8, "`accelerate_config: acc.yaml` sets num_processes 8")
    assert len(found.gpus) == 2 and found.nvml_error is None and found.visible_note is None
    acc = found.accelerate
    assert acc.path == (tmp_path / "acc.yaml").resolve() and acc.named_by == "`accelerate_config: acc.yaml`"
    assert (acc.distributed_type, acc.mixed_precision, acc.fsdp) == ("DEEPSPEED", "bf16", None)
    assert acc.deepspeed == DeepSpeedSettings(3, "cpu", "none", str(tmp_path / "ds.json"))

    found = read()
    assert found.accelerate is None and (found.processes, found.processes_note) == (2, None)
    root = trl_root() / "accelerate_configs"
    if (root / "zero2.yaml").is_file() and (root / "fsdp1.yaml").is_file():  # TRL's built-in names (trl >= 1.0)
        zero2 = read("accelerate_config: zero2\n").accelerate
        assert zero2.distributed_type == "DEEPSPEED" and zero2.deepspeed.zero_stage == 2
        assert (zero2.deepspeed.offload_optimizer, zero2.deepspeed.offload_param) == ("none", "none")
        fsdp = read("accelerate_config: fsdp1\n").accelerate
        assert fsdp.distributed_type == "FSDP" and fsdp.fsdp.version == 1 and fsdp.fsdp.sharding_strategy == "FULL_SHARD"
    fake_gpus({"error": "driver_not_loaded"})
    found = read()
    assert found.gpus == () and found.nvml_error and found.gpus_missing == found.nvml_error and found.processes == 1


def test_all_violations_at_once_and_fix(fixture_copy, fake_gpus):
    fake_gpus("one-a10g.json")
    config = fixture_copy / "batch-geometry" / "bad_many_at_once.yaml"
    before = config.read_text()
    code, r = check(config)
    assert code == 1 and r["status"] == "fail"
    violations = r["details"]["violations"]
    fields = {f.name for f in dataclasses.fields(config_class("grpo"))}
    if "generation_batch_size" in fields:  # trl >= 0.18: the three of them, each with its change
        assert r["message"].startswith("3 batch-geometry violations at 4 processes (`accelerate_config: "
                                       "accelerate_4gpu.yaml` sets num_processes 4)")
        assert "can not be both configured" in violations[0] and "remove generation_batch_size" in violations[0]
        assert "(3 * 4)" in violations[1] and "set per_device_eval_batch_size: 4" in violations[1]
        assert "generation_batch_size (20)" in violations[2] and "fixed by the same change" in violations[2]
    else:  # trl 0.15-0.17: train and eval batches against num_generations
        assert len(violations) == 2 and all("(8)" in v for v in violations)
    assert all(f"({i})" in r["message"] for i in range(1, len(violations) + 1))
    code, report = run_json("check", str(config), "--select", "batch-geometry", "--no-smoke", "--fix")
    fixed = result_of(report, "TD010")
    assert code == 0 and fixed["status"] == "pass" and fixed["fix"]["applied"] is True, fixed
    assert [a["file"] for a in report["applied"]] == [str(config)]
    after = config.read_text()
    assert after != before and after.startswith("# Three problems")  # comments kept
    written = yaml.safe_load(after)
    if "generation_batch_size" in fields:
        assert "generation_batch_size" not in written and written["per_device_eval_batch_size"] == 4
    # a second --fix changes nothing
    code, report = run_json("check", str(config), "--select", "batch-geometry", "--no-smoke", "--fix")
    assert code == 0 and report["applied"] == [] and config.read_text() == after


@pytest.mark.parametrize("case, key, value", [
    ("bad_eval_batch.yaml", "per_device_eval_batch_size", 4),
    ("bad_num_generations_one.yaml", "num_generations", 2),
])
def test_fix_writes_the_smallest_change(fixture_copy, case, key, value):
    config = fixture_copy / "batch-geometry" / case
    code, r = check(config, "--num-processes", "1")
    assert code == 1 and r["status"] == "fail" and f"set {key}: {value}" in r["message"], r
    code, report = run_json("check", str(config), "--select", "batch-geometry", "--no-smoke", "--num-processes", "1", "--fix")
    assert code == 0 and result_of(report, "TD010")["status"] == "pass"
    assert yaml.safe_load(config.read_text())[key] == value
    code, report = run_json("check", str(config), "--select", "batch-geometry", "--no-smoke", "--num-processes", "1", "--fix")
    assert report["applied"] == []


def test_rloo(built_fixtures):
    code, r = check(HERE / "bad_rloo_k.yaml", "--num-processes", "1")
    fields = {f.name for f in dataclasses.fields(config_class("rloo"))}
    if "rloo_k" in fields and "num_generations" not in fields:  # PPO-style RLOO (trl < 0.22)
        assert r["status"] == "fail" and "multiple of rloo_k, inexact division: 4 / 3" in r["message"], r
        assert "set gradient_accumulation_steps: 3" in r["message"]
    elif "rloo_k" in fields:  # trl 0.22-0.24: rloo_k, deprecated, becomes num_generations (3), which 4 does not hold
        assert r["status"] == "fail" and "must be divisible by num_generations (3)" in r["message"], r
    else:  # GRPO-style RLOO: rloo_k is no field (trainer-config reports the key), num_generations 2 divides 4
        assert r["status"] == "pass", r
    code, r = check(HERE / "ok_rloo.yaml", "--num-processes", "3")
    assert r["status"] == "pass", r


# -- PPO ----------------------------------------------------------------------------------------------------

@pytest.mark.skipif(trl_has("ppo"), reason="the installed TRL has a PPOConfig")
def test_ppo_skips_where_trl_has_none(built_fixtures):
    code, r = check(HERE / "bad_ppo_mini_batches.yaml", "--num-processes", "1")
    assert code == 0 and r["status"] == "skip" and "has no PPOConfig" in r["message"]


def _ppo_cases(env: dict | None) -> None:
    kw = {"env": env} if env else {}

    def run(case: str, procs: str = "1") -> dict:
        _, report = run_json("check", str(HERE / case), "--select", "batch-geometry", "--no-smoke",
                             "--num-processes", procs, **kw)
        return result_of(report, "TD010")

    r = run("bad_ppo_whiten.yaml")
    assert r["status"] == "fail" and "Per-rank minibatch size 2 is insufficient for whitening" in r["message"], r
    assert "set gradient_accumulation_steps: 4" in r["message"]
    r = run("ok_ppo.yaml", "4")
    assert r["status"] == "pass", r
    # 4 per device × 2 accumulation steps × 4 processes (× 2 mini-batches before trl 0.17, which multiplied them in)
    assert r["details"]["geometry"]["batch_size"] in (32, 64)
    r = run("bad_ppo_mini_batches.yaml", "2")
    assert r["details"]["trl"] == (version("trl") if env is None else "1.12.0")
    source = r["details"]["read from"][-1]
    if r["status"] == "fail":
        assert "`local_batch_size` must be a multiple of `num_mini_batches`, inexact division: 6 / 4 = 1.5" in r["message"]
        if r["details"]["trl"] == "1.12.0":
            assert "[trl/experimental/ppo/ppo_trainer.py:469]" in r["message"]
        assert r["details"]["geometry"]["local_batch_size"] == 6 and "ppo_trainer.py" in source
        assert "set gradient_accumulation_steps: 4" in r["message"] and r["fix"] is not None
    else:  # trl < 0.17: local_batch_size = per device × accumulation × num_mini_batches
        assert r["details"]["geometry"]["local_batch_size"] == 24, r


@pytest.mark.skipif(not trl_has("ppo"), reason="the installed TRL has no PPOConfig (removed in trl 1.13)")
def test_ppo_installed(built_fixtures):
    _ppo_cases(None)


@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_ppo_on_trl_1_12(built_fixtures):
    """PPO's mini-batch arithmetic in the last TRL release that has PPO (trl.experimental.ppo, 1.12.0)."""
    if trl_has("ppo"):
        pytest.skip("the installed TRL has PPO (tested above)")
    _ppo_cases(real_trl("1.12.0"))


# -- no false alarm, and the cost --------------------------------------------------------------------------

def test_adds_little_to_a_check(built_fixtures):
    """Beyond importing the installed TRL's config class (which trainer-config loads too), the rule takes well
    under a second."""
    config = HERE / "bad_many_at_once.yaml"
    _, report = check_here(str(config), "--select", "trainer-config,batch-geometry", "--no-smoke")
    assert result_of(report, "TD010")["duration_s"] < 1.0
