"""Trainers the doctor does not check are stopped at their construction and named (issue 30, class 1).

A launch command whose script builds a `transformers.Trainer` that is not GRPO, RLOO or PPO (a Trainer subclass of the
script's own that copies GRPO, as vision-language projects write one; TRL's SFTTrainer) used to run on into
`trainer.train()` on meta weights and end in exit 2 blaming the script ("failed before constructing a TRL trainer"
with a meta-tensor error). Now transformers' own constructor stops it: the report names the class and its bases, and
every rule says `skip`, "not checked", with why; the check exits 0. The scripts run for real, with the installed TRL and
transformers, from fixtures/launch/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_doctor

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"


def _check(script: str, *options: str, args: tuple[str, ...] = ()) -> tuple[int, dict, str]:
    """`trl-doctor check OPTIONS --format json -- python SCRIPT ARGS` in fixtures/launch/."""
    import json

    proc = run_doctor("check", *options, "--format", "json", "--", "python", script, *args, cwd=LAUNCH)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _line_of(script: str, text: str) -> int:
    lines = (LAUNCH / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.mark.parametrize("script, cls, built_by", [
    ("vlm_trainer_copy.py", "__main__.Qwen2VLGRPOTrainer", "trainer = Qwen2VLGRPOTrainer("),
    ("sft_script.py", "SFTTrainer", "trainer = SFTTrainer("),
])
def test_another_trainer_is_stopped_at_its_construction_and_named(script, cls, built_by):
    code, report, stderr = _check(script)
    assert code == 0, (report, stderr)
    launch = report["launch"]
    assert launch["trainer_class"].endswith(cls), launch
    assert launch["constructed_at"] == f"{LAUNCH / script}:{_line_of(script, built_by)}", launch
    name = cls.rsplit(".", 1)[-1]
    assert any(n.startswith(f"{name} (") and "is not a trainer trl-doctor checks" in n and "transformers.trainer.Trainer"
               in n for n in launch["notes"]), launch["notes"]
    # every rule skips but those that judge any trainer: save-outputs (saving is transformers' code), pad-token
    # (the padding of the collator the trainer was given; these tokenizers have a pad token) and run-phases (resume,
    # evaluation, trackers and the first checkpoint are transformers' Trainer's)
    judged = ("save-outputs", "pad-token", "run-phases")
    assert {r["status"] for r in report["results"] if r["rule"] not in judged} == {"skip"}, report["results"]
    assert {r["rule"]: r["status"] for r in report["results"] if r["rule"] in judged} == \
        {"save-outputs": "pass", "pad-token": "pass", "run-phases": "pass"}, report["results"]
    for r in report["results"]:
        if r["rule"] not in judged:
            assert r["message"].startswith(f"not checked: {name} is not a trainer trl-doctor checks ("), r["message"]


def test_load_weights_does_not_enter_the_training_loop():
    """With real weights the script would train (the old check sat in the loop until --script-timeout): it stops at
    the construction as well."""
    code, report, stderr = _check("vlm_trainer_copy.py", "--load-weights", "--script-timeout", "120")
    assert code == 0, (report, stderr)
    assert report["launch"]["trainer_class"] == "__main__.Qwen2VLGRPOTrainer"


def test_a_tracker_of_a_trainer_copy_is_relaxed_not_blamed_on_the_script():
    """Issue 30, class 2, on public material: R1-V's run_grpo_clevr.sh passes `--report_to wandb` to its
    Qwen2VLGRPOTrainer. Before ff32561 (class 1) the capture let that constructor run, transformers built
    WandbCallback on a machine without wandb, and the check exited 2 blaming the script ("failed before constructing a
    TRL trainer: RuntimeError: WandbCallback requires wandb to be installed", run on this fixture at c09cc49). Now the
    tracker is the launch machine's: turned off in what the trainer is given and listed as relaxed."""
    from importlib.util import find_spec

    if find_spec("wandb") is not None:
        pytest.skip("wandb is installed here: the case is a checking machine without it")
    code, report, stderr = _check("vlm_trainer_copy.py", "--no-smoke", args=("--report_to", "wandb"))
    assert code == 0, (report, stderr)
    assert report["launch"]["trainer_class"] == "__main__.Qwen2VLGRPOTrainer"
    assert report["launch"]["relaxed"]["report_to"].startswith("wandb turned off in what the trainer is given: "
                                                               "trackers are the launch machine's (wandb not installed"), \
        report["launch"]["relaxed"]


def test_lora_target_names_are_judged_for_any_trainer():
    """TRL's mpo_vlm.py (a DPOTrainer) writes its LoRA targets as a shell splits `"q_proj", "v_proj"`: PEFT adapts
    only the names without a trailing comma, silently. The names reach PEFT the same way for every trainer, so
    peft-setup judges them for trainers the doctor does not otherwise check (the accuracy harness's ex-mpo-vlm-qwen
    miss); the model SFTTrainer wraps before transformers' constructor is read by its own module names."""
    code, report, stderr = _check("sft_lora_targets.py")
    peft = next(r for r in report["results"] if r["rule"] == "peft-setup")
    assert code == 1 and peft["status"] == "fail", (peft, stderr)
    assert "`q_proj,` matches no module of Qwen2ForCausalLM" in peft["message"], peft["message"]
    assert "base_layer" not in peft["message"] and "default" not in peft["message"], peft["message"]
    assert "only the LoRA target names are judged" in peft["details"]["judged"]
    others = {r["status"] for r in report["results"] if r["rule"] not in ("peft-setup", "save-outputs", "pad-token", "run-phases")}
    assert others == {"skip"}, report["results"]
    code, report, stderr = _check("sft_lora_targets.py", args=("--healthy",))
    peft = next(r for r in report["results"] if r["rule"] == "peft-setup")
    assert code == 0 and peft["status"] == "pass", peft
    assert peft["message"].startswith("LoRA target modules: q_proj, v_proj match modules of Qwen2ForCausalLM"), peft


@pytest.mark.parametrize("args, collator", [
    ((), "its collator DataCollatorForLanguageModeling pads with the tokenizer"),
    (("--no-collator",), "no collator: transformers' Trainer pads with the tokenizer (DataCollatorWithPadding)"),
])
@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_tokenizer_without_pad_fails_for_any_trainer_whose_collator_pads_with_it(args, collator):
    """TRL 0.15-0.17's OnlineDPOTrainer (the accuracy harness's ex0152/ex0170-dpo-online misses), and any Trainer whose
    collator pads with the tokenizer, stop at the first batch when the tokenizer has no pad token. pad-token judges the
    collator the trainer was given, where transformers' constructor stopped the script (after the subclass's own
    set-up: TRL trainers that set pad = eos have done it there). The ground truth is the script run for real."""
    truth = _run_for_real("trainer_nopad.py", *args)
    assert truth.returncode != 0 and "Asking to pad but the tokenizer does not have a padding token" in truth.stderr
    code, report, stderr = _check("trainer_nopad.py", args=args)
    pad = next(r for r in report["results"] if r["rule"] == "pad-token")
    assert code == 1 and pad["status"] == "fail", (pad, stderr)
    assert pad["message"] == (f"the tokenizer has no pad token when Trainer is built (it sets none itself), and {collator}: "
                              "the first batch fails ('Asking to pad but the tokenizer does not have a padding token')")
    assert pad["fix"]["description"].startswith("set pad_token to '<|endoftext|>' (id 0), the eos token")


@pytest.mark.slow  # seconds long (a trainer run or a process of its own): CI's long selection
def test_a_trainer_given_a_pad_token_passes_and_trains():
    truth = _run_for_real("trainer_nopad.py", "--pad")
    assert truth.returncode == 0, truth.stderr[-2000:]
    code, report, stderr = _check("trainer_nopad.py", args=("--pad",))
    pad = next(r for r in report["results"] if r["rule"] == "pad-token")
    assert code == 0 and pad["status"] == "pass", (pad, stderr)
    assert pad["message"] == ("Trainer was given a tokenizer with pad token '<|endoftext|>' (id 0), and its collator "
                              "DataCollatorForLanguageModeling pads with '<|endoftext|>'")


def _run_for_real(script: str, *args: str):
    """The script itself, trained for its one step (the ground truth), in a scratch copy of fixtures/launch's layout;
    recorded (tests/truths.py): the releases' behaviour on the script and the data it reads."""
    import shutil
    import sys
    import tempfile

    from truths import truth_run

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "launch"
        work.mkdir()
        shutil.copy(LAUNCH / script, work / script)
        for name in ("models", "data"):
            (Path(tmp) / name).symlink_to(LAUNCH.parent / name)
        return truth_run(f"unchecked_trainers/{script}{''.join(args)}", [sys.executable, script, *args], work,
                         reads=(f"fixtures/launch/{script}", "fixtures/data/prompts.jsonl"), tmp=Path(tmp),
                         timeout=300)


@pytest.mark.slow
@pytest.mark.pinned_releases
@pytest.mark.parametrize("args", [("--reward-nopad",), ()], ids=["reward-tokenizer-without-pad", "healthy"])
def test_online_dpo_reward_tokenizer_is_judged_as_the_installed_trl_runs_it(args):
    """TRL's own dpo_online.py (the accuracy harness's ex0152/ex0170-dpo-online misses): OnlineDPOTrainer pads with the
    reward model's tokenizer, which it holds besides processing_class. pad-token reads the trainer's own code where
    transformers' constructor stopped it, and must agree with what the installed TRL does when the script runs for
    real: a fail naming the reward tokenizer and TRL's line where it crashes, a pass where it trains."""
    from importlib.metadata import version

    from packaging.version import Version

    truth = _run_for_real("online_dpo_reward_tokenizer.py", *args)
    crashed = truth.returncode != 0
    if crashed:
        assert "Asking to pad but the tokenizer does not have a padding token" in truth.stderr, truth.stderr[-3000:]
    if not args:
        assert not crashed, "the healthy script trains on every release"
    elif Version(version("trl")) < Version("0.18"):
        assert crashed, "TRL 0.15-0.17 stop on a reward tokenizer without a pad token"
    code, report, stderr = _check("online_dpo_reward_tokenizer.py", args=args)
    pad = next(r for r in report["results"] if r["rule"] == "pad-token")
    if crashed:
        assert code == 1 and pad["status"] == "fail", (pad, stderr)
        assert pad["message"].startswith("OnlineDPOTrainer's reward_processing_class (the tokenizer of ")
        assert "online_dpo_trainer.py:" in pad["message"] and pad["fix"]["applicability"] == "manual"
    else:
        assert truth.returncode == 0, truth.stderr[-3000:]
        assert pad["status"] == "pass" and code == 0, (pad, stderr)
