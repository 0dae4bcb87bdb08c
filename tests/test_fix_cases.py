"""Every broken fixture that offers a safe fix: --fix, then the re-check passes for that rule, and the real
trainer step (smoke-step) runs on the fixed artifacts where the trainer has one."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, result_of, run_json
from trl_doctor._registry import builtin_rules

SLUGS = {r.slug: r for r in builtin_rules() if r.has_fix}
CASES = [pytest.param(folder.name, case.name, id=f"{folder.name}/{case.name}")
         for folder in sorted(FIXTURES.iterdir()) if folder.name in SLUGS
         for case in sorted(folder.glob("bad_*")) if case.suffix in (".yaml", ".json")]


@pytest.mark.parametrize("slug, case", CASES)
def test_fix_then_recheck_and_smoke(fixture_copy, slug, case):
    config = str(fixture_copy / slug / case)
    code, report = run_json("check", config, "--select", slug, "--no-smoke")
    before = result_of(report, slug)
    if before["fix"] is None or before["fix"]["unsafe"]:
        pytest.skip(f"{case}: no safe fix offered ({before['status']}: {before['message'][:120]})")
    # every safe fix, not only this rule's: the smoke step needs the whole setup healthy (a Llama 3 checkpoint
    # with the eot fix still lacks a pad token, which crashes the step on a TRL that does not pad by itself)
    code, report = run_json("check", config, "--fix")
    after = result_of(report, slug)
    assert after["fix"] and after["fix"]["applied"], after
    if slug == "value-model" and "has no PPOTrainer" in after["message"]:
        # the only thing left is the installed TRL itself (no PPO since trl 1.13): the fix did its part
        assert "also" not in after["details"], after
    else:
        assert after["status"] == "pass", after
    smoke = result_of(report, "smoke-step")
    if report["trainer"] in ("grpo", "rloo"):
        assert smoke["status"] == "pass", smoke
    # a second --fix finds nothing left to change
    _, again = run_json("check", config, "--select", slug, "--no-smoke", "--fix")
    assert again["applied"] == []
