"""The command line as a user meets it: input errors are one line and exit 2, selection by id or slug,
--help without the heavy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import FIXTURES, run_doctor, run_json

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome


def _input_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_missing_config_file(tmp_path):
    _input_error(run_doctor("check", str(tmp_path / "nope.yaml")), "nope.yaml", "no such file")


def test_invalid_yaml_names_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: x\nnum_generations: [1, 2\n")
    _input_error(run_doctor("check", str(cfg)), "c.yaml", "invalid YAML", "line")


def test_invalid_json_names_line_and_column(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"model_name_or_path": "x",\n "beta": }')
    _input_error(run_doctor("check", str(cfg)), "c.json", "invalid JSON at line 2")


def test_config_must_be_a_mapping(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("- a\n- b\n")
    _input_error(run_doctor("check", str(cfg)), "must be a mapping")


def test_model_is_required(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("beta: 0.1\n")
    _input_error(run_doctor("check", str(cfg)), "model_name_or_path", "required")


def test_missing_model_folder(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: ./models/absent\n")
    _input_error(run_doctor("check", str(cfg)), "no such folder", "absent")


def test_hub_id_not_in_cache_is_never_downloaded(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: some-org/some-model-that-is-not-cached\n")
    _input_error(run_doctor("check", str(cfg), env={"HF_HOME": str(tmp_path / "hf")}),
                 "some-org/some-model-that-is-not-cached", "not in the local Hugging Face cache", "never downloads")


def test_bad_trainer_value(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("trainer: dpo\nmodel_name_or_path: x\n")
    _input_error(run_doctor("check", str(cfg)), "`trainer` must be grpo, ppo or rloo")


def test_missing_dataset_file(built_fixtures, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\ndataset_path: data.jsonl\n")
    _input_error(run_doctor("check", str(cfg)), "dataset_path", "data.jsonl")


def test_corrupt_tokenizer_file(fixture_copy):
    (fixture_copy / "models" / "qwen2-chat" / "tokenizer_config.json").write_text("{not json")
    _input_error(run_doctor("check", str(fixture_copy / "pad-token" / "ok_qwen2_chat.json"), "--no-smoke"),
                 "qwen2-chat", "tokenizer")


def test_unknown_rule_in_select(built_fixtures):
    _input_error(run_doctor("check", str(built_fixtures / "pad-token" / "ok_qwen2_chat.json"), "--select", "TD001,no-such-rule"),
                 "unknown rule 'no-such-rule'")


@pytest.mark.parametrize("flag", ["--smoke-timeout", "--script-timeout", "--user-code-timeout"])
def test_a_time_limit_of_zero_is_refused(built_fixtures, flag):
    """0 s would stop the trainer run (or the script, or the user's code) at once: refused, not a silent skip."""
    proc = run_doctor("check", str(built_fixtures / "pad-token" / "ok_qwen2_chat.json"), flag, "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert flag in proc.stderr and "Traceback" not in proc.stderr


def test_trainer_inferred_from_ppo_keys(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "pad-token" / "bad_ppo_pad_is_eos.yaml"), "--select", "pad-token")
    assert report["trainer"] == "ppo"
    cfg = built_fixtures / "pad-token" / "ok_qwen2_chat.json"
    assert run_json("check", str(cfg), "--select", "pad-token")[1]["trainer"] == "grpo"


def test_select_and_ignore_take_ids_and_slugs(built_fixtures):
    cfg = str(built_fixtures / "trainer-config" / "ok_grpo.yaml")
    from trl_doctor.registry import all_rules

    _, report = run_json("check", cfg, "--select", "td001,trainer-config")
    assert [r["id"] for r in report["results"]] == ["TD001", "TD009"]
    _, report = run_json("check", cfg, "--ignore", "smoke-step,TD009", "--no-smoke")
    expected = [r.id for r in all_rules() if r.id not in ("TD006", "TD009") and r.preflight]  # no watch rule
    assert [r["id"] for r in report["results"]] == expected


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from trl_doctor.front.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "main_mods = [m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm', 'pynvml') if m in sys.modules]\n"
        "print('HEAVY', main_mods)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_rules_and_explain_import_nothing_heavy():
    code = (
        "import sys\n"
        "from trl_doctor.registry import all_rules\n"
        "rules = all_rules()\n"
        "print('HEAVY', [m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules], len(rules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_env_command_lists_versions_and_gpus():
    proc = run_doctor("env")
    assert proc.returncode == 0
    for name in ("python", "torch", "transformers", "trl", "accelerate", "vllm", "torch CUDA build"):
        assert name in proc.stdout
    assert "GPUs:" in proc.stdout or "capability" in proc.stdout
    import json

    doc = json.loads(run_doctor("env", "--format", "json").stdout)
    from importlib.metadata import version

    assert doc["packages"]["trl"] == version("trl")
    assert doc["packages"]["transformers"] == version("transformers")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_check_help(flag):
    proc = run_doctor("check", flag)
    assert proc.returncode == 0
    for option in ("--fix", "--unsafe-fixes", "--diff", "--format", "--select", "--ignore", "--smoke / --no-smoke",
                   "--device", "--trust-remote-code", "--fail-on", "--output"):
        assert option in proc.stdout


REMOTE_CONFIG = '''
import os, pathlib
pathlib.Path(os.environ.get("EVIL_MARK") or pathlib.Path(__file__).with_name("CODE_RAN")).write_text("yes")
from transformers import PretrainedConfig


class EvilConfig(PretrainedConfig):
    model_type = "evil"
'''


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_remote_code_never_runs_without_the_flag(built_fixtures, tmp_path, tmp_path_factory):
    """The mark the remote code writes lies outside the config's folder, which the check holds (runtime/hold.py:
    what is written there would not be seen here)."""
    import json

    mark = tmp_path_factory.mktemp("outside") / "CODE_RAN"

    model = tmp_path / "evil-model"
    model.mkdir()
    (model / "configuration_evil.py").write_text(REMOTE_CONFIG)
    (model / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"},
                                                   "vocab_size": 320}))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: evil-model\ntokenizer_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\n")
    env = {"HF_MODULES_CACHE": str(tmp_path / "modules"), "EVIL_MARK": str(mark)}
    proc = run_doctor("check", str(cfg), "--select", "pad-token", env=env)
    _input_error(proc, "config.json", "--trust-remote-code")
    assert not mark.exists()
    proc = run_doctor("check", str(cfg), "--select", "pad-token", "--trust-remote-code", env=env)
    assert mark.exists(), proc.stderr


def test_progress_names_each_config_only_when_asked(built_fixtures):
    """Several configs: `config N of M: path` on stderr with --progress (or a terminal), one line each where stderr
    is a log; without it (a pipe) stderr stays clean for CI logs and the machine formats."""
    import json

    from conftest import run_doctor

    configs = [str(built_fixtures / "trainer-config" / n) for n in ("ok_grpo.yaml", "bad_unknown_key.yaml")]
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", "--progress", *configs)
    lines = proc.stderr.splitlines()
    assert [line for line in lines if " of 2: " in line] == [
        f"trl-doctor: config 1 of 2: {configs[0]}", f"trl-doctor: config 2 of 2: {configs[1]}"]
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr
    assert json.loads(proc.stdout)["configs"] == 2  # stdout is the report alone
    quiet = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", *configs)
    assert quiet.stderr == ""


def test_the_table_fits_columns_and_shows_a_skip_reason_once(built_fixtures):
    from conftest import run_doctor

    cfg = str(built_fixtures / "trainer-config" / "ok_grpo.yaml")
    for columns in ("60", "200"):
        proc = run_doctor("check", "--static", "--select", "vllm-server,trainer-config", cfg, env={"COLUMNS": columns})
        rows = proc.stdout.split("\n\n")[1].splitlines()
        assert max(map(len, rows)) <= int(columns) and "…" not in proc.stdout
        (skip,) = [r for r in rows if r.startswith("TD018")]
        assert proc.stdout.count("vLLM") == 1  # its skip reason in its row, not again under the table


@pytest.mark.parametrize("fmt, asked, worker_gets", [
    ("table", None, None),  # the worker's default: 2 prompts on a GPU where the step ran the real model
    ("json", None, 0), ("sarif", None, 0), ("junit", None, 0), ("github", None, 0),  # a CI gate: off
    ("json", 2, 2), ("table", 0, 0),  # --sample N is honoured under every format
])
def test_sample_default_is_off_under_a_machine_format(built_fixtures, monkeypatch, fmt, asked, worker_gets):
    """The real-model sample's default (issue 22 item 4): on for the table, off for the formats a CI gate reads."""
    from trl_doctor.front import settings as _settings

    seen = []
    real = _settings.options_for
    monkeypatch.setattr(_settings, "options_for", lambda *a, **kw: seen.append(kw["sample"]) or real(*a, **kw))
    args = ["check", str(FIXTURES / "trainer-config" / "ok_grpo.yaml"), "--static", "--select", "pad-token",
            "--format", fmt] + (["--sample", str(asked)] if asked is not None else [])
    proc = run_doctor(*args)
    assert proc.returncode == 0, proc.stderr
    assert seen == [worker_gets]
