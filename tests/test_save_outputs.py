"""save-outputs (TD022) on launch commands: a script that passes its model's keyword arguments to its tokenizer (as
TRL's examples/scripts/online_dpo.py does) trains, then stops at the first checkpoint or the final save_model, where
transformers keeps the dtype in the tokenizer's init kwargs. The expectation is the installed transformers' own: the
test saves such a tokenizer first, and the rule must fail exactly where that raises. Any trainer a script builds is
judged (saving is transformers' code): TRL's SFTTrainer too, which the other rules do not check."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from conftest import run_doctor

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"


def _transformers_keeps_the_dtype() -> str | None:
    """The error saving a tokenizer loaded with dtype= raises with the installed transformers, or None."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(LAUNCH.parent / "models" / "qwen2-chat", dtype=torch.float32)
    try:
        with tempfile.TemporaryDirectory() as folder:
            tok.save_pretrained(folder)
    except TypeError as exc:
        return str(exc)
    return None


def _save_outputs(*command: str) -> tuple[int, dict]:
    proc = run_doctor("check", "--no-smoke", "--format", "json", "--", *command, cwd=LAUNCH)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    return proc.returncode, next(r for r in report["results"] if r["rule"] == "save-outputs")


def test_a_dtype_passed_to_the_tokenizer_fails_where_transformers_cannot_save_it():
    raised = _transformers_keeps_the_dtype()
    code, result = _save_outputs("python", "grpo_tokenizer_dtype.py")
    if raised is None:
        assert result["status"] == "pass", result
        return
    assert code == 1 and result["status"] == "fail", result
    assert "will stop at the tokenizer: TypeError: Object of type dtype is not JSON serializable" in result["message"]
    assert "dtype=torch.float32 (torch.dtype)" in result["message"], result["message"]
    assert "drop dtype from the tokenizer's from_pretrained call" in result["fix"]["description"], result["fix"]


def test_a_trainer_the_other_rules_do_not_check_is_judged_for_saving():
    code, result = _save_outputs("python", "sft_script.py")
    assert result["status"] == "pass", result
    assert result["details"]["tokenizer"] == "saves", result
