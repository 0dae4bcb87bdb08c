"""The accuracy harness's own parts that decide a verdict without running TRL: a notebook read as the script a user
runs top to bottom, and a script that ends without building a trainer (nothing trains: the doctor's exit 2 that says
so is right, any other answer is not)."""

from __future__ import annotations

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


def test_a_script_that_builds_no_trainer_is_told_apart(tmp_path):
    (tmp_path / "samples.py").write_text("import transformers\nprint('sampled and scored, no trainer')\n")
    case = HARNESS.Case("no-trainer", "test", ["python", "samples.py"], tmp_path, {})
    truth = HARNESS.ground_truth(case)
    assert truth.trainer is False and truth.error is None, truth
    assert truth.words.startswith("runs to its end and builds no trainer"), truth
