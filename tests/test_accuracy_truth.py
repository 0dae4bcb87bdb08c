"""The accuracy harness's ground truth (tools/accuracy/truth.py) changes only what a CPU needs: a script that moves its
model to CUDA by hand (a one-GPU notebook: `.to("cuda")`, `.cuda()`) keeps it on the CPU, with the dtype the same
call asks, and says so; without it such a script stops at "Torch not compiled with CUDA enabled" before TRL is
reached, and the harness would score the launch machine instead of the recipe (corpus/oxen_rust_grpo)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TRUTH = Path(__file__).resolve().parent.parent / "tools" / "accuracy" / "truth.py"


@pytest.mark.slow  # seconds long (a trainer run or a process of its own): CI's long selection
def test_a_model_moved_to_cuda_by_hand_stays_on_the_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is here: the ground truth moves nothing")
    script = tmp_path / "moves.py"
    script.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Linear(2, 2).to("cuda", dtype=torch.float64)
        assert model.weight.device.type == "cpu" and model.weight.dtype == torch.float64
        model = model.cuda().to(torch.device("cuda:0"))
        assert model.weight.device.type == "cpu"
        assert model.to("cpu", torch.float32).weight.dtype == torch.float32  # other moves are untouched
    """))
    proc = subprocess.run([sys.executable, str(TRUTH), "--", "python", str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "truth: changed device='cuda' -> 'cpu' (Linear.to: no CUDA)" in proc.stderr
    assert "truth: changed device='cuda' -> 'cpu' (Linear.cuda: no CUDA)" in proc.stderr


@pytest.mark.slow  # seconds long (a trainer run or a process of its own): CI's long selection
def test_a_recipe_key_the_scripts_trlparser_drops_is_shown(tmp_path):
    """trl before 0.19 drops a `--config` key no dataclass of the parser has, and the job trains without it: the
    ground truth says so (`truth: wrong:`), so a doctor that stays silent on it is a miss. From 0.19 the parser stops
    on it, an error the run shows itself."""
    (tmp_path / "parse.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass
        from trl import TrlParser

        @dataclass
        class Args:
            learning_rate: float = 1e-6

        (args,) = TrlParser((Args,)).parse_args_and_config()
        print("parsed", args.learning_rate)
    """))
    (tmp_path / "recipe.yaml").write_text("learning_rate: 2.0e-6\nshuffle_dataset: false\nenv:\n  SOME_FLAG: '1'\n")
    proc = subprocess.run([sys.executable, str(TRUTH), "--", "python", "parse.py", "--config", "recipe.yaml"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    if "Unknown arguments from config file" in proc.stderr:  # trl >= 0.19 stops instead of dropping
        assert proc.returncode == 1 and "truth: wrong:" not in proc.stderr, proc.stderr[-2000:]
        return
    assert proc.returncode == 0 and "parsed 2e-06" in proc.stdout, proc.stderr[-2000:]
    wrong = [line for line in proc.stderr.splitlines() if line.startswith("truth: wrong:")]
    assert wrong == ["truth: wrong: recipe key 'shuffle_dataset' is dropped by the script's TrlParser "
                     "(no field of Args)"], proc.stderr[-2000:]
