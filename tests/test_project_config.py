"""Project configuration ([tool.trl-doctor] in pyproject.toml, .trl-doctor.toml) and inline suppression, through the
real command on copies of the fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import result_of, run_doctor

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

FIX = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture()
def project(built_fixtures, tmp_path) -> Path:
    """A project folder: recipes/ (a healthy config and one with an unknown key) and recipes/exp/ (the same)."""
    for sub in ("recipes", "recipes/exp"):
        d = tmp_path / sub
        d.mkdir(parents=True)
        shutil.copy(FIX / "trainer-config" / "rewards.py", d)
        for name in ("ok_grpo.yaml", "bad_unknown_key.yaml"):
            text = (FIX / "trainer-config" / name).read_text().replace("../", f"{FIX}/")
            (d / name).write_text(text)
    return tmp_path


def check_json(*args: str) -> tuple[int, dict]:
    proc = run_doctor("check", "--static", "--format", "json", *args)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_pyproject_settings_apply_and_the_command_line_wins(project):
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.trl-doctor]\nselect = ["trainer-config", '
                                           '"version-skew"]\nignore = ["version-skew"]\nfail-on = "warn"\n')
    code, report = check_json(str(project / "recipes" / "ok_grpo.yaml"))
    assert [r["id"] for r in report["results"]] == ["TD009"]  # select, minus ignore
    code, report = check_json(str(project / "recipes" / "ok_grpo.yaml"), "--select", "pad-token")
    assert [r["id"] for r in report["results"]] == ["TD001"]  # the command line's select replaces the file's


def test_per_file_ignores_and_the_nearest_file_wins(project):
    (project / "pyproject.toml").write_text('[tool.trl-doctor]\nselect = ["trainer-config"]\n'
                                           '[tool.trl-doctor.per-file-ignores]\n"recipes/exp/*.yaml" = ["TD009"]\n')
    code, report = check_json(str(project / "recipes" / "bad_unknown_key.yaml"))
    assert code == 1 and result_of(report, "trainer-config")["status"] == "fail"
    code, report = check_json(str(project / "recipes" / "exp" / "bad_unknown_key.yaml"))
    assert code == 0 and report["results"] == []
    # a .trl-doctor.toml nearer the config replaces the pyproject's settings
    (project / "recipes" / "exp" / ".trl-doctor.toml").write_text('select = ["pad-token"]\n')
    code, report = check_json(str(project / "recipes" / "exp" / "bad_unknown_key.yaml"))
    assert [r["id"] for r in report["results"]] == ["TD001"]


def test_target_and_smoke_from_the_project(project):
    (project / ".trl-doctor.toml").write_text('target = "4xA100-40GB"\nselect = ["batch-geometry"]\n')
    code, report = check_json(str(project / "recipes" / "ok_grpo.yaml"))
    assert "--target 4xA100-40GB" in result_of(report, "batch-geometry")["message"]


@pytest.mark.parametrize("text, words", [
    ('bogus = 1\n', "unknown setting 'bogus'"),
    ('fail-on = "always"\n', "`fail-on` must be"),
    ('select = "TD001"\n', "`select` must be a list"),
    ('select = [\n', "invalid TOML"),
    ('target = "9xNOPE"\n', "--target '9xNOPE'"),
])
def test_a_bad_project_file_is_one_line_and_exit_2(project, text, words):
    (project / ".trl-doctor.toml").write_text(text)
    proc = run_doctor("check", "--static", str(project / "recipes" / "ok_grpo.yaml"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0]


# -- inline suppression ---------------------------------------------------------------------------------------

def suppressed_recipe(project: Path, comment: str) -> Path:
    path = project / "recipes" / "sup.yaml"
    text = (project / "recipes" / "ok_grpo.yaml").read_text().replace(
        "num_generations: 4                  # GRPOConfig", f"num_generations: 3  {comment}")
    assert "num_generations: 3" in text
    path.write_text(text)
    return path


def test_a_suppressed_finding_is_reported_as_such_and_does_not_fail(project):
    path = suppressed_recipe(project, "# trl-doctor: ignore[batch-geometry]")
    code, report = check_json(str(path), "--select", "batch-geometry")
    geometry = result_of(report, "batch-geometry")
    assert code == 0 and geometry["status"] == "fail" and geometry["suppressed"] == f"{path}:{_line(path)}"
    assert report["summary"]["suppressed"] == 1 and report["summary"]["fail"] == 0
    table = run_doctor("check", "--static", "--select", "batch-geometry", str(path))
    assert table.returncode == 0 and "(suppressed)" in table.stdout and "1 suppressed" in table.stdout
    sarif = json.loads(run_doctor("check", "--static", "--select", "batch-geometry", "--format", "sarif", str(path)).stdout)
    assert sarif["runs"][0]["results"][0]["suppressions"][0]["kind"] == "inSource"
    github = run_doctor("check", "--static", "--select", "batch-geometry", "--format", "github", str(path)).stdout
    assert github.startswith("::notice ") and "suppressed by" in github
    junit = run_doctor("check", "--static", "--select", "batch-geometry", "--format", "junit", str(path)).stdout
    assert "<skipped message=\"suppressed by" in junit and "<failure" not in junit


def test_a_suppression_names_its_rules(project):
    path = suppressed_recipe(project, "# trl-doctor: ignore[pad-token]")
    code, report = check_json(str(path), "--select", "batch-geometry")
    assert code == 1 and result_of(report, "batch-geometry")["suppressed"] is None
    path = suppressed_recipe(project, "# trl-doctor: ignore")
    code, report = check_json(str(path), "--select", "batch-geometry")
    assert code == 0 and result_of(report, "batch-geometry")["suppressed"]


@pytest.mark.parametrize("hidden", [
    'description: |\n  a note\n  num_generations: 3  # trl-doctor: ignore[batch-geometry]\n',
    'description: >\n  num_generations: 3  # trl-doctor: ignore\n',
    'description: "line one\n  num_generations: 3  # trl-doctor: ignore[batch-geometry]"\n',
    "description: 'num_generations: 3 # trl-doctor: ignore'\n",
], ids=["literal-block", "folded-block", "double-quoted", "single-quoted"])
def test_a_suppression_inside_a_string_is_data_not_a_comment(project, hidden):
    """A comment-shaped line inside a YAML string (issue 31) silences nothing; the same comment on a key's line
    still does, and one after a block's `|` indicator is a real comment."""
    path = suppressed_recipe(project, "")
    path.write_text(hidden + path.read_text())
    code, report = check_json(str(path), "--select", "batch-geometry")
    assert code == 1 and result_of(report, "batch-geometry")["suppressed"] is None, report
    path.write_text("description: |  # trl-doctor: ignore[batch-geometry]\n  text\n" +
                    suppressed_recipe(project, "# trl-doctor: ignore[batch-geometry]").read_text())
    code, report = check_json(str(path), "--select", "batch-geometry")
    assert code == 0 and result_of(report, "batch-geometry")["suppressed"], report


def _line(path: Path) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "trl-doctor: ignore" in line)


def test_isolated_ignores_project_config_and_inline_suppressions_and_every_report_lists_them(project):
    """A project file and an inline comment silence a failure; every format says so and where it comes from;
    --isolated reads neither, as ruff's does."""
    (project / ".trl-doctor.toml").write_text('ignore = ["trainer-config"]\n')
    path = suppressed_recipe(project, "# trl-doctor: ignore[batch-geometry]")
    code, report = check_json(str(path), "--select", "batch-geometry,trainer-config")
    assert code == 0 and [r["id"] for r in report["results"]] == ["TD010"]
    assert {(s["setting"], s["source"]) for s in report["settings"]} == {
        ("select", "command line"), ("ignore", str(project / ".trl-doctor.toml")),
        ("inline ignore", f"{path}:{_line(path)}"), ("static", "command line")}
    table = run_doctor("check", "--static", str(path)).stdout
    assert f"setting in force: ignore trainer-config (from {project / '.trl-doctor.toml'})" in table
    assert f"setting in force: inline ignore batch-geometry on `num_generations` (from {path}:{_line(path)})" in table
    junit = run_doctor("check", "--static", "--format", "junit", str(path)).stdout
    assert 'name="setting in force" value="ignore trainer-config (from ' in junit
    code, report = check_json(str(path), "--select", "batch-geometry,trainer-config", "--isolated")
    assert code == 1 and {r["id"]: r["suppressed"] for r in report["results"]} == {"TD009": None, "TD010": None}
    assert [s["setting"] for s in report["settings"]] == ["isolated", "select", "static"]


def test_the_api_takes_settings_as_the_command_line_does(project):
    """check(select="TD010") is one rule, not five characters; the project's config and the inline suppressions
    apply as on the command line (the same path: trl_doctor.front.settings)."""
    from trl_doctor import check

    (project / "pyproject.toml").write_text('[tool.trl-doctor]\nignore = ["trainer-config"]\nsmoke = false\n')
    path = suppressed_recipe(project, "# trl-doctor: ignore[batch-geometry]")
    report = check(str(path), select="batch-geometry, trainer-config")
    assert [(r.id, bool(r.suppressed)) for r in report.results] == [("TD010", True)] and report.ok
    assert json.loads(report.to_json())["settings"] == [s for s in check_json(
        str(path), "--select", "batch-geometry, trainer-config")[1]["settings"] if s["setting"] != "static"]
    report = check(str(path), select=["batch-geometry", "trainer-config"], isolated=True)
    assert [r.id for r in report.results] == ["TD009", "TD010"] and not report.ok


def test_a_suppressed_fail_does_not_stop_fail_fast(project):
    """--fail-fast stops at a verdict that fails the check; a suppressed fail does not, so every rule still runs."""
    path = suppressed_recipe(project, "# trl-doctor: ignore[batch-geometry]")
    code, report = check_json(str(path), "--select", "batch-geometry,chat-template,trainer-config", "--fail-fast")
    assert code == 0 and result_of(report, "batch-geometry")["suppressed"]
    assert all(r["message"] != "not run: --fail-fast" for r in report["results"])
    assert {r["rule"] for r in report["results"]} == {"batch-geometry", "chat-template", "trainer-config"}


def test_the_api_takes_static_and_fix_as_the_command_line_does(project):
    """One front door: check(path, static=True) is `check --static` and check(path, fix=True) is `--fix`, through the
    same request, refusals and runs (trl_doctor.front.request)."""
    from trl_doctor import InputError, check

    path = project / "recipes" / "bad_unknown_key.yaml"
    report = check(str(path), static=True, select="trainer-config,batch-geometry")
    code, cli = check_json(str(path), "--select", "trainer-config,batch-geometry")
    shown = json.loads(report.to_json())
    assert [(r["id"], r["status"], r["message"]) for r in shown["results"]] == \
        [(r["id"], r["status"], r["message"]) for r in cli["results"]]
    assert shown["settings"] == cli["settings"] and code == (0 if report.ok else 1)
    with pytest.raises(InputError, match="--fix and --diff need the full check"):
        check(str(path), static=True, fix=True)

    text = (FIX / "trainer-config" / "bad_renamed_torch_dtype.yaml").read_text().replace("../", f"{FIX}/")
    by_api, by_cli = project / "recipes" / "api.yaml", project / "recipes" / "cli.yaml"
    by_api.write_text(text)
    by_cli.write_text(text)
    fixed = check(str(by_api), select="trainer-config", smoke=False, fix=True)
    proc = run_doctor("check", str(by_cli), "--select", "trainer-config", "--no-smoke", "--fix")
    assert by_api.read_text() == by_cli.read_text() != text
    assert fixed.ok and proc.returncode == 0 and [a["file"] for a in fixed.applied] == [str(by_api)]
    assert fixed.results[0].fix_applied
