"""The wheel ships the top-level rules/ folder as trl_doctor.rules and no top-level `rules` package;
the editable install sees exactly the same rule modules."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True)
    return next(out.glob("trl_doctor-*.whl"))


def test_wheel_layout(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert not any(n.startswith("rules/") for n in names), "a top-level `rules` package would shadow others"
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("trl_doctor/rules/") and n.endswith(".py"))
    in_repo = sorted(p.name for p in (ROOT / "rules").glob("*.py"))
    assert shipped == in_repo
    data = sorted(n for n in names if n.startswith("trl_doctor/data/"))
    assert data == sorted(f"trl_doctor/{p.relative_to(ROOT / 'trl_doctor').as_posix()}"
                          for p in (ROOT / "trl_doctor" / "data").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert "trl_doctor/data/boot/sitecustomize.py" in data  # the scout every process of a launch starts with
    assert "trl_doctor/data/known_issues.yaml" in data  # the version-skew rule's table
    assert any(n.endswith("entry_points.txt") for n in names)
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "trl-doctor = trl_doctor.front.cli:main" in entry_points
    # every module of the engine ships: the facts layer and the trainer run are packages of their own
    engine = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "trl_doctor").rglob("*.py") if "__pycache__" not in p.parts)
    assert [n for n in engine if n not in names] == []


def test_rules_folder_refuses_the_top_level_name():
    proc = subprocess.run([sys.executable, "-c", "import rules"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "must be imported as trl_doctor.rules" in proc.stderr
