"""The accuracy harness in CI (issue 30): each case of tools/accuracy/cases.yaml and of the corpus whose releases this
lane has runs for one real step on the CPU (the ground truth) and through `trl-doctor check -- COMMAND`; a false alarm,
a wrong cause or a rule `error` fails the test. A miss is allowed (docs/accuracy.md lists each with why) but said.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import accuracy_harness

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.trl_pair]


HARNESS = accuracy_harness()
OUT = Path(tempfile.mkdtemp(prefix="trl-doctor-accuracy-"))
atexit.register(shutil.rmtree, OUT, ignore_errors=True)  # made at collection, by every xdist worker: gone with it
CASES = HARNESS.load_cases(OUT)

# Every case runs on every submission. TRL's own one-step run of the slowest took 1 to 6 minutes on two cores
# (cookbook_grpo_lora's 16 accumulated micro-batches: 367 s, where the doctor's check of it took 32 s); it is TRL's
# behaviour, the same for the same inputs and releases, so the harness reads it from tools/accuracy/truths.json where
# the case's key matches (tools/accuracy/record.py: its files, its entry, the releases installed) and runs TRL again
# wherever anything of it changed. The doctor's side runs every time. TRL_DOCTOR_ACCURACY_LIVE=1 runs every truth.


# the TRL releases of CI's lanes that run marker pinned_releases (.ci/run: trl017, trl024)
PINNED_LANES = ("0.17.0", "0.24.0")


def _param(case):
    """A case whose TRL requirement admits a pinned lane's release runs there (marker pinned_releases); every case also
    runs wherever else its releases are installed."""
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(str((case.requires or {}).get("trl", "")))
    pinned = any(spec.contains(release) for release in PINNED_LANES)
    return pytest.param(case, id=case.name, marks=[pytest.mark.pinned_releases] if pinned else [])


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_the_doctor_agrees_with_trl(case, built_fixtures, request):
    why = HARNESS.unmet(case.requires) or HARNESS.repo_missing(case) or HARNESS.import_missing(case)
    if why:
        pytest.skip(f"not judged here: {why}")
    if case.name.startswith("corpus/"):
        request.getfixturevalue("corpus_models")
    outcome = HARNESS.judge(case)
    assert not outcome.rule_errors, outcome
    assert outcome.verdict in ("right", "miss"), (f"{outcome.verdict}: TRL {outcome.truth}; the doctor said "
                                                 f"{outcome.doctor}")


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


def test_a_one_process_launch_keeps_its_batch_check_as_ground_truth(tmp_path):
    """The ground truth runs one process; a batch check it fails is the launch's own only where the launch also runs
    one (corpus/x_r1_lora_trl015: `--num_processes=1`): read as the doctor reads the command (the launcher's own
    parser, its accelerate config file), unknown (None) where neither says or the launch spans machines."""
    (tmp_path / "one.yaml").write_text("num_machines: 1\nnum_processes: 1\n")
    (tmp_path / "eight.yaml").write_text("num_processes: 8\n")
    (tmp_path / "nodes.yaml").write_text("num_machines: 2\nnum_processes: 1\n")
    for script in ("train.py", "t.py"):  # the launchers' parsers read a command whose script is there
        (tmp_path / script).write_text("")

    def processes(*command):
        return HARNESS.launch_processes(HARNESS.Case("probe", "", list(command), tmp_path, {}))

    assert processes("accelerate", "launch", "--num_processes=1", "train.py") == 1
    assert processes("accelerate", "launch", "--num_processes", "3", "train.py") == 3
    assert processes("accelerate", "launch", "--config_file", "one.yaml", "train.py") == 1
    assert processes("accelerate", "launch", "--config_file", "eight.yaml", "--num_processes", "1", "t.py") == 1
    assert processes("accelerate", "launch", "--config_file", "eight.yaml", "train.py") == 8
    assert processes("accelerate", "launch", "--config_file", "nodes.yaml", "train.py") is None
    assert processes("accelerate", "launch", "train.py") is None
    assert processes("torchrun", "--nproc_per_node", "1", "train.py") == 1
    assert processes("torchrun", "--nnodes", "2", "--nproc_per_node", "1", "train.py") is None
    assert processes("python", "train.py") is None
    case = HARNESS.corpus_case(ROOT / "corpus" / "x_r1_lora_trl015")
    assert HARNESS.launch_processes(case) == 1
