"""TD016 peft-setup: a script that wraps the model with PEFT itself and also passes peft_config to the trainer (Oxen-AI's
GRPO-With-Cargo-Feedback) stops at construction from trl 0.27 ("You passed a `PeftModel` instance together with a
`peft_config`", trl#4713). The capture keeps whether peft_config was given beside the model (both used to fold into
the same `use_peft` keys, and the smoke step rebuilt the trainer from the base model: a miss). Real TRL and PEFT,
the tiny fixture model, the doctor run as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import result_of, run_doctor

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"


def _peft_setup(*extra: str) -> tuple[int, dict]:
    pytest.importorskip("peft")
    proc = run_doctor("check", "--no-smoke", "--select", "peft-setup", "--format", "json", "--",
                      "python", "grpo_peft_model_and_config.py", *extra, cwd=LAUNCH)
    assert proc.stdout, proc.stderr[-3000:]
    return proc.returncode, result_of(json.loads(proc.stdout), "peft-setup")


def test_a_peft_model_with_a_peft_config_fails_where_trl_refuses_it():
    from trl_doctor.facts.trl.installed import trainer_mentions

    if not trainer_mentions("grpo", "You passed a `PeftModel` instance together with a `peft_config`"):
        pytest.skip("this TRL (< 0.27) takes a PeftModel with a peft_config")
    code, r = _peft_setup()
    assert code == 1 and r["status"] == "fail", r["message"]
    assert "wraps the model with PEFT itself (PeftModelForCausalLM" in r["message"]
    assert "grpo_peft_model_and_config.py:" in r["message"]


def test_the_peft_model_alone_is_not_that_finding():
    code, r = _peft_setup("--no-peft-config")
    assert r["status"] != "fail" and "wraps the model with PEFT itself" not in r["message"], r["message"]
