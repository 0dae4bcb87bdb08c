"""TD013 dataset-schema through the CLI: the prompt column, one prompt format, the columns reward functions take
by name (read from their source, never imported), and streamed datasets against the installed trainer."""

from __future__ import annotations

import pytest

import json
import sys
from importlib.metadata import version
from pathlib import Path

from packaging.version import Version

from conftest import FIXTURES, check_here, result_of, run_doctor

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

TRL = Version(version("trl"))
HERE = FIXTURES / "dataset-schema"
MODEL = FIXTURES / "models" / "qwen2-chat"


def check(path):
    code, report = check_here(str(path), "--select", "dataset-schema", "--no-smoke")
    return code, result_of(report, "dataset-schema")


def config_for(tmp_path, rows, extra: str = "") -> Path:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "config.yaml"
    config.write_text(f"model_name_or_path: {MODEL}\ndataset_path: {data}\n{extra}")
    return config


def test_mixed_formats(built_fixtures):
    code, r = check(HERE / "bad_mixed_formats.yaml")
    assert code == 1 and r["status"] == "fail"
    # datasets >= 4 loads the column as JSON; older releases cannot load it at all and the file is read directly
    assert "plain text (12 rows, first row 0) and message lists (4 rows, first row 3)" in r["message"]
    assert r["details"]["prompt formats"]["conversational"] == "3, 7, 11, 15"
    if "loader error" in r["details"]:
        assert r["message"].startswith("the dataset cannot be loaded")


def test_reward_column_missing_is_read_without_importing_the_module(built_fixtures):
    def from_here():
        return [m for m, mod in list(sys.modules.items()) if str(getattr(mod, "__file__", "") or "").startswith(str(HERE))]

    for name in from_here():  # another rule may have imported it earlier in this test session
        del sys.modules[name]
    code, r = check(HERE / "bad_reward_column_missing.yaml")
    assert code == 1 and r["status"] == "fail"
    assert f"reward function rewards.answer_reward ({HERE / 'rewards.py'}:10) takes `answer` without a default" in r["message"]
    assert "missing required argument 'answer'" in r["message"]
    assert r["details"]["reward function columns"] == {"rewards.length_reward": [], "rewards.answer_reward": ["answer"]}
    assert "prompts, completions" in r["details"]["TRL passes reward functions"]
    assert from_here() == []  # parsed with ast: the user's module did not run


def test_reward_that_is_not_a_plain_def_is_inspected(built_fixtures, tmp_path):
    (tmp_path / "partial_rewards.py").write_text(
        "import functools\n\n"
        "def _match(prompts, completions, solution, scale, **kwargs):\n"
        "    return [scale * float(s in str(c)) for s, c in zip(solution, completions)]\n\n"
        "match_reward = functools.partial(_match, scale=2.0)\n"
    )
    config = config_for(tmp_path, [{"prompt": "two plus two?", "answer": "four"}] * 4,
                        "reward_funcs: [partial_rewards.match_reward]\n")
    code, r = check(config)
    assert r["status"] == "fail"
    assert "takes `solution` without a default" in r["message"]


def test_empty_and_malformed_prompts(built_fixtures, tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "two plus two?"}]}] * 6
    rows[2] = {"prompt": [{"from": "human", "value": "two plus two?"}]}
    code, r = check(config_for(tmp_path, rows))
    assert r["status"] == "fail"
    assert "1 of 6 prompts are neither text nor role/content messages (rows 2" in r["message"]
    assert "from/value to role/content" in r["message"]

    empty = tmp_path / "empty"
    empty.mkdir()
    code, r = check(config_for(empty, [{"prompt": "two plus two?"}] * 5 + [{"prompt": ""}]))
    assert code == 0 and r["status"] == "warn"
    assert "1 of 6 prompts are empty (rows 5)" in r["message"]


def test_streaming_without_max_steps(built_fixtures):
    code, r = check(HERE / "bad_streaming_without_max_steps.yaml")
    assert code == 1 and r["status"] == "fail"
    if TRL >= Version("1.9"):
        assert "max_steps is -1" in r["message"] and "max_steps has to be specified" in r["message"]
        assert "repeat_iterable_dataset" in r["details"]["trainer behaviour"]
    else:
        assert "GRPOTrainer in trl" in r["message"] and "IterableDataset" in r["message"]


def test_streaming_with_max_steps_by_version(built_fixtures):
    code, r = check(HERE / "ok_streaming_max_steps.yaml")
    if TRL >= Version("1.9"):
        assert code == 0 and r["status"] == "pass", r
        assert r["details"]["max_steps"] == 20
    elif TRL >= Version("0.17"):
        assert r["status"] == "fail" and "Iterable datasets are not yet supported" in r["message"]
    else:  # no guard and no repeat: the groups silently mix prompts
        assert r["status"] == "fail" and "trl#3213" in r["message"]


def test_dataset_not_in_the_cache_is_an_input_error(built_fixtures, tmp_path):
    config = tmp_path / "hub.yaml"
    config.write_text(f"model_name_or_path: {MODEL}\ndataset_name: trl-doctor-tests/not-cached-anywhere\n")
    proc = run_doctor("check", str(config), "--select", "dataset-schema", "--no-smoke")
    assert proc.returncode == 2
    assert "trl-doctor-tests/not-cached-anywhere: cannot load the dataset offline" in proc.stderr
