"""A recipe's launch-machine settings while its script runs to the trainer here (trl_doctor/capture/machine.py): what
only the launch machine lacks is relaxed and named; what the launch refuses too (a typo, a class without the
implementation) stops the script at its line, as it would there. Real scripts, the real command, the fixture model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, run_doctor

pytestmark = pytest.mark.trl_pair  # what transformers refuses, and how, is the release's

MODEL = FIXTURES / "models" / "qwen2-chat"
DATA = FIXTURES / "data" / "chat.jsonl"


def _script(tmp_path: Path, load: str, after: str = "") -> Path:
    script = tmp_path / "train.py"
    script.write_text(f'''
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

model = {load}
{after}
tokenizer = AutoTokenizer.from_pretrained({str(MODEL)!r})
dataset = load_dataset("json", data_files={str(DATA)!r}, split="train")
args = GRPOConfig(output_dir="out", num_generations=2, per_device_train_batch_size=2, max_completion_length=8,
                  report_to="none")
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                      args=args, train_dataset=dataset)
''')
    return script


def _check(tmp_path: Path, script: Path, *extra: str):
    proc = run_doctor("check", "--no-smoke", "--select", "precision-and-attention", *extra, "--format", "json", "--",
                      "python", str(script), cwd=tmp_path)
    return proc, (json.loads(proc.stdout) if proc.stdout.strip() else None)


def _flash_missing_here() -> bool:
    from importlib.util import find_spec

    import torch

    return find_spec("flash_attn") is None or not torch.cuda.is_available()


def test_flash_attention_is_relaxed_and_a_typo_is_not(tmp_path):
    if not _flash_missing_here():
        pytest.skip("FlashAttention loads on this machine: nothing to relax")
    load = f'AutoModelForCausalLM.from_pretrained({str(MODEL)!r}, attn_implementation="flash_attention_2")'
    proc, report = _check(tmp_path, _script(tmp_path, load))
    assert report is not None, proc.stderr
    relaxed = report["launch"]["relaxed"]
    assert "attn_implementation" in relaxed and "'flash_attention_2' cannot load on this machine" in \
        relaxed["attn_implementation"], relaxed
    # a typo is refused on every machine: the script stops at its line (exit 2), nothing is relaxed
    typo = load.replace("flash_attention_2", "flash_attention2")
    proc, report = _check(tmp_path, _script(tmp_path, typo))
    assert proc.returncode == 2 and report is None and "Traceback" not in proc.stderr
    assert "train.py:7" in proc.stderr and "flash_attention2" in proc.stderr, proc.stderr


@pytest.mark.parametrize("move", ['model.to("cpu")', "model.to(0)", 'model.to(torch.device("cuda", 0))',
                                  "model.cuda()", "model.to(torch.bfloat16)"])
def test_moves_of_the_structure_only_model_reach_the_trainer(tmp_path, move):
    """The capture's models are meta-device structures: every move (to this machine's CPU, to a GPU index the
    launch has) leaves them where they are, a dtype still applies, and the script reaches its trainer."""
    load = f"AutoModelForCausalLM.from_pretrained({str(MODEL)!r})"
    proc, report = _check(tmp_path, _script(tmp_path, load, f"model = {move}"))
    assert report is not None and proc.returncode in (0, 1), proc.stderr
    assert report["launch"]["trainer"] == "grpo", report["launch"]


def test_a_deepspeed_folder_beside_the_script_is_not_the_package(tmp_path):
    """`ds/` or `deepspeed/` folders of JSON configs are common in recipes; with the script's folder first on
    sys.path a `deepspeed/` folder is an importable namespace, which is not the package."""
    from trl_doctor.context.env import package_version

    if package_version("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "zero2.json").write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    load = f"AutoModelForCausalLM.from_pretrained({str(MODEL)!r})"
    script = _script(tmp_path, load)
    script.write_text(script.read_text().replace('report_to="none")', 'report_to="none", deepspeed="deepspeed/zero2.json")'))
    proc, report = _check(tmp_path, script)
    assert report is not None, proc.stderr
    assert "deepspeed" in report["launch"]["relaxed"], report["launch"]


def test_a_hostile_attention_value_is_shown_as_one_quoted_line(tmp_path):
    if not _flash_missing_here():
        pytest.skip("FlashAttention loads on this machine")
    load = f'AutoModelForCausalLM.from_pretrained({str(MODEL)!r}, attn_implementation="kernels-community/flash-attn")'
    proc, report = _check(tmp_path, _script(tmp_path, load))
    if report is None:  # a transformers without Hub kernels refuses the value itself: stopped at the line
        assert proc.returncode == 2 and "train.py:7" in proc.stderr
        return
    note = report["launch"]["relaxed"].get("attn_implementation", "")
    assert "'kernels-community/flash-attn'" in note and "\n" not in note


def test_a_tracker_is_turned_off_and_listed_as_relaxed(tmp_path):
    """report_to names a tracker the checking machine lacks (issue 30, class 2): trackers are the launch machine's;
    the trainer is given none, the report lists it under `relaxed on this machine`, and the check goes on."""
    from importlib.util import find_spec

    if find_spec("wandb") is not None:
        pytest.skip("wandb is installed here: the case is a checking machine without it")
    script = _script(tmp_path, f"AutoModelForCausalLM.from_pretrained({str(MODEL)!r})")
    script.write_text(script.read_text().replace('report_to="none"', 'report_to=["wandb", "tensorboard"]'))
    proc, report = _check(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    why = report["launch"]["relaxed"]["report_to"]
    assert why.startswith("wandb, tensorboard turned off in what the trainer is given: trackers are the launch "
                          "machine's (wandb"), why
    assert not (tmp_path / "wandb").exists() and not (tmp_path / "out").exists()
