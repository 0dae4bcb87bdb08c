"""`check --static` on a hostile pull request's checkout (issue 31, classes 1, 4 and 6): the real console script on
files written into tmp_path. A template that loops or grows without end is one line within the render's budget; a
file a symbolic link takes out of the repository is never read; a malformed tokenizer file is one line, never a
rule `error` or a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, result_of, trl_doctor_exe

pytestmark = pytest.mark.release_free

TAIL = "{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}"


def _repo(tmp_path: Path) -> Path:
    """A checkout: recipe.yaml, model/ (qwen2-chat's files, no weights) and data.jsonl (conversational prompts)."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "models" / "qwen2-chat", repo / "model", ignore=shutil.ignore_patterns("*.safetensors"))
    (repo / "data.jsonl").write_text("".join((FIXTURES / "data" / "chat.jsonl").read_text().splitlines(True)[:3]))
    (repo / "recipe.yaml").write_text("model_name_or_path: model\ndataset_path: data.jsonl\nnum_generations: 4\n"
                                      "per_device_train_batch_size: 4\nmax_completion_length: 64\n")
    return repo


def _static(repo: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([trl_doctor_exe(), "check", "--static", *args, str(repo / "recipe.yaml")],
                          capture_output=True, text=True, timeout=timeout, cwd=repo)


def _one_line_exit_2(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr


# -- class 1: rendering and reading are bounded ----------------------------------------------------------------------

@pytest.mark.parametrize("head, words", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "did not finish within 5 s"),
    ("{{ 'x' * 3000000000 }}", "MiB of memory --static allows"),
    ("{{ messages | tojson(indent=1000000000) }}", "MiB of memory --static allows"),
    ("{% for i in range(3000) %}{{ 'x' * 1000 }}{% endfor %}", "MiB of text --static reads"),
], ids=["nested-range", "repetition", "tojson-indent", "output"])
@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_template_that_runs_away_is_one_warning_within_the_budget(built_fixtures, tmp_path, head, words):
    pytest.importorskip("jinja2")
    repo = _repo(tmp_path)
    (repo / "model" / "chat_template.jinja").write_text(head + TAIL)
    start = time.monotonic()
    proc = _static(repo, "--format", "json")
    assert time.monotonic() - start < 30, "the render's 5 s budget was not kept"
    assert proc.returncode == 0, proc.stderr
    td004 = result_of(json.loads(proc.stdout), "eos-termination")
    assert td004["status"] == "warn" and "cannot be rendered" in td004["message"] and words in td004["message"], td004
    assert "\n" not in td004["message"]


def test_a_huge_tokenizer_json_is_not_parsed(built_fixtures, tmp_path):
    repo = _repo(tmp_path)
    with open(repo / "model" / "tokenizer.json", "w") as f:  # 65 MiB of `{},`: 1.6 GB and 9 s to parse
        f.write("[" + "{}," * (65 * 2**20 // 3) + "{}]")
    start = time.monotonic()
    proc = _static(repo)
    assert time.monotonic() - start < 20
    _one_line_exit_2(proc, "tokenizer.json", "MiB is too large for a tokenizer file under --static")
    with open(repo / "model" / "tokenizer.json", "w") as f:  # small, but millions of values
        f.write("[" + "{}," * 6_000_000 + "{}]")
    _one_line_exit_2(_static(repo), "tokenizer.json", "JSON values is too many")


def test_a_healthy_template_still_renders(built_fixtures, tmp_path):
    pytest.importorskip("jinja2")
    proc = _static(_repo(tmp_path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    td004 = result_of(json.loads(proc.stdout), "eos-termination")
    assert td004["status"] == "pass" and "<|im_end|>" in td004["message"], td004


# -- class 4: nothing is read through a link out of the repository ----------------------------------------------------

SECRET = "ghp_THIS_IS_A_SECRET_TOKEN"


@pytest.mark.parametrize("what", ["chat_template.jinja", "tokenizer_config.json", "model-folder", "dataset", "config"])
def test_a_symlink_out_of_the_repository_is_never_read(built_fixtures, tmp_path, what):
    repo = _repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret"
    if what == "chat_template.jinja":
        secret.write_text("{{ '" + SECRET + "' }}" + TAIL)
        (repo / "model" / what).unlink()
        (repo / "model" / what).symlink_to(secret)
    elif what == "tokenizer_config.json":
        config = json.loads((repo / "model" / what).read_text())
        secret.write_text(json.dumps({**config, "pad_token": SECRET}))
        (repo / "model" / what).unlink()
        (repo / "model" / what).symlink_to(secret)
    elif what == "model-folder":
        shutil.move(str(repo / "model"), str(outside / "model"))
        (outside / "model" / "chat_template.jinja").write_text("{{ '" + SECRET + "' }}" + TAIL)
        (repo / "model").symlink_to(outside / "model")
    elif what == "dataset":
        secret.write_text(json.dumps({"prompt": "hi", SECRET: 1}) + "\n")
        (repo / "data.jsonl").unlink()
        (repo / "data.jsonl").symlink_to(secret)
    else:
        secret.write_text((repo / "recipe.yaml").read_text().replace(": model", f": {repo / 'model'}")
                          .replace(": data.jsonl", f": {repo / 'data.jsonl'}") + f"{SECRET}: 1\n")
        (repo / "recipe.yaml").unlink()
        (repo / "recipe.yaml").symlink_to(secret)
    for fmt in ("json", "sarif"):
        proc = _static(repo, "--format", fmt)
        assert SECRET not in proc.stdout + proc.stderr
        _one_line_exit_2(proc, "a symbolic link leads out of the checked repository", "--static reads no file outside it")


def test_a_link_inside_the_repository_is_read(built_fixtures, tmp_path):
    repo = _repo(tmp_path)
    shutil.move(str(repo / "model"), str(repo / "models-real"))
    (repo / "model").symlink_to(repo / "models-real")
    proc = _static(repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- class 6: malformed inputs are one line, never a rule error -------------------------------------------------------

def _edit_json(path: Path, **changes) -> None:
    value = json.loads(path.read_text())
    value.update(changes)
    path.write_text(json.dumps(value))


MALFORMED = {
    "nested-json": (lambda m: (m / "tokenizer_config.json").write_text("[" * 100_000 + "]" * 100_000),
                    "nested too deeply"),
    "non-utf8-template": (lambda m: (m / "chat_template.jinja").write_bytes(b"{{ '\xff\xfe' }}" + TAIL.encode()),
                          "not UTF-8 text: byte 0xff"),
    "added-tokens-decoder-list": (lambda m: _edit_json(m / "tokenizer_config.json", added_tokens_decoder=[1, 2]),
                                  "`added_tokens_decoder` must be an object"),
    "model-list": (lambda m: _edit_json(m / "tokenizer.json", model=[1]), "`model` must be an object"),
    "template-name-list": (lambda m: ((m / "chat_template.jinja").unlink(), _edit_json(
        m / "tokenizer_config.json", chat_template=[{"name": ["default"], "template": TAIL}])),
        "each named template is an object with a string `name`"),
    "added-tokens-int": (lambda m: _edit_json(m / "tokenizer.json", added_tokens=7), "`added_tokens` must be a list"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_input_is_one_line(built_fixtures, tmp_path, case):
    pytest.importorskip("jinja2")
    repo = _repo(tmp_path)
    make, words = MALFORMED[case]
    make(repo / "model")
    proc = _static(repo, "--format", "json")
    _one_line_exit_2(proc, str(repo / "model"), words)


def test_a_full_tmpdir_changes_nothing(built_fixtures, tmp_path):
    """Every file write fails (RLIMIT_FSIZE 0, as on a full disk): --static writes no temporary file, so the check
    is the same."""
    import resource
    import signal

    def full_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    repo = _repo(tmp_path)
    proc = subprocess.run([trl_doctor_exe(), "check", "--static", "--format", "json", str(repo / "recipe.yaml")],
                          capture_output=True, text=True, timeout=60, preexec_fn=full_disk)
    assert proc.returncode == 0, proc.stderr
    assert result_of(json.loads(proc.stdout), "eos-termination")["status"] == "pass"


def test_a_report_that_cannot_be_written_is_one_line(built_fixtures, tmp_path):
    """With every file write failing (a full disk), `-o report.sarif` is one line, exit 2: before, a traceback."""
    import resource
    import signal

    def full_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    repo = _repo(tmp_path)
    report = tmp_path / "report.sarif"
    proc = subprocess.run([trl_doctor_exe(), "check", "--static", "--format", "sarif", "-o", str(report),
                           str(repo / "recipe.yaml")], capture_output=True, text=True, timeout=60, preexec_fn=full_disk)
    _one_line_exit_2(proc, str(report), "cannot write the report")
