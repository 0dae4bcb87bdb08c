"""Vision-language policies (issue 30, class 3) through the real command on a real Qwen2-VL checkpoint
(fixtures/_build_vlm.py: Qwen2VLForConditionalGeneration with a vision tower, tiny random weights).

TRL builds a VLM from its checkpoint's own architecture (trl/trainer/utils.py create_model_from_path:
`config.architectures[0]`), which no AutoModelForCausalLM mapping covers. Before, four rules crashed building a causal-LM
twin (`error`, exit 1 on a setup that trains), the estimate had no model, and peft-setup said `pass` "not checked",
hiding a LoRA target that matches nothing. Now the meta-device model is the whole VLM (vision tower included), the rules
that need the miniature twin say `skip` and why, and the LoRA targets are judged against the VLM's own modules.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import result_of, run_json

FOLDER = "vision-language"


def _statuses(report: dict) -> dict[str, str]:
    return {r["rule"]: r["status"] for r in report["results"]}


def test_a_healthy_vlm_setup_has_no_rule_error_and_the_twin_rules_skip_with_why(built_fixtures):
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_text.yaml"))
    statuses = _statuses(report)
    assert "error" not in statuses.values(), report["results"]
    assert code == 0, statuses
    for rule in ("smoke-step", "logits-contract"):
        r = result_of(report, rule)
        assert r["status"] == "skip", r
        assert "Qwen2VLForConditionalGeneration is a vision-language model" in r["message"], r["message"]
    termination = result_of(report, "eos-termination")
    assert "vision-language model" in termination["details"]["termination probe"], termination["details"]


def _parameters_in_checkpoint(folder: Path) -> tuple[int, int]:
    """(all parameters, the vision tower's) as the checkpoint's safetensors header lists them."""
    header = folder / "model.safetensors"
    with header.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        tensors = json.loads(f.read(size))
    total = vision = 0
    for name, info in tensors.items():
        if name == "__metadata__":
            continue
        n = 1
        for d in info["shape"]:
            n *= d
        total += n
        vision += n if "visual" in name else 0
    return total, vision


def test_the_estimate_counts_the_vision_tower(built_fixtures):
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_text.yaml"), "--select",
                            "gpu-capacity", "--target", "1xA100-80GB", "--no-smoke")
    r = result_of(report, "gpu-capacity")
    assert code == 0 and r["status"] == "pass", r
    total, vision = _parameters_in_checkpoint(built_fixtures / "models" / "qwen2vl-tiny")
    assert vision > 0
    counted = r["details"]["estimate inputs"]["policy parameters"]
    assert counted.startswith(f"{total:,} "), (counted, total, vision)


def test_lora_targets_are_judged_against_the_vlms_modules(built_fixtures):
    code, report = run_json("check", str(built_fixtures / FOLDER / "ok_qwen2vl_lora.yaml"), "--select", "peft-setup",
                            "--no-smoke")
    r = result_of(report, "peft-setup")
    assert code == 0 and r["status"] == "pass", r
    assert "q_proj, v_proj match modules of Qwen2VLForConditionalGeneration" in r["message"]

    code, report = run_json("check", str(built_fixtures / FOLDER / "bad_qwen2vl_lora_no_match.yaml"), "--select",
                            "peft-setup", "--no-smoke")
    r = result_of(report, "peft-setup")
    assert code == 1 and r["status"] == "fail", r
    assert "'query_key_value'" in r["message"] and "matches no module" in r["message"], r["message"]


@pytest.mark.release_free
def test_peft_setup_skips_when_the_model_cannot_be_built(built_fixtures, tmp_path):
    """A part of the LoRA setup the doctor could not judge is a skip with the reason, never a pass: an encoder-decoder
    checkpoint (T5) that no causal-LM class builds leaves the LoRA targets unread (before: `pass` "not checked")."""
    import shutil

    from transformers import T5Config

    model = tmp_path / "model"
    shutil.copytree(built_fixtures / "models" / "qwen2-chat", model)
    config = T5Config(vocab_size=320, d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16).to_dict()
    config["architectures"] = ["T5ForConditionalGeneration"]
    (model / "config.json").write_text(json.dumps(config))
    recipe = (built_fixtures / FOLDER / "ok_qwen2vl_lora.yaml").read_text()
    (tmp_path / "cfg.yaml").write_text(recipe.replace("../models/qwen2vl-tiny", str(model))
                                       .replace("../data/prompts.jsonl", str(built_fixtures / "data" / "prompts.jsonl")))
    shutil.copy(built_fixtures / FOLDER / "rewards.py", tmp_path / "rewards.py")
    code, report = run_json("check", str(tmp_path / "cfg.yaml"), "--select", "peft-setup", "--no-smoke")
    r = result_of(report, "peft-setup")
    assert r["status"] == "skip", r
    assert r["message"].startswith(f"LoRA on the base model {model} not judged: target modules "), r["message"]
