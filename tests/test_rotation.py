"""The rotations that keep CI within its 45 minutes (tests/rotation.py): every member runs within as many days as
its rotation has turns, the measured-heavy list names tests that exist, its turns are balanced by their measured
time, and a test out of today's turn is skipped saying why, unless it is named or everything is asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import rotation
from rotation import HEAVY, HEAVY_SECONDS, Rotation, balanced, lane_halves

pytestmark = pytest.mark.release_free  # the test suite's own scheduling

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_overrides(monkeypatch):
    for variable in (rotation.ALL, "TRL_DOCTOR_X_ALL", HEAVY.variable):
        monkeypatch.delenv(variable, raising=False)


def test_each_day_runs_one_turn_and_every_member_runs_within_the_turns(monkeypatch, no_overrides):
    r = Rotation.of("cases", ["a", {"b", "c"}, ["d"]], "TRL_DOCTOR_X_ALL")
    seen = []
    for day in range(700, 706):
        monkeypatch.setattr(rotation, "day", lambda day=day: day)
        seen.append({m for m in "abcd" if r.runs(m)})
        assert r.runs("not a member")
    assert seen == [{"b", "c"}, {"d"}, {"a"}] * 2  # 700 % 3 == 1
    monkeypatch.setattr(rotation, "day", lambda: 700)
    assert "today's turn of the cases is b, c, each one runs within 3 days; TRL_DOCTOR_X_ALL=1" in r.why_not("a")
    monkeypatch.setenv("TRL_DOCTOR_X_ALL", "1")
    assert all(r.runs(m) for m in "abcd") and r.why_not("a") is None
    monkeypatch.delenv("TRL_DOCTOR_X_ALL")
    monkeypatch.setenv(rotation.ALL, "1")
    assert all(r.runs(m) for m in "abcd")


def test_balanced_turns_split_the_measured_time_evenly_and_the_same_way_everywhere():
    seconds = {"a": 40, "b": 30, "c": 20, "d": 20, "e": 10, "f": 10}
    turns = balanced(seconds, 3)
    assert sorted(sum(seconds[n] for n in t) for t in turns) == [40, 40, 50]
    assert turns == balanced(dict(reversed(list(seconds.items()))), 3)
    assert frozenset().union(*turns) == set(seconds)


def test_the_heavy_turns_are_balanced_and_cover_the_list():
    times = [sum(HEAVY_SECONDS[n] for n in turn) for turn in HEAVY.turns]
    assert len(times) == 3 and max(times) <= 1.05 * min(times), times
    assert HEAVY.members == set(HEAVY_SECONDS)
    assert all(a.isdisjoint(b) for i, a in enumerate(HEAVY.turns) for b in HEAVY.turns[i + 1:])


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_every_heavy_node_id_names_a_collected_test():
    """A renamed test or case would silently leave the rotation (and run every day again): collect the files the
    list names and find each id among them."""
    files = sorted({n.split("::")[0] for n in HEAVY_SECONDS})
    collected, said = _collected("--all-tests", *files)
    assert collected, said[-2000:]
    missing = sorted(set(HEAVY_SECONDS) - collected)
    assert not missing, missing


def test_a_heavy_test_out_of_turn_is_skipped_saying_why(no_overrides):
    """Run through pytest itself (-k, so that it is not named on the command line): skipped, with the reason."""
    name = min(n for n in HEAVY_SECONDS if not HEAVY.runs(n) and "[" not in n)
    path, test = name.split("::")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "--all-tests", "-p", "no:cacheprovider", path,
                           "-k", test], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "1 skipped" in proc.stdout and "passed" not in proc.stdout, proc.stdout[-3000:]
    assert "in rotation (CI's 45 minutes): today's turn of the measured-heavy tests is" in proc.stdout, proc.stdout[-3000:]
    assert "TRL_DOCTOR_HEAVY_ALL=1 or TRL_DOCTOR_ROTATION_ALL=1 runs all" in proc.stdout


def _collected(*args: str) -> tuple[set[str], str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}, proc.stdout


def test_a_release_lane_runs_half_its_selection_a_day_and_the_other_half_the_next(monkeypatch, no_overrides):
    every, _ = _collected("tests/test_version_skew.py")
    half, said = _collected("--half-a-day", "tests/test_version_skew.py")
    assert len(every) >= 20 and 0.3 * len(every) < len(half) < 0.7 * len(every), (len(every), len(half))
    assert half == lane_halves(every).today(), said[-2000:]
    assert f"the other half of this selection ({len(every) - len(half)} tests) runs the next day" in said
    halves = lane_halves(sorted(every))
    assert halves.turns[0].isdisjoint(halves.turns[1]) and halves.members == every
    monkeypatch.setenv(rotation.ALL, "1")
    both, _ = _collected("--half-a-day", "tests/test_version_skew.py")
    assert both == every


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_test_with_turns_of_its_own_is_left_to_them(no_overrides):
    """Split again by --half-a-day, a case of a rotation would run only on the days both agree on (or never: the
    accuracy harness's six-day rotation and the halves both follow the day's parity): marked `rotates`, or in HEAVY,
    it is not split."""
    every, _ = _collected("--all-tests", "tests/test_accuracy.py", "tests/test_value_model.py")
    half, _ = _collected("--all-tests", "--half-a-day", "tests/test_accuracy.py", "tests/test_value_model.py")
    cases = {n for n in every if "::test_the_doctor_agrees_with_trl[" in n}
    heavy = {n for n in every if n in HEAVY.members}
    assert len(cases) > 50 and len(heavy) >= 4 and cases | heavy <= half
    assert half < every  # the rest of the two files is split
