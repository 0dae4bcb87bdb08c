"""The GitHub action under a hostile pull request (issue 31, classes 3 and 7): its scripts, run as its steps run them
(tests/test_ci_integrations._run_action_script), on real git repositories with a pull-request branch in tmp_path.
Each case is a bypass that worked before: the pull request's own project config kept in force through a folder
name git prints quoted, a symlinked config written through to a file outside the workspace, an inline ignore the
pull request adds, a multi-line `configs:` input of which only the first line was checked, a config name shaped
like an option, and a SARIF path in a folder that does not exist (no fallback document then)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


def _gate(tmp_path: Path, repo: Path, base: str, configs: str, during=None) -> tuple[str, dict]:
    """(status, SARIF run) of the action's steps; `during()` runs between prepare and restore."""
    _, prepared = _run_action_script(tmp_path, "project-config.sh", repo, "prepare", project_config="base",
                                     base_sha=base)
    if during is not None:
        during()
    sarif = tmp_path / "gate.sarif"
    _, outputs = _run_action_script(tmp_path, "check.sh", repo, configs=configs, sarif=str(sarif),
                                    args="--static --select trainer-config", isolated=prepared["isolated"])
    restored, _ = _run_action_script(tmp_path, "project-config.sh", repo, "restore")
    assert restored.returncode == 0, restored.stderr
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


def test_every_line_of_a_multi_line_configs_input_is_checked(built_fixtures, tmp_path):
    sarif = tmp_path / "r.sarif"
    _, outputs = _run_action_script(tmp_path, "check.sh", Path(GOOD).parents[2], configs=f"{GOOD}\n{BAD}\n",
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
