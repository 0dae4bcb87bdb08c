"""trainer-config does not repeat batch-geometry: TRL's batch check (at the one process of the check) is left to
batch-geometry, which judges it at the launch's process count and offers the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import result_of, run_json

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def test_batch_error_is_batch_geometrys_not_repeated(built_fixtures, tmp_path):
    config = tmp_path / "batch.yaml"
    config.write_text(f"model_name_or_path: {FIX / 'models' / 'qwen2-chat'}\ndataset_path: {FIX / 'data' / 'chat.jsonl'}\n"
                      "reward_funcs: [rewards.length_reward]\nnum_generations: 2\nper_device_train_batch_size: 3\n")
    shutil.copy(FIX / "trainer-config" / "rewards.py", tmp_path)
    code, report = run_json("check", str(config), "--no-smoke", "--select", "trainer-config,batch-geometry",
                            "--num-processes", "1")
    config_result, geometry = result_of(report, "trainer-config"), result_of(report, "batch-geometry")
    assert geometry["status"] == "fail" and "num_generations" in geometry["message"]
    assert config_result["status"] == "pass"
    # where the installed TRL's config checks the batch, trainer-config says it left that to batch-geometry
    if "batch arithmetic" in config_result["details"]:
        assert config_result["details"]["batch arithmetic"].startswith("left to batch-geometry")
