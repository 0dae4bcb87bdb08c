"""Every broken fixture that offers a safe fix: --fix, then the re-check passes for that rule, and the real
trainer step (smoke-step) runs on the fixed artifacts where the trainer has one."""

from __future__ import annotations

import pytest
import yaml

from conftest import FIXTURES, result_of, run_json
from test_fixture_cases import case_fake_gpus, fake_gpu_env
from trl_doctor.registry import builtin_rules

pytestmark = pytest.mark.slow  # the re-check after --fix runs the smoke step

SLUGS = {r.slug: r for r in builtin_rules() if r.has_fix}
# Rules whose fix is static (a config or tokenizer edit that no TRL release judges differently): their re-checks
# run in the default lane only; the other fixes are re-checked with the real step in every lane.
STATIC_FIXES = ("batch-geometry", "context-length", "generation-settings", "precision-and-attention", "vllm-tokenizer-drift")
CASES = [pytest.param(folder.name, case.name, id=f"{folder.name}/{case.name}",
                      marks=[pytest.mark.release_free] if folder.name in STATIC_FIXES else [])
         for folder in sorted(FIXTURES.iterdir()) if folder.name in SLUGS
         for case in sorted(folder.glob("bad_*")) if case.suffix in (".yaml", ".json")]


def _case_env(fixture_copy, slug: str, case: str) -> dict:
    """The case's fake GPUs (expected.yaml's `fake_gpus`), so that fixes judged against a GPU are re-checked on it."""
    gpus = case_fake_gpus(fixture_copy / slug / case)
    return {"env": fake_gpu_env(gpus)} if gpus else {}


def _runnable(config: str) -> bool:
    """Whether the config's model folder has weights and a tokenizer: the real-sized configs written as
    config.json alone (memory arithmetic) are checked by their own rule, not trained."""
    raw = yaml.safe_load(open(config))
    from pathlib import Path

    model = Path(config).parent / raw["model_name_or_path"]
    tokenizer = Path(config).parent / raw.get("tokenizer_name_or_path", raw["model_name_or_path"])
    return any(model.glob("*.safetensors")) and (tokenizer / "tokenizer_config.json").is_file()


@pytest.mark.parametrize("slug, case", CASES)
def test_fix_then_recheck_and_smoke(fixture_copy, slug, case):
    config = str(fixture_copy / slug / case)
    kw = _case_env(fixture_copy, slug, case)
    code, report = run_json("check", config, "--select", slug, "--no-smoke", **kw)
    before = result_of(report, slug)
    if before["fix"] is None or before["fix"]["applicability"] != "safe":
        pytest.skip(f"{case}: no safe fix offered ({before['status']}: {before['message'][:120]})")
    runnable = _runnable(config)
    # every safe fix, not only this rule's: the smoke step needs the whole setup healthy (a Llama 3 checkpoint
    # with the eot fix still lacks a pad token, which crashes the step on a TRL that does not pad by itself)
    code, report = run_json("check", config, "--fix", *(() if runnable else ("--select", slug, "--no-smoke")), **kw)
    after = result_of(report, slug)
    assert after["fix"] and after["fix"]["applied"], after
    if slug == "value-model" and "has no PPOTrainer" in after["message"]:
        # the only thing left is the installed TRL itself (no PPO since trl 1.13): the fix did its part
        assert "also" not in after["details"], after
    else:
        assert after["status"] == "pass", after
    if runnable and report["trainer"] in ("grpo", "rloo"):
        smoke = result_of(report, "smoke-step")
        assert smoke["status"] == "pass", smoke
    # a second --fix finds nothing left to change
    _, again = run_json("check", config, "--select", slug, "--no-smoke", "--fix", **kw)
    assert again["applied"] == []
