"""The accuracy harness's own parts that decide a verdict without running TRL: a notebook read as the script a user
runs top to bottom, and a script that ends without building a trainer (nothing trains: the doctor's exit 2 that says
so is right, any other answer is not)."""

from __future__ import annotations

import pytest

from test_accuracy import HARNESS  # the harness's run.py, loaded once


def test_a_notebook_is_its_code_cells_without_ipython_lines():
    notebook = {"cells": [
        {"cell_type": "code", "source": ["%load_ext autoreload\n", "%autoreload 2"]},
        {"cell_type": "markdown", "source": ["# Title\n", "print('not code')"]},
        {"cell_type": "code", "source": ["!pip install trl\n", "import math\n", "x = math.sqrt(4)"]},
        {"cell_type": "code", "source": "  %time y = 1\nprint(x)\n"},
    ]}
    script = HARNESS.notebook_script(notebook)
    assert script.strip().splitlines() == ["import math", "x = math.sqrt(4)", "", "print(x)"], script
    compile(script, "notebook.py", "exec")


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_script_that_builds_no_trainer_is_told_apart(tmp_path):
    (tmp_path / "samples.py").write_text("import transformers\nprint('sampled and scored, no trainer')\n")
    case = HARNESS.Case("no-trainer", "test", ["python", "samples.py"], tmp_path, {})
    truth = HARNESS.ground_truth(case)
    assert truth.trainer is False and truth.error is None, truth
    assert truth.words.startswith("runs to its end and builds no trainer"), truth


def test_the_standin_tokenizer_returns_what_qwen2s_returns(built_fixtures, tmp_path):
    """The tiny Qwen2 fixture's tokenizer is a plain fast tokenizer, which also returns token_type_ids; trl 0.24 hands
    a tokenizer's every output to `generate`, which refuses them: a crash of the stand-in's making. A case's STANDIN is
    a copy whose tokenizer returns input_ids and attention_mask, as Qwen2's does (transformers 5 already loads the
    fixture so); the fixture itself is left alone."""
    import json

    from transformers import AutoTokenizer

    command = [HARNESS._fill(a, tmp_path) for a in ["trl", "grpo", "--model_name_or_path", "STANDIN"]]
    case = HARNESS.Case("standin", "test", command, tmp_path, {})
    HARNESS.ensure_standin(case)
    copy = tmp_path / HARNESS.STANDIN.name
    assert command[-1] == str(copy)
    assert set(AutoTokenizer.from_pretrained(copy)("2 + 2 =")) == {"input_ids", "attention_mask"}
    assert json.loads((copy / "tokenizer_config.json").read_text())["model_input_names"] == ["input_ids",
                                                                                          "attention_mask"]
    assert "model_input_names" not in json.loads((HARNESS.STANDIN / "tokenizer_config.json").read_text())


def test_a_dropped_recipe_key_is_right_only_when_trainer_config_names_it():
    truth = HARNESS.Truth("trains, but ...", None,
                          ["recipe key 'shuffle_dataset' is dropped by the script's TrlParser (no field of A)"], set())
    named = [{"rule": "trainer-config", "status": "warn", "message": "`shuffle_dataset` (arrives in trl 0.17.0) ..."}]
    other = [{"rule": "trainer-config", "status": "warn", "message": "`loss_type` (arrives in trl 0.17.0) ..."}]
    assert HARNESS._verdict_on_wrongs(truth, named, 0, [], [], []) == "right"
    assert HARNESS._verdict_on_wrongs(truth, other, 0, [], [], []) == "miss"
    failing = named + [{"rule": "batch-geometry", "status": "fail", "message": "..."}]
    assert HARNESS._verdict_on_wrongs(truth, failing, 1, ["batch-geometry"], [], []) == "false alarm"
    assert HARNESS._verdict_on_wrongs(truth, failing, 1, ["batch-geometry"], ["batch-geometry"], []) == "right"
