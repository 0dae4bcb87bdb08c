"""The accuracy harness in CI (issue 30): each case of tools/accuracy/cases.yaml and of the corpus whose releases this
lane has runs for one real step on the CPU (the ground truth) and through `trl-doctor check -- COMMAND`; a false alarm,
a wrong cause or a rule `error` fails the test. A miss is allowed (docs/accuracy.md lists each with why) but said.
"""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from rotation import Rotation

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.trl_pair]


def _harness():
    spec = importlib.util.spec_from_file_location("accuracy_run", ROOT / "tools" / "accuracy" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["accuracy_run"] = module
    spec.loader.exec_module(module)
    return module


HARNESS = _harness()
OUT = Path(tempfile.mkdtemp(prefix="trl-doctor-accuracy-"))
atexit.register(shutil.rmtree, OUT, ignore_errors=True)  # made at collection, by every xdist worker: gone with it
CASES = HARNESS.load_cases(OUT)

# The cases whose ground truth and check take longest (once 4 to 8 minutes each; measured again on 2026-11-25 with
# --durations on a 2-core machine: 115 s for cookbook_grpo_lora, about 62 s for each of the others, and 92 s for
# fareedkhan_r1_grpo in CI, whose machine is about 1.45x slower; verifiers_subclass 57 s and vllm_server_mode 47 s
# on 2026-11-26, the next slowest): CI runs one of them a run, in rotation by the day, so that `.ci/run` stays within
# its budget (issue 30 allows a time-bounded rotation). A second rotation takes the next slowest (17-27 s each on
# 2026-11-26: trl_grpo_cli 27 s, gspo_lora_comma and oxen_rust_grpo 24 s, lanta_slurm_lora and modal_grpo_trl 17 s),
# one a day beside the first. TRL_DOCTOR_ACCURACY_ALL=1 runs all of them; docs/accuracy.md records the whole set's
# last run.
ROTATIONS = (
    Rotation.of("slowest corpus cases", ("corpus/cookbook_grpo_lora", "corpus/fareedkhan_r1_grpo", "corpus/open_r1_grpo",
                                       "corpus/open_r1_target_h100", "corpus/verifiers_subclass",
                                       "corpus/vllm_server_mode"), "TRL_DOCTOR_ACCURACY_ALL"),
    Rotation.of("next slowest corpus cases", ("corpus/trl_grpo_cli", "corpus/gspo_lora_comma", "corpus/oxen_rust_grpo",
                                            "corpus/lanta_slurm_lora", "corpus/modal_grpo_trl"),
                "TRL_DOCTOR_ACCURACY_ALL"),
)
ROTATING = tuple(name for rotation in ROTATIONS for turn in rotation.turns for name in turn)


def rotation_today() -> tuple[str, ...]:
    """Today's case of each rotation."""
    return tuple(name for rotation in ROTATIONS for name in sorted(rotation.today()))


def out_of_rotation(name: str) -> str | None:
    """Why `name` is not run today (None: it runs)."""
    return next(filter(None, (rotation.why_not(name) for rotation in ROTATIONS)), None)


# the TRL releases of CI's lanes that run marker pinned_releases (.ci/run: trl017, trl024)
PINNED_LANES = ("0.17.0", "0.24.0")


def _param(case):
    """A case whose TRL requirement admits a pinned lane's release runs there (marker pinned_releases); every case also
    runs wherever else its releases are installed."""
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(str((case.requires or {}).get("trl", "")))
    pinned = any(spec.contains(release) for release in PINNED_LANES)
    return pytest.param(case, id=case.name, marks=[pytest.mark.pinned_releases] if pinned else [])


@pytest.mark.rotates  # ROTATIONS above
@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_the_doctor_agrees_with_trl(case, built_fixtures, request):
    why = (HARNESS.unmet(case.requires) or HARNESS.repo_missing(case) or HARNESS.import_missing(case)
           or out_of_rotation(case.name))
    if why:
        pytest.skip(f"not judged here: {why}")
    if case.name.startswith("corpus/"):
        request.getfixturevalue("corpus_models")
    outcome = HARNESS.judge(case)
    assert not outcome.rule_errors, outcome
    assert outcome.verdict in ("right", "miss"), (f"{outcome.verdict}: TRL {outcome.truth}; the doctor said "
                                                 f"{outcome.doctor}")


def test_the_rotation_names_cases_that_exist_and_runs_one_of_them(monkeypatch):
    names = {c.name for c in CASES}
    assert set(ROTATING) <= names, set(ROTATING) - names
    monkeypatch.delenv("TRL_DOCTOR_ACCURACY_ALL", raising=False)
    monkeypatch.delenv("TRL_DOCTOR_ROTATION_ALL", raising=False)
    assert sorted(n for n in ROTATING if out_of_rotation(n) is None) == sorted(rotation_today())
    assert len(rotation_today()) == len(ROTATIONS) and len(set(ROTATING)) == len(ROTATING)
    monkeypatch.setenv("TRL_DOCTOR_ACCURACY_ALL", "1")
    assert all(out_of_rotation(n) is None for n in ROTATING)


def test_a_case_whose_module_does_not_import_is_skipped_saying_why():
    """The VLM cases need `import torchvision` (their processor's video processor loads it): where it fails (no
    torchvision, or PyPI's CUDA build against a CPU torch), the case is skipped with the failing line, never judged."""
    vlm = [c for c in CASES if "-vlm-" in c.name]
    assert vlm and all("torchvision" in c.imports for c in vlm), [(c.name, c.imports) for c in vlm]
    missing = HARNESS.Case("probe", "", ["python", "-c", "pass"], ROOT, {}, imports=("trl_doctor_absent_module",))
    why = HARNESS.import_missing(missing)
    assert why and "import trl_doctor_absent_module" in why and "ModuleNotFoundError" in why, why
    present = HARNESS.Case("probe", "", ["python", "-c", "pass"], ROOT, {}, imports=("json",))
    assert HARNESS.import_missing(present) is None
