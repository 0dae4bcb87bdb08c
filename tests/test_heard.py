"""Issue 46: TRL's own warnings are findings. What trl, transformers, accelerate and PEFT warn (warnings.warn, and log
records at WARNING or above) while the smoke step builds and steps the trainer is in its report, in the library's
words and at the library's line; data/known_warnings.yaml lists what is noise, each with why. The cases are TRL 1.x's
own warnings of 2026 (trl/trainer/grpo_trainer.py, grpo_config.py of trl 1.10-1.16)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import yaml

from conftest import result_of, run_json

pytestmark = pytest.mark.trl_pair

DATA = Path(__file__).resolve().parents[1] / "trl_doctor" / "data" / "known_warnings.yaml"


def _trl_at_least(release: str) -> bool:
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("trl")) >= Version(release)


new_trl = pytest.mark.skipif(not _trl_at_least("1.10"), reason="the warnings are trl >= 1.10's")


@pytest.mark.slow
@new_trl
@pytest.mark.parametrize("case, library, words, place", [
    ("bad_gspo_token_sum_loss.yaml", "trl", "the `'dapo'` loss sums per-token contributions", "trl/trainer/grpo_trainer.py:"),
    ("bad_importance_sampling_cap.yaml", "trl", "The `vllm_importance_sampling_cap` argument is deprecated",
     "trl/trainer/grpo_config.py:"),
])
def test_what_trl_warns_is_a_warn_in_its_words_at_its_line(built_fixtures, case, library, words, place):
    code, report = run_json("check", str(built_fixtures / "smoke-step" / case), "--select", "smoke-step")
    smoke = result_of(report, "smoke-step")
    assert code == 0 and smoke["status"] == "warn", smoke  # the step trained; TRL only warned
    said = [w for w in smoke["details"]["library warnings"] if words in w]
    assert said and said[0].startswith(f"{library}: ") and place in said[0], smoke["details"]["library warnings"]
    assert re.search(r"\.py:\d+\)$", said[0]) and "trl_doctor" not in said[0]  # the library's line, not the doctor's
    assert "took 1 step" in smoke["message"], smoke["message"]


@pytest.mark.slow
def test_a_healthy_step_hears_only_noise_and_passes(built_fixtures, tmp_path):
    """The known noise (transformers 5.2x's gradient-checkpointing renames, said of TRL's own defaults) is left out; a
    reward function's own warnings.warn is the user's code, not a library's, and is not heard either."""
    rewards = tmp_path / "loud.py"
    rewards.write_text("import warnings\n\n\ndef reward(completions, **kwargs):\n"
                       "    warnings.warn('my reward is experimental', UserWarning)\n"
                       "    return [float(len(str(c))) for c in completions]\n")
    config = tmp_path / "grpo.yaml"
    config.write_text((built_fixtures / "smoke-step" / "ok_grpo_qwen2.yaml").read_text()
                      .replace("../models/", f"{built_fixtures}/models/").replace("../data/", f"{built_fixtures}/data/")
                      .replace("[rewards.length_reward]", "[loud.reward]"))
    code, report = run_json("check", str(config), "--select", "smoke-step")
    smoke = result_of(report, "smoke-step")
    assert code == 0 and smoke["status"] == "pass", smoke
    assert "library warnings" not in smoke["details"], smoke["details"]


def test_each_noise_entry_says_why_and_its_words_are_a_pattern():
    entries = yaml.safe_load(DATA.read_text())["noise"]
    assert entries
    for entry in entries:
        assert entry["library"] in ("trl", "transformers", "accelerate", "peft"), entry
        assert len(entry["why"].split()) >= 10, entry  # a reason, not a label
        re.compile(entry["words"])


def test_the_hearing_takes_a_librarys_warning_and_log_at_its_own_line():
    """In-process: a warning a module of `trl` raises with stacklevel=2 (pointing at its caller, as TRL's do) is
    placed at trl's own line; a logger record of `transformers.*` is heard; a warning of another module is not, nor
    torch's C++ warning that trl's tensor operation set off."""
    import logging
    import types

    from trl_doctor.facts.trainer_run.heard import hearing

    fake = types.ModuleType("trl.fake_module")
    exec(compile("import warnings\n\ndef speak():\n    warnings.warn('deprecated, use x', FutureWarning, stacklevel=2)\n"
                 "\n\ndef index():  # torch's C++ warning, set off by a tensor operation in trl's code\n"
                 "    warnings.warn('non-tuple indexing (Triggered internally at indexing.cpp:349.)', UserWarning)\n",
                 "/site-packages/trl/fake_module.py", "exec"), fake.__dict__)
    # a logger of its own under transformers', at WARNING: an earlier test in this process may have left
    # transformers' loggers quieter (its verbosity) or disabled (a logging.config call)
    library_log = logging.getLogger("transformers.trl_doctor_test_heard")
    library_log.setLevel(logging.WARNING)
    with pytest.warns((FutureWarning, UserWarning)), warnings.catch_warnings():  # shown as the job shows them, and heard
        with hearing() as heard:
            fake.speak()
            fake.speak()  # said twice, heard once
            fake.index()  # torch's words, not trl's
            library_log.warning("weights of %s not used", "lm_head")
            warnings.warn("not a library's", UserWarning)
    assert [(h["library"], h["message"], h["where"]) for h in heard] == [
        ("trl", "deprecated, use x", "trl/fake_module.py:4"),
        ("transformers", "weights of lm_head not used", heard[1]["where"]),
    ], heard
    assert heard[1]["where"].rsplit(":", 1)[0].endswith("test_heard.py")  # the record's own line
