"""A relaxation is the doctor's, not the script's, also when the script copies the relaxed config into TRL's:
GRPOConfig(**training_args.to_dict()) on a GPU-less machine gets the use_cpu=True trl-doctor set on the
TrainingArguments, and gpu-capacity must still judge the --target GPUs instead of "the job trains on the CPU"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import result_of, run_doctor

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"


def test_use_cpu_carried_by_to_dict_stays_relaxed():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is here: nothing is relaxed")
    proc = run_doctor("check", "--no-smoke", "--target", "1xH100-80GB", "--select", "gpu-capacity",
                      "--format", "json", "--", "python", "grpo_config_from_training_args.py", cwd=LAUNCH)
    assert proc.stdout, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    gpu = result_of(report, "gpu-capacity")
    assert "use_cpu" not in gpu["message"] and gpu["status"] in ("pass", "warn", "fail"), gpu["message"]
    assert "use_cpu" in report["launch"]["relaxed"], report["launch"]
