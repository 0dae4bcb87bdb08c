"""The rule harness (trl_doctor.testing) gives what the command gives: the rules' tests judge their cases in the test
process (tests/test_fixture_cases.py, the healthy and static sweeps), so this file holds that to the real console
script, run in a fresh process as a user runs it, on cases of each kind the harness takes: a safe fix with its diff,
a result with a location, fake GPUs, the static context, an inline suppression."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, result_of, run_doctor
from test_fixture_cases import case_fake_gpus, fake_gpu_env, fake_nvml

CASES = ("pad-token/bad_gpt2_nopad.yaml",                       # a safe fix: the diff --fix would write
         "batch-geometry/bad_num_generations_one.yaml",         # a location in the config
         "precision-and-attention/bad_bf16_t4.yaml",            # fake GPUs: NVML answering for a T4
         "batch-geometry/ok_rloo.yaml")                         # a pass


def _command(case, rule: str, tmp_path, *more: str) -> tuple[int, dict, str]:
    """(exit status, the rule's json result, stdout) of the real console script in a fresh process."""
    fake = case_fake_gpus(case)
    env = fake_gpu_env(fake) if fake else {"TRL_DOCTOR_TEST_SUBPROCESS": "1"}  # an env: a fresh process
    report = tmp_path / "report.json"
    proc = run_doctor("check", str(case), "--select", rule, *more, "--format", "json", "-o", str(report),
                      env=env)
    assert report.is_file(), proc.stderr
    return proc.returncode, result_of(json.loads(report.read_text()), rule), proc.stdout


def _same(mine: dict, theirs: dict) -> None:
    """Equal but for the time each took."""
    assert {k: v for k, v in mine.items() if k != "duration_s"} == {k: v for k, v in theirs.items()
                                                                   if k != "duration_s"}


@pytest.mark.parametrize("case_id", CASES)
def test_the_harness_judges_as_the_command_does(built_fixtures, tmp_path, case_id):
    from trl_doctor.testing import judge

    case = FIXTURES / case_id
    rule = case.parent.name
    code, theirs, diff = _command(case, rule, tmp_path, "--diff")
    with fake_nvml(case_fake_gpus(case)):
        judged = judge(case, rule)
    _same(judged.as_dict(), theirs)
    assert (judged.code, judged.diff) == (code, diff)
    assert judged.context == "full" and judged.status == theirs["status"]


@pytest.mark.parametrize("case_id, more, asked", [
    # an unsafe fix: --diff prints it only with --unsafe-fixes
    ("vllm-tokenizer-drift/bad_tokenizer_beyond_vocab.yaml", ("--unsafe-fixes",), {"unsafe_fixes": True}),
])
def test_the_harness_takes_the_options_as_the_command_does(built_fixtures, tmp_path, case_id, more, asked):
    from trl_doctor.testing import judge

    case = FIXTURES / case_id
    rule = case.parent.name
    code, theirs, diff = _command(case, rule, tmp_path, "--diff", *more)
    with fake_nvml(case_fake_gpus(case)):
        judged = judge(case, rule, **asked)
    _same(judged.as_dict(), theirs)
    assert (judged.code, judged.diff) == (code, diff)
    if "unsafe_fixes" in asked:
        assert diff and theirs["fix"]["applicability"] == "unsafe"


def test_the_target_env_reaches_the_judgment_as_in_the_command(built_fixtures, tmp_path):
    """--target with --target-env other: FlashAttention2's package is the launch environment's, not judged here; with
    --target-env this it is this machine's (not installed): the words differ, and the harness says each as the command
    does."""
    from trl_doctor.testing import judge

    case = tmp_path / "fa2.yaml"
    model = FIXTURES / "precision-and-attention" / "models" / "qwen2.5-0.5b"
    case.write_text(f"model_name_or_path: {model}\nbf16: true\ndtype: bfloat16\nattn_implementation: flash_attention_2\n")
    said = {}
    for where in ("other", "this"):
        code, theirs, _ = _command(case, "precision-and-attention", tmp_path, "--no-smoke", "--target", "8xH100-80GB",
                                   "--target-env", where)
        judged = judge(case, "precision-and-attention", smoke=False, target="8xH100-80GB", target_env=where)
        _same(judged.as_dict(), theirs)
        said[where] = theirs["message"]
    assert "its package not judged here" in said["other"] and said["other"] != said["this"], said


def test_the_static_context_is_check_static(built_fixtures, tmp_path):
    from trl_doctor.testing import judge

    case = FIXTURES / "eos-termination" / "bad_llama3_eot_missing.yaml"
    code, theirs, _ = _command(case, "eos-termination", tmp_path, "--static")
    judged = judge(case, "eos-termination", context="static")
    _same(judged.as_dict(), theirs)
    assert judged.code == code == 1 and judged.status == "fail"


def test_an_inline_suppression_holds_as_in_the_check(built_fixtures, tmp_path):
    import shutil

    from trl_doctor.testing import judge

    folder = FIXTURES / "batch-geometry"
    shutil.copy(folder / "rewards.py", tmp_path / "rewards.py")
    case = tmp_path / "suppressed.yaml"
    text = (folder / "bad_num_generations_one.yaml").read_text().replace("../", f"{FIXTURES}/")
    case.write_text(text.replace("num_generations: 1", "num_generations: 1  # trl-doctor: ignore[batch-geometry]"))
    code, theirs, _ = _command(case, "batch-geometry", tmp_path)
    judged = judge(case, "batch-geometry")
    assert theirs["status"] == "fail" and theirs["suppressed"] and judged.as_dict()["suppressed"]
    _same(judged.as_dict(), theirs)
    assert judged.code == code == 0


def test_what_the_harness_refuses_is_said(built_fixtures):
    from trl_doctor.errors import InputError
    from trl_doctor.testing import judge, judge_rules

    case = FIXTURES / "pad-token" / "bad_gpt2_nopad.yaml"
    with pytest.raises(ValueError, match="name one rule"):
        judge(case, "pad-token,batch-geometry")
    with pytest.raises(ValueError, match="one of full, static"):
        judge(case, "pad-token", context="watch")
    with pytest.raises(InputError, match="no-such.yaml"):
        judge(FIXTURES / "pad-token" / "no-such.yaml", "pad-token")
    both = judge_rules(case, "pad-token,batch-geometry", smoke=False)
    assert sorted(j.result.rule for j in both) == ["batch-geometry", "pad-token"]
    status = {j.result.rule: j.status for j in both}  # pad-token: a warn where TRL sets pad = eos (0.17 on), else fail
    assert status["batch-geometry"] == "pass" and status["pad-token"] in ("warn", "fail"), status
    assert {j.code for j in both} == {1 if status["pad-token"] == "fail" else 0}  # one check's exit status
