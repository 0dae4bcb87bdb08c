"""TD003 on the installed versions: the Qwen2 fixture through the installed TRL's own log-prob method.
In the legacy lane (trl 0.15.2 + transformers 4.48.3) it must reproduce trl#2770; elsewhere it passes."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.version import Version

from conftest import result_of, run_json

pytestmark = pytest.mark.slow  # the probe builds the installed trainer

LEGACY = Version(version("transformers")) < Version("4.49")


def test_qwen2_logits_contract(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "logits-contract" / "bad_qwen2_transformers_448.yaml"),
                            "--select", "logits-contract", "--no-smoke")
    r = result_of(report, "logits-contract")
    d = r["details"]
    assert d["model forward"] == "Qwen2ForCausalLM.forward"
    assert d["versions"] == f"trl {version('trl')}, transformers {version('transformers')}"
    if LEGACY:
        assert code == 1 and r["status"] == "fail"
        assert "asked for logits of the last 5 positions but got all 10" in r["message"]
        assert "has no logits_to_keep parameter and swallowed it in **kwargs" in r["message"]
        assert "logits_to_keep" in d["keywords passed"] and "num_logits_to_keep" in d["forward declares"]
        assert d["logits positions produced"] == [10, 10]
        # batch 8 x (longest prompt + 512) against batch 8 x 513: the waste is (prompt+completion)/(completion+1)
        assert d["config sizes"].startswith("batch 8 x (prompt ")
        assert float(d["waste factor"].rstrip("x")) > 1.0
    else:
        assert code == 0 and r["status"] == "pass", r
        assert d["log-probs shape"] == [2, 4]
        positions = d["logits positions produced"]
        assert isinstance(positions, str) or max(positions) <= 5
