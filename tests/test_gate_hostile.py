"""The CI gate under a hostile pull request (issue 31, classes 2, 3, 5 and 7). The GitHub action's scripts run as its
steps run them (tests/test_ci_integrations._run_action_script), on real git repositories with a pull-request branch
in tmp_path; the CLI runs for real. Each case is a bypass that worked before: the pull request's own project config
kept in force through a folder name git prints quoted, a symlinked config (or a config's linked folder) written
through to a file outside the workspace, an inline ignore the pull request adds (hidden from `git diff` too), a
multi-line `configs:` input of which only the first line was checked, a config name shaped like an option, a link at
a report's path; file names and keys that put `::` or `##[` into the CI log mid-line (class 2); an ignore comment
inside a YAML block string (class 5); a report path in a folder that does not exist (class 7)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import run_doctor
from test_ci_integrations import BAD, FIX, GOOD, _run_action_script

pytestmark = pytest.mark.release_free


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _repo(tmp_path: Path, folder: str = "recipes") -> tuple[Path, Path]:
    """A repository whose base commit holds a recipe trainer-config fails (`folder`/r.yaml); (repo, the recipe)."""
    repo = tmp_path / "repo"
    (repo / folder).mkdir(parents=True)
    shutil.copy(FIX / "trainer-config" / "rewards.py", repo / folder)
    recipe = repo / folder / "r.yaml"
    recipe.write_text(Path(BAD).read_text().replace("../", f"{FIX}/"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    return repo, recipe


def _pull_request(repo: Path, message: str = "the pull request") -> None:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)


def _gate(tmp_path: Path, repo: Path, base: str, configs: str, during=None, mode: str = "base",
          log: list[str] | None = None) -> tuple[str, dict]:
    """(status, SARIF run) of the action's steps; `during()` runs between prepare and restore; what the steps print
    (the CI log) is added to `log`."""
    prepare, prepared = _run_action_script(tmp_path, "project-config.sh", repo, "prepare", project_config=mode,
                                           base_sha=base)
    assert prepare.returncode == 0, prepare.stdout + prepare.stderr
    if during is not None:
        during()
    sarif = tmp_path / "gate.sarif"
    check, outputs = _run_action_script(tmp_path, "check.sh", repo, configs=configs, sarif=str(sarif),
                                        args="--static --select trainer-config", isolated=prepared["isolated"],
                                        pr_links=prepared.get("links", "0"))
    restored, _ = _run_action_script(tmp_path, "project-config.sh", repo, "restore")
    assert restored.returncode == 0, restored.stderr
    if log is not None:
        log += [proc.stdout + proc.stderr for proc in (prepare, check, restored)]
    return outputs["status"], json.loads(sarif.read_text())["runs"][0]


def test_a_project_config_in_a_non_ascii_folder_is_read_from_the_base_branch(built_fixtures, tmp_path):
    repo, recipe = _repo(tmp_path, "récettes")
    base = _git(repo, "rev-parse", "HEAD")
    (recipe.parent / ".trl-doctor.toml").write_text('ignore = ["trainer-config"]\n')
    _pull_request(repo)
    status, run = _gate(tmp_path, repo, base, "récettes/r.yaml")
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"]
    assert (recipe.parent / ".trl-doctor.toml").read_text() == 'ignore = ["trainer-config"]\n'  # put back


def test_a_symlinked_project_config_is_never_written_through(built_fixtures, tmp_path):
    repo, _ = _repo(tmp_path)
    (repo / ".trl-doctor.toml").write_text('select = ["trainer-config"]\n')
    _pull_request(repo, "a project config on the base branch")
    base = _git(repo, "rev-parse", "HEAD")
    outside = tmp_path / "outside.toml"
    outside.write_text('ignore = ["trainer-config"]\n')  # a file of the runner's, outside the workspace
    (repo / ".trl-doctor.toml").unlink()
    (repo / ".trl-doctor.toml").symlink_to(outside)
    _pull_request(repo)
    def untouched():  # while the check runs, and after
        assert outside.read_text() == 'ignore = ["trainer-config"]\n', "the base's config was written through the link"

    status, run = _gate(tmp_path, repo, base, "recipes/r.yaml", during=untouched)
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"]
    untouched()
    assert (repo / ".trl-doctor.toml").is_symlink() and os.readlink(repo / ".trl-doctor.toml") == str(outside)


def test_an_inline_ignore_the_pull_request_adds_does_not_silence_the_gate(built_fixtures, tmp_path):
    repo, recipe = _repo(tmp_path)
    base = _git(repo, "rev-parse", "HEAD")
    lines = recipe.read_text().splitlines()
    key = next(i for i, line in enumerate(lines) if line.startswith("num_generation:"))
    lines[key] += "  # trl-doctor: ignore[trainer-config]"
    recipe.write_text("\n".join(lines) + "\n")
    _pull_request(repo)
    status, run = _gate(tmp_path, repo, base, "recipes/r.yaml")
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"]
    assert run["results"][0].get("suppressions") in (None, [])


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["LF", "CRLF"])
def test_every_line_of_a_multi_line_configs_input_is_checked(built_fixtures, tmp_path, newline):
    sarif = tmp_path / "r.sarif"
    _, outputs = _run_action_script(tmp_path, "check.sh", Path(GOOD).parents[2], configs=f"{GOOD}{newline}{BAD}{newline}",
                                    sarif=str(sarif), args="--static --select trainer-config")
    assert outputs["status"] == "1"
    (result,) = json.loads(sarif.read_text())["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("bad_unknown_key.yaml")


def test_a_config_named_like_an_option_is_a_file_name(built_fixtures, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(FIX / "trainer-config" / "rewards.py", work)
    (work / "-oreport.txt").write_text(Path(GOOD).read_text().replace("../", f"{FIX}/"))
    sarif = tmp_path / "r.sarif"
    _, outputs = _run_action_script(tmp_path, "check.sh", work, configs="-oreport.txt", sarif=str(sarif),
                                    args="--static --select trainer-config")
    assert not (work / "report.txt").exists(), "the config name reached the command line as -o"
    assert outputs["status"] == "0"
    assert json.loads(sarif.read_text())["runs"][0]["properties"]["configs"][0]["config"].endswith("-oreport.txt")


def test_the_sarif_goes_into_a_folder_that_does_not_exist(built_fixtures, tmp_path):
    sarif = tmp_path / "new" / "dir" / "r.sarif"
    _, outputs = _run_action_script(tmp_path, "check.sh", Path(GOOD).parents[2], configs=GOOD, sarif=str(sarif),
                                    args="--static --select trainer-config")
    assert outputs["status"] == "0" and json.loads(sarif.read_text())["runs"][0]["results"] == []
    sarif = tmp_path / "other" / "r.sarif"  # refused before any check: the fallback document, in its new folder
    _, outputs = _run_action_script(tmp_path, "check.sh", Path(GOOD).parents[2], configs=GOOD, sarif=str(sarif),
                                    args="--no-such-option")
    assert outputs["status"] == "2" and json.loads(sarif.read_text())["runs"][0]["results"] == []


# --- class 3, what the first fixes left open ---------------------------------------------------------------------

HOSTILE_NAME = "x\n::error::pwned ##[add-mask]secret ::warning::more ##[stop-commands]t"


def _markers(text: str) -> list[str]:
    """The lines of a CI log that hold a workflow command's marker (`::` or `##[`, anywhere: the runner acts on
    `##[cmd]` mid-line), an annotation's own `::level props::` prefix aside."""
    bad = []
    for line in text.splitlines():
        data = line.split("::", 2)[2] if re.match(r"^::(error|warning|notice) [^:]*::", line) else line
        if "::" in data or "##[" in data:
            bad.append(line)
    return bad


@pytest.mark.parametrize("mode", ["base", "ignore-changed"])
def test_the_file_names_the_action_prints_carry_no_workflow_command(built_fixtures, tmp_path, mode):
    """A folder name of the pull request's (a newline, `::error::`, `##[add-mask]` in it) is named in the log as the
    action reads its project config: it reaches the log with no marker intact, and the gate still fails."""
    repo, recipe = _repo(tmp_path)
    (repo / HOSTILE_NAME).mkdir()
    (repo / HOSTILE_NAME / ".trl-doctor.toml").write_text('select = ["trainer-config"]\n')
    _pull_request(repo, "a project config on the base branch")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / HOSTILE_NAME / ".trl-doctor.toml").write_text('ignore = ["trainer-config"]\n')
    _pull_request(repo)
    log: list[str] = []
    status, run = _gate(tmp_path, repo, base, "recipes/r.yaml", mode=mode, log=log)
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"]
    assert "pwned" in log[0], log  # named, made harmless
    assert not _markers("".join(log)), _markers("".join(log))


@pytest.mark.parametrize("hide", ["gitattributes -diff", "gitattributes binary", "no-break space"])
def test_an_inline_ignore_git_diff_would_not_show_still_isolates(built_fixtures, tmp_path, hide):
    """The pull request's inline ignore is found however it is dressed: a .gitattributes of its own that makes git
    print 'Binary files differ' for the recipe, or white space (U+00A0) that the CLI's `\\s` reads and a POSIX
    [[:space:]] does not."""
    repo, recipe = _repo(tmp_path)
    base = _git(repo, "rev-parse", "HEAD")
    space = "\u00a0" if hide == "no-break space" else " "
    if hide.startswith("gitattributes"):
        (repo / ".gitattributes").write_text(f"*.yaml {hide.split()[1]}\n")
    text = recipe.read_text().replace("num_generation: 4", f"num_generation: 4  #{space}trl-doctor: ignore[TD009]")
    recipe.write_text(text, encoding="utf-8")
    _pull_request(repo)
    alone = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", str(recipe))
    assert alone.returncode == 0, "the CLI itself reads the comment: the gate must not"
    status, run = _gate(tmp_path, repo, base, "recipes/r.yaml")
    assert status == "1" and not run["results"][0].get("suppressions"), run["results"]


def test_a_project_config_behind_a_linked_folder_is_never_written_through(built_fixtures, tmp_path):
    """The pull request turns the folder of a base project config into a symbolic link out of the workspace: the
    base's file is not written there (nor removed, nor put back); the check ignores project config instead."""
    repo, _ = _repo(tmp_path)
    (repo / "conf").mkdir()
    (repo / "conf" / ".trl-doctor.toml").write_text('select = ["trainer-config"]\n')
    _pull_request(repo, "a project config on the base branch")
    base = _git(repo, "rev-parse", "HEAD")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".trl-doctor.toml").write_text("# the runner's\n")
    shutil.rmtree(repo / "conf")
    (repo / "conf").symlink_to(outside, target_is_directory=True)
    _pull_request(repo)

    def untouched():
        assert (outside / ".trl-doctor.toml").read_text() == "# the runner's\n", "written through the linked folder"

    status, run = _gate(tmp_path, repo, base, "recipes/r.yaml", during=untouched)
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"]
    untouched()
    assert (repo / "conf").is_symlink()


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_a_link_at_the_report_path_is_never_written_through(built_fixtures, tmp_path, linked):
    """The pull request commits a symbolic link where the workflow writes its SARIF / JUnit (or at their folder): the
    reports replace the links; the files they point at, outside the workspace, are untouched."""
    repo, _ = _repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("sarif", "xml"):
        (outside / f"report.{name}").write_text("# the runner's\n")
        if linked == "file":
            (repo / "reports").mkdir(exist_ok=True)
            (repo / "reports" / f"report.{name}").symlink_to(outside / f"report.{name}")
    if linked == "folder":
        (repo / "reports").symlink_to(outside, target_is_directory=True)
    _pull_request(repo)
    proc, outputs = _run_action_script(tmp_path, "check.sh", repo, configs="recipes/r.yaml",
                                       sarif="reports/report.sarif", junit="reports/report.xml",
                                       args="--static --select trainer-config")
    assert outputs["status"] == "1", proc.stdout + proc.stderr
    assert all(path.read_text() == "# the runner's\n" for path in outside.iterdir())
    sarif, junit = repo / "reports" / "report.sarif", repo / "reports" / "report.xml"
    assert not (repo / "reports").is_symlink() and not sarif.is_symlink() and not junit.is_symlink()
    assert json.loads(sarif.read_text())["runs"] and ET.fromstring(junit.read_text().split("?>", 1)[1]) is not None



# --- issue 44, class 5: the base branch's config through links, and links the pull request makes --------------------

def _lax(text: str = 'ignore = ["trainer-config"]\n') -> str:
    return text


def test_a_base_config_that_is_a_link_is_read_as_the_base_file_it_leads_to(built_fixtures, tmp_path):
    """The base branch's .trl-doctor.toml is a link to cfg/project.toml; the pull request edits cfg/project.toml
    (not a file named like a project config) to ignore the failing rule. The check reads the base's file."""
    repo, _ = _repo(tmp_path)
    (repo / "cfg").mkdir()
    (repo / "cfg" / "project.toml").write_text('select = ["trainer-config"]\n')
    (repo / ".trl-doctor.toml").symlink_to("cfg/project.toml")
    _pull_request(repo, "the project config, kept in cfg/")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "cfg" / "project.toml").write_text(_lax())
    _pull_request(repo)
    log: list[str] = []
    status, run = _gate(tmp_path, repo, base, "recipes/r.yaml", log=log)
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"], log
    assert "is a link on the base branch; the check reads cfg/project.toml as it is there" in "".join(log)
    assert (repo / ".trl-doctor.toml").is_symlink() and (repo / "cfg" / "project.toml").read_text() == _lax()


def test_a_recipe_made_a_link_into_an_exempt_folder_fails_the_gate(built_fixtures, tmp_path):
    """The base exempts experimental/ (per-file-ignores); the pull request moves the gated recipe there and leaves a
    link at its path. The check is given recipes/r.yaml: its ignores are decided by that path, and the link fails."""
    repo, recipe = _repo(tmp_path)
    (repo / ".trl-doctor.toml").write_text('[per-file-ignores]\n"experimental/*" = ["trainer-config"]\n')
    (repo / "experimental").mkdir()
    (repo / "experimental" / "README.md").write_text("anything goes here\n")
    _pull_request(repo, "an exempt folder")
    base = _git(repo, "rev-parse", "HEAD")
    shutil.copy(recipe.parent / "rewards.py", repo / "experimental")
    (repo / "experimental" / "r.yaml").write_text(recipe.read_text())
    recipe.unlink()
    recipe.symlink_to("../experimental/r.yaml")
    _pull_request(repo)
    log: list[str] = []
    status, _ = _gate(tmp_path, repo, base, "recipes/r.yaml", log=log)
    assert status == "1", log
    text = "".join(log)
    assert "::error::trl-doctor: this pull request adds or changes a symbolic link, recipes/r.yaml -> " \
           "../experimental/r.yaml" in text
    # the doctor alone (no action), on the path as given: the exempt folder's ignore does not follow the link
    proc = run_doctor("check", "--static", "--select", "trainer-config", "recipes/r.yaml", cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_a_gated_folder_made_a_link_to_a_lax_sub_project_fails_the_gate(built_fixtures, tmp_path):
    """The base holds a sub-project with its own lax config; the pull request turns the gated folder into a link to
    it. The check is given recipes/r.yaml: the link fails the gate, and no config is read through it."""
    repo, recipe = _repo(tmp_path)
    (repo / "sub").mkdir()
    (repo / "sub" / ".trl-doctor.toml").write_text(_lax())
    _pull_request(repo, "a lax sub-project")
    base = _git(repo, "rev-parse", "HEAD")
    shutil.copy(recipe.parent / "rewards.py", repo / "sub")
    (repo / "sub" / "r.yaml").write_text(recipe.read_text())
    shutil.rmtree(recipe.parent)
    (repo / "recipes").symlink_to("sub", target_is_directory=True)
    _pull_request(repo)
    log: list[str] = []
    status, run = _gate(tmp_path, repo, base, "recipes/r.yaml", log=log)
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"], log
    assert "a symbolic link, recipes -> sub" in "".join(log)


# --- class 2: no workflow command from the checked repository reaches a CI log ------------------------------------

def test_no_marker_reaches_the_log_of_a_hostile_pull_request(built_fixtures, tmp_path):
    """The action on a pull request whose file names and config keys carry `::error::`, `##[add-mask]` and
    `##[stop-commands]` mid-line: none of its steps' log lines (annotations' data, the exit-2 line, the summary)
    holds a marker intact, and the hostile text is still there to read."""
    repo, recipe = _repo(tmp_path)
    base = _git(repo, "rev-parse", "HEAD")
    (recipe.parent / "r.yaml").write_text(recipe.read_text() + f"{json.dumps(HOSTILE_NAME)}: 1\n")
    hostile = recipe.parent / "a ::error::x ##[add-mask]y ##[stop-commands]z.yaml"
    hostile.write_text(recipe.read_text())
    (recipe.parent / "broken ::warning::b ##[add-mask]c.yaml").write_text("model_name_or_path: [unclosed\n")
    _pull_request(repo)
    log: list[str] = []
    for configs in ("recipes/*.yaml", "recipes/r.yaml recipes/a*.yaml"):
        status, _ = _gate(tmp_path, repo, base, configs, log=log)
        assert status in ("1", "2")
    text = "".join(log)
    assert "pwned" in text and "add-mask" in text
    assert not _markers(text), _markers(text)


@pytest.mark.parametrize("fmt", ["github", "table", "json", "sarif", "junit"])
def test_the_exit_2_line_and_progress_carry_no_marker(built_fixtures, tmp_path, fmt):
    """A config whose path carries markers mid-line and that cannot be read: every line on stdout and stderr (the
    one error line, progress lines) under every format has them broken."""
    folder = tmp_path / "d ::error::e ##[add-mask]f"
    folder.mkdir()
    broken = folder / "g ##[stop-commands]h ::warning::i.yaml"
    broken.write_text("model_name_or_path: [unclosed\n")
    proc = run_doctor("check", "--static", "--progress", "--format", fmt, str(broken), str(Path(GOOD)), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "add-mask" in proc.stderr
    assert not _markers(proc.stdout + proc.stderr), _markers(proc.stdout + proc.stderr)


# --- class 5: a suppression comment counts only where it is a YAML comment -----------------------------------------

@pytest.mark.parametrize("block", ["|", ">", "|-"])
def test_an_ignore_comment_inside_a_block_string_silences_nothing(built_fixtures, tmp_path, block):
    recipe = tmp_path / "r.yaml"
    bad = Path(BAD).read_text().replace("../", f"{FIX}/")
    shutil.copy(FIX / "trainer-config" / "rewards.py", tmp_path)
    recipe.write_text(f"description: {block}\n  num_generation: 4  # trl-doctor: ignore[trainer-config]\n" + bad)
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", str(recipe))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (result,) = [r for r in json.loads(proc.stdout)["results"] if r["rule"] == "trainer-config"]
    assert result["status"] == "fail" and not result.get("suppressed"), result
    recipe.write_text(bad.replace("num_generation: 4", "num_generation: 4  # trl-doctor: ignore[trainer-config]"))
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", str(recipe))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the same comment, a real one: it suppresses


# --- class 7: a report in a folder that does not exist ---------------------------------------------------------------

def test_a_report_folder_that_does_not_exist_is_made(built_fixtures, tmp_path):
    """-o and --report into folders that do not exist: made, as ruff's --output-file; a file where a folder should
    be: one line, exit 2, no traceback."""
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "sarif", "-o", "no/dir/x.sarif",
                      "--report", "junit=other/dir/x.xml", GOOD, cwd=tmp_path)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert json.loads((tmp_path / "no/dir/x.sarif").read_text())["runs"][0]["results"] == []
    assert ET.parse(tmp_path / "other/dir/x.xml").getroot() is not None
    (tmp_path / "afile").write_text("")
    for where in (["-o", "afile/x.sarif"], ["--report", "sarif=afile/x.sarif"]):
        proc = run_doctor("check", "--static", "--select", "trainer-config", *where, GOOD, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and "a file stands where its folder would be" in proc.stderr, proc.stderr
