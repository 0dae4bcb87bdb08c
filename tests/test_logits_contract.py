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
    if LEGACY:  # costs memory but trains: a warn where no launch GPU says it overflows
        assert code == 0 and r["status"] == "warn", r
        assert "asked for logits of the last 5 positions but got all 10" in r["message"]
        assert "the job still trains, and no launch GPU is known here to say whether it fits" in r["message"]
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


@pytest.mark.skipif(not LEGACY, reason="the installed transformers honours logits_to_keep (trl#2770 is fixed there)")
def test_whole_sequence_logits_warn_where_the_launch_gpu_holds_them(built_fixtures):
    """Judged against a launch machine (--target) where the estimate, whole-sequence logits included, fits: a warn
    that says so (issue 30, class 10); the GPU that cannot hold it is the fixture case bad_qwen2_448_gpu_full."""
    code, report = run_json("check", str(built_fixtures / "logits-contract" / "bad_qwen2_transformers_448.yaml"),
                            "--select", "logits-contract", "--no-smoke", "--target", "1xA100-80GB")
    r = result_of(report, "logits-contract")
    assert code == 0 and r["status"] == "warn", r
    assert "the job still trains: with them the estimate fits: needs ~" in r["message"], r["message"]
    assert r["details"]["does the job fit"].startswith("the job still trains: with them the estimate fits"), r["details"]


# -- remote code (docs/coverage.md A4) -------------------------------------------------------------------------------
# fixtures/_build_family.py: remote-swallow (forward drops logits_to_keep in **kwargs), remote-nohead (LM head called
# `output`, no get_output_embeddings()). Both are model_type tinyremote, which transformers does not ship.

def _fused_lm_head() -> bool:
    """Whether the installed TRL's GRPO computes log-probs through a fused LM head (it then never asks the model's
    forward for logits, and projects through get_output_embeddings() itself)."""
    import inspect

    from trl import GRPOTrainer

    return "fused_lm_head=True" in inspect.getsource(GRPOTrainer)


def _check(config, *flags, modules):
    """The check in a fresh process with its own dynamic-module cache, where the model's code lands if it runs."""
    code, report = run_json("check", str(config), "--select", "logits-contract", "--no-smoke", *flags,
                            env={"HF_MODULES_CACHE": str(modules)})
    return code, result_of(report, "logits-contract")


def _code_ran(modules) -> bool:
    return any("tinyremote" in p.name for p in modules.rglob("*"))


def test_remote_code_the_trainer_config_does_not_trust(built_fixtures, tmp_path):
    config = built_fixtures / "logits-contract" / "bad_remote_code_untrusted.yaml"
    code, r = _check(config, modules=tmp_path / "m")
    assert code == 1 and r["status"] == "fail", r
    assert ("config.json declares its own code (auto_map: modeling_tinyremote.TinyRemoteForCausalLM) for model_type "
            f"'tinyremote', which transformers {version('transformers')} does not ship, and the trainer config does "
            "not set trust_remote_code") in r["message"]
    assert "set `model_init_kwargs: {trust_remote_code: true}`" in r["message"]
    assert r["fix"]["applicability"] == "manual" and "modeling_tinyremote.py" in r["fix"]["description"]
    # without the doctor's flag the probe is skipped, and said so beside the finding; no code from the folder ran
    assert any("runs it only with trl-doctor's --trust-remote-code" in a for a in r["details"]["also"]), r
    assert not _code_ran(tmp_path / "m")
    # either key the launch reads makes it loadable: model_init_kwargs.trust_remote_code, or the top-level one
    for key in ("model_init_kwargs: {trust_remote_code: true}", "trust_remote_code: true"):
        trusted = tmp_path / "trusted.yaml"
        trusted.write_text(config.read_text().replace("../models/remote-swallow",
                                                      str(built_fixtures / "models" / "remote-swallow"))
                           .replace("../data/", str(built_fixtures / "data") + "/") + key + "\n")
        (tmp_path / "rewards.py").write_text((config.parent / "rewards.py").read_text())
        code, r = _check(trusted, modules=tmp_path / "m")
        assert r["status"] == "skip" and "--trust-remote-code" in r["message"], (key, r)
        assert r["details"]["trust_remote_code in the trainer config"] in ("model_init_kwargs.trust_remote_code",
                                                                           "trust_remote_code")
    assert not _code_ran(tmp_path / "m")


def test_remote_forward_that_swallows_logits_to_keep(built_fixtures, tmp_path):
    config = built_fixtures / "logits-contract" / "bad_remote_forward_swallows.yaml"
    code, r = _check(config, modules=tmp_path / "m")
    assert code == 0 and r["status"] == "skip" and "--trust-remote-code" in r["message"], r
    code, r = _check(config, "--trust-remote-code", modules=tmp_path / "m")
    d = r["details"]
    assert d["model forward"] == "TinyRemoteForCausalLM.forward"
    assert "logits_to_keep" not in d["forward declares"] and d["forward takes **kwargs"] is True
    if _fused_lm_head():  # the trainer never asks the forward for logits: harmless, and the pass says what it lacks
        assert code == 0 and r["status"] == "pass", r
        assert r["message"].endswith("its forward declares no logits_to_keep (it would swallow it in **kwargs), which "
                                     "this trainer does not ask the forward for"), r["message"]
    else:  # the trainer passes logits_to_keep and gets every position back: memory, not a crash (a warn here)
        assert code == 0 and r["status"] == "warn", r
        assert "has no logits_to_keep parameter and swallowed it in **kwargs" in r["message"]
        assert "The model's own code (configuration_tinyremote.py, modeling_tinyremote.py) must pass logits_to_keep on" \
            in r["message"]


def test_remote_model_without_output_embeddings(built_fixtures, tmp_path):
    config = built_fixtures / "logits-contract" / "bad_remote_no_output_embeddings.yaml"
    code, r = _check(config, "--trust-remote-code", modules=tmp_path / "m")
    d = r["details"]
    if _fused_lm_head():  # found by the probe after the trainer was built, and named as what the model lacks
        assert code == 1 and r["status"] == "fail", r
        assert r["message"].startswith("TinyRemoteForCausalLM.get_output_embeddings() returns None, and "
                                       "GRPOTrainer._get_per_token_logps"), r["message"]
        assert "'NoneType' object has no attribute 'weight'" in r["message"]
        assert "must define get_output_embeddings() returning its LM head" in r["message"]
        assert d["output embeddings"].startswith("None")
        assert "could not be built" not in r["message"]
    else:  # the trainer reads the logits the forward returns: the head's name does not matter
        assert code == 0 and r["status"] == "pass", r
        assert "logits_to_keep" in d["forward declares"]
