"""The doctor's own imports of TRL leave transformers as the user's script would find it (issue 30, class 6).

trl 0.17 and 0.18's `grpo_config.py`, with transformers <= 4.50.3 (the releases trl 0.17 accepts from 4.46.0 on),
append "model_init_kwargs" to transformers' module-level `training_args._VALID_DICT_FIELDS` when imported; every
TrainingArguments.__post_init__ then reads that attribute, so an RLOO script's `RLOOConfig(...)` dies with
"'RLOOConfig' object has no attribute 'model_init_kwargs'": only when something imported GRPO first. The doctor
imports GRPO's classes itself (the capture's hooks, the fork server's preload). These tests run the installed TRL and
transformers in a fresh interpreter; they apply where the pair mutates the list, and CI's trl017 lane runs them with
trl 0.17.0 + transformers 4.46.3 (a lane with transformers 4.51 hides the mutation).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_corpus import _unmet

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.trl_pair, pytest.mark.pinned_releases]

_MUTATING = {"trl": ">=0.17,<0.19", "transformers": "<=4.50.3"}


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)


@pytest.fixture
def mutating_pair():
    why = _unmet(_MUTATING)
    if why:
        pytest.skip(f"the installed pair does not mutate transformers' list at import ({why})")


def test_importing_grpo_breaks_rloo_config_without_the_doctor(mutating_pair, tmp_path):
    """The ground truth: the pair really has the side effect (else the tests below prove nothing)."""
    proc = _python("""
        import trl.trainer.grpo_config
        from trl import RLOOConfig
        RLOOConfig(output_dir="out", report_to="none")
    """, tmp_path)
    assert proc.returncode != 0
    assert "'RLOOConfig' object has no attribute 'model_init_kwargs'" in proc.stderr


def test_the_doctors_lookup_leaves_the_list_as_it_was(mutating_pair, tmp_path):
    proc = _python("""
        from transformers import training_args
        before = list(training_args._VALID_DICT_FIELDS)
        from trl_doctor.facts.trl.installed import config_class, trainer_class
        assert trainer_class("grpo") is not None and config_class("grpo") is not None
        assert training_args._VALID_DICT_FIELDS == before, training_args._VALID_DICT_FIELDS
        from trl import RLOOConfig
        print(type(RLOOConfig(output_dir="out", report_to="none")).__name__)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "RLOOConfig"


def test_a_grpo_config_built_under_the_hooks_reads_its_json_field_as_the_job_does(mutating_pair, tmp_path):
    """What the import added is back while GRPOConfig (which has the field) is built: a JSON string becomes a dict,
    as it does in the user's job, where the script's own import of GRPO added it."""
    proc = _python("""
        from transformers import training_args
        from trl_doctor.facts.trl.installed import config_class, dict_fields_for
        GRPOConfig = config_class("grpo")
        with dict_fields_for(GRPOConfig):
            config = GRPOConfig(output_dir="out", report_to="none", model_init_kwargs='{"torch_dtype": "float32"}')
        assert "model_init_kwargs" not in training_args._VALID_DICT_FIELDS
        print(type(config.model_init_kwargs).__name__)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "dict"


def test_an_rloo_script_reaches_its_trainer_under_the_doctor(mutating_pair, tmp_path):
    """TRL's own RLOO example (the corpus case rloo-example-trl017, as its case.yaml runs it) through the real CLI:
    before the doctor put the list back, the check stopped with exit 2 on RLOOConfig's missing attribute."""
    import yaml

    case = ROOT / "corpus" / "rloo-example-trl017"
    spec = yaml.safe_load((case / "case.yaml").read_text())
    command = spec["command"]
    subprocess.run([sys.executable, str(ROOT / "fixtures" / "build.py")], check=True, capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "trl_doctor", "check", "--no-smoke", "--select",
                           "trainer-config,batch-geometry", "--", *command], cwd=case, capture_output=True,
                          text=True, timeout=600)
    assert "model_init_kwargs" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    # it reaches the trainer and is judged as the case says: trainer-config passes, batch-geometry fails the
    # reproduction's 4 eval rows (fewer than one eval batch: accelerate < 1.9 stops the job after its first update)
    assert spec["expected"]["rules"]["trainer-config"] == "pass", spec["expected"]
    assert spec["expected"]["rules"]["batch-geometry"] == "fail", spec["expected"]
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "one eval batch takes" in proc.stdout and "trainer-config" in proc.stdout, proc.stdout[-2000:]
