"""TD001 end to end: the GPT-2-like checkpoint without a pad token, the fix, the re-check, and the
version-dependent verdict, all through the real command and the installed TRL."""

from __future__ import annotations

import json

from conftest import check_here, result_of, run_doctor, run_json
from trl_doctor.facts.trl.installed import trainer_sets_pad_to_eos


def test_gpt2_without_pad_token_is_reported_and_fixed(fixture_copy):
    config = fixture_copy / "pad-token" / "bad_gpt2_nopad.yaml"
    model = fixture_copy / "models" / "gpt2-nopad"
    code, report = check_here(str(config), "--no-smoke")
    pad = result_of(report, "pad-token")
    sets_pad, evidence = trainer_sets_pad_to_eos("grpo")
    if sets_pad:
        # the installed GRPOTrainer fills the pad itself: a warning that says so, exit 0 unless --fail-on warn
        assert pad["status"] == "warn"
        assert "will silently set pad_token = eos_token '<|endoftext|>'" in pad["message"]
        assert code == 0
        assert run_doctor("check", str(config), "--no-smoke", "--fail-on", "warn").returncode == 1
    else:
        assert pad["status"] == "fail"
        assert "Asking to pad" in pad["message"]
        assert code == 1
    assert pad["details"]["trainer behaviour"] == evidence
    assert pad["fix"] == {
        "description": pad["fix"]["description"],
        "applied": False,
        "unsafe": False,
        "applicability": "safe",
        "files": sorted(str(model / f) for f in ("config.json", "generation_config.json", "tokenizer_config.json",
                                                 "special_tokens_map.json") if (model / f).exists()),
    }
    assert "pad_token" not in json.loads((model / "tokenizer_config.json").read_text())

    # --fix writes the pad token, aligns the model files, and the re-check passes
    code, report = run_json("check", str(config), "--select", "pad-token", "--fix", "--fail-on", "warn")
    pad = result_of(report, "pad-token")
    assert code == 0, report
    assert pad["status"] == "pass"
    assert pad["fix"]["applied"] is True
    assert json.loads((model / "tokenizer_config.json").read_text())["pad_token"] == "<|endoftext|>"
    assert json.loads((model / "config.json").read_text())["pad_token_id"] == 0
    assert json.loads((model / "generation_config.json").read_text())["pad_token_id"] == 0
    assert "harmless for GRPOTrainer" in pad["details"]["pad = eos"]
    backups = sorted(p.name for p in model.glob("*.trl-doctor.bak*"))
    assert backups == sorted(f"{f}.trl-doctor.bak" for f in ("config.json", "generation_config.json", "tokenizer_config.json",
                                                              "special_tokens_map.json") if (model / f).exists())
    assert "pad_token" not in json.loads((model / "tokenizer_config.json.trl-doctor.bak").read_text())

    # a second --fix changes nothing: same bytes, no new backups
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    code, report = run_json("check", str(config), "--select", "pad-token", "--fix")
    assert code == 0 and report["applied"] == []
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


def test_llama3_fix_prefers_the_reserved_pad_token_over_eos(fixture_copy):
    config = fixture_copy / "pad-token" / "bad_llama3_nopad.yaml"
    model = fixture_copy / "models" / "llama3-nopad"
    proc = run_doctor("check", str(config), "--select", "TD001", "--fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tok_cfg = json.loads((model / "tokenizer_config.json").read_text())
    assert tok_cfg["pad_token"] == "<|finetune_right_pad_id|>"
    pad_id = json.loads((model / "config.json").read_text())["pad_token_id"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    assert tok.pad_token_id == pad_id != tok.eos_token_id
    assert pad_id < json.loads((model / "config.json").read_text())["vocab_size"]


def test_mismatch_fix_aligns_model_files_without_touching_the_tokenizer(fixture_copy):
    config = fixture_copy / "pad-token" / "bad_pad_mismatch.yaml"
    model = fixture_copy / "models" / "qwen2-padmismatch"
    tok_before = (model / "tokenizer_config.json").read_bytes()
    diff = run_doctor("check", str(config), "--select", "pad-token", "--diff")
    assert '-  "pad_token_id": 7' in diff.stdout and '+  "pad_token_id": 0' in diff.stdout
    assert json.loads((model / "config.json").read_text())["pad_token_id"] == 7  # --diff changes nothing
    code, report = run_json("check", str(config), "--select", "pad-token", "--fix")
    assert code == 0 and result_of(report, "TD001")["status"] == "pass"
    assert json.loads((model / "config.json").read_text())["pad_token_id"] == 0
    assert (model / "tokenizer_config.json").read_bytes() == tok_before
