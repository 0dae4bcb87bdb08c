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


def _tiny_repository(root):
    """A repository shaped like this one, as far as the record's key reads it: the shared files and one corpus case."""
    import subprocess

    for name, text in {"tools/accuracy/truth.py": "# truth\n", "tools/accuracy/hub.py": "# hub\n",
                       "fixtures/build_fixtures.py": "# models\n", "corpus/build.py": "# corpus models\n",
                       "corpus/data/prompts.jsonl": '{"prompt": "hi"}\n', "corpus/case/train.py": "print(1)\n",
                       "corpus/case/case.yaml": "command: [python, train.py]\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)


def test_a_recorded_truth_is_read_only_while_every_input_and_release_is_unchanged(tmp_path, monkeypatch):
    """The record's key (tools/accuracy/record.py) changes with the case's script, a shared input (the data, the
    ground truth's code), its entry and any release installed; not with what a run leaves behind (untracked files)
    nor with where the repository is (a clone elsewhere computes the same key)."""
    record = HARNESS._record_module()
    monkeypatch.setattr(record, "HERE", tmp_path / "records")
    (tmp_path / "records").mkdir()

    def case_in(root):
        monkeypatch.setattr(record, "ROOT", root)
        entry = {"name": "corpus/case", "command": ["python", "train.py"], "note": "words about it"}
        return HARNESS.Case("corpus/case", "test", ["python", "train.py"], root / "corpus" / "case", {}, entry=entry)

    first = tmp_path / "a"
    _tiny_repository(first)
    case = case_in(first)
    keyed = record.key(case)
    assert keyed is not None and keyed[1]["trl"] and keyed == record.key(case)
    (first / "corpus" / "case" / "out").mkdir()  # a run's output_dir, and a stray file: not the case's inputs
    (first / "corpus" / "case" / "out" / "model.safetensors").write_bytes(b"weights")
    assert record.key(case) == keyed
    clone = tmp_path / "b"
    _tiny_repository(clone)
    assert record.key(case_in(clone)) == keyed

    truth = {"words": "trains", "error": None, "wrong": [], "changed": ["use_cpu"], "trainer": True}
    record.save(case, keyed, truth, 12.0)
    assert record.find(case, record.key(case))["truth"] == truth
    monkeypatch.setattr(HARNESS, "_record_module", lambda: record)
    read = HARNESS.recorded_truth(case)
    assert read is not None and read[0].words == "trains" and read[0].changed == {"use_cpu"}, read
    monkeypatch.setenv(HARNESS.LIVE_ENV, "1")
    assert HARNESS.recorded_truth(case) is None
    monkeypatch.delenv(HARNESS.LIVE_ENV)

    changes = {"the script": lambda: (clone / "corpus/case/train.py").write_text("print(2)\n"),
               "the data": lambda: (clone / "corpus/data/prompts.jsonl").write_text('{"prompt": "ho"}\n'),
               "the ground truth's code": lambda: (clone / "tools/accuracy/truth.py").write_text("# truth 2\n")}
    for what, change in changes.items():
        _tiny_repository(clone)
        change()
        assert record.key(case) != keyed, what
        assert HARNESS.recorded_truth(case) is None, what
    _tiny_repository(clone)
    assert record.key(case) == keyed
    other = HARNESS.Case("corpus/case", "test", ["python", "train.py", "--seed", "1"], clone / "corpus" / "case", {},
                         entry={"name": "corpus/case", "command": ["python", "train.py", "--seed", "1"]})
    assert record.key(other) != keyed  # another command
    real = record._releases
    monkeypatch.setattr(record, "_releases", lambda requires: {**real(requires), "trl": "0.0.1"})
    assert record.key(case) != keyed and HARNESS.recorded_truth(case) is None  # another release
    # recorded again under the other release: each lane keeps its own record of the case
    record.save(case, record.key(case), {**truth, "words": "crashes: X"}, 3.0)
    monkeypatch.setattr(record, "_releases", real)
    assert HARNESS.recorded_truth(case)[0].words == "trains"
    assert len(record.load()) == 2


def test_without_git_there_is_no_key_and_the_truth_is_run(tmp_path, monkeypatch):
    record = HARNESS._record_module()
    monkeypatch.setattr(record, "ROOT", tmp_path)  # no repository here: git ls-files fails
    case = HARNESS.Case("corpus/case", "test", ["python", "train.py"], tmp_path, {}, entry={})
    assert record.key(case) is None and record.find(case, None) is None


def test_what_a_case_reads_beside_its_command_enters_the_key_and_side_by_side_records_are_all_kept(tmp_path,
                                                                                                    monkeypatch):
    """A framework's own run (tests/test_frameworks.py) reads its case's folder (config and reward modules) and the
    shared data, which its command does not name: `reads` puts them in the key. Two processes recording at once
    (xdist's workers) keep every record: the file is read, changed and replaced under a lock."""
    import multiprocessing
    from types import SimpleNamespace

    record = HARNESS._record_module()
    monkeypatch.setattr(record, "HERE", tmp_path / "records")
    (tmp_path / "records").mkdir()
    root = tmp_path / "repo"
    _tiny_repository(root)
    monkeypatch.setattr(record, "ROOT", root)
    for name in ("fixtures/frameworks/fw/case/config.yaml", "fixtures/frameworks/fw/case/rewards.py",
                 "fixtures/frameworks/data/train.jsonl"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("v1\n")
    case = SimpleNamespace(name="frameworks/fw/case", command=["fw", "train", "config.yaml"],
                           cwd=root / "fixtures/frameworks/fw/case", requires={}, entry={"command": ["fw"]},
                           reads=("fixtures/frameworks/fw/case", "fixtures/frameworks/data"))
    import subprocess

    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    keyed = record.key(case)
    for name in ("fixtures/frameworks/fw/case/rewards.py", "fixtures/frameworks/data/train.jsonl"):
        (root / name).write_text("v2\n")
        assert record.key(case) != keyed, name
        (root / name).write_text("v1\n")
    assert record.key(case) == keyed

    def save_many(which):
        for i in range(15):
            record.save(SimpleNamespace(name=f"{which}-{i}"), keyed, {"returncode": 0}, 1.0)

    workers = [multiprocessing.get_context("fork").Process(target=save_many, args=(w,)) for w in "ab"]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert sorted(r["case"] for r in record.load()) == sorted(f"{w}-{i}" for w in "ab" for i in range(15))
