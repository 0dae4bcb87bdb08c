"""No false alarm: every healthy fixture (the `ok_*` case of every rule's folder) passes or skips every rule that
judges a setup statically, on the GPUs its folder's expected.yaml names for it, else on one A100 and on a machine
without a GPU (and, for distributed-setup, on four GPUs: more processes). One check per case and machine, with all
of those rules selected, instead of one sweep per rule: the sweeps cost a minute or more each.

Each rule's own broken and healthy cases are judged in every lane by tests/test_fixture_cases.py; this sweep runs
in the default lane (marker `sweep`). The smoke step has its own sweep (tests/test_smoke_step.py): it trains.
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES, result_of
from test_fixture_cases import case_fake_gpus, fake_nvml

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

STATIC = ("batch-geometry", "precision-and-attention", "vllm-weights", "distributed-setup", "eos-termination",
          "generation-settings", "version-skew")
ONE_A100 = FIXTURES / "precision-and-attention" / "gpus" / "a100-80g.json"
NO_GPU = FIXTURES / "precision-and-attention" / "gpus" / "no-driver.json"
FOUR_A100 = FIXTURES / "vllm-weights" / "gpus" / "4x-a100-80g.json"


def _cases(root):
    return [c for c in sorted(root.glob("*/ok_*")) if c.suffix in (".yaml", ".yml", ".json")]


def _machines(case):
    named = case_fake_gpus(case)
    if named:
        return [(named, STATIC)]
    return [(ONE_A100, STATIC), (NO_GPU, STATIC), (FOUR_A100, ("distributed-setup",))]


def _judge(case, report, rules):
    for slug in rules:
        r = result_of(report, slug)
        if slug == "version-skew":  # a healthy case of another rule may match a known issue of the installed TRL
            findings = [r["message"], *r["details"].get("also", [])] if r["status"] != "pass" else []
            assert not [f for f in findings if "liger" in f], (case, findings)
            continue
        assert r["status"] in ("pass", "skip"), (slug, case, r["message"])


# one test per rule folder, so that pytest-xdist spreads the sweep's ~140 checks over the cores (one test of them all
# took 100 s of CI's wall time on one core)
FOLDERS = sorted({c.parent.name for c in _cases(FIXTURES)})


@pytest.mark.sweep
@pytest.mark.parametrize("folder", FOLDERS)
def test_no_static_rule_raises_an_alarm_on_a_healthy_fixture(built_fixtures, folder):
    """In this process (the rule harness, trl_doctor.testing), NVML answering for each machine."""
    from trl_doctor.errors import InputError
    from trl_doctor.testing import judge_rules

    for case in _cases(built_fixtures):
        if case.parent.name != folder:
            continue
        for gpus, rules in _machines(case):
            with fake_nvml(gpus):
                try:
                    judged = judge_rules(case, rules, smoke=False)
                except InputError as exc:  # an input the whole check refuses (a config-only model): one line
                    assert str(exc) and "\n" not in str(exc) and "Traceback" not in str(exc), (case, str(exc))
                    continue
            _judge(case, {"results": [j.as_dict() for j in judged]}, rules)


def test_the_sweep_judges_every_healthy_case_on_its_machines():
    """The sweep's checks: every ok_ case of every folder, on each machine (more than a hundred in all; a watch
    rule's healthy log is refused by `check`, which the sweep holds to a clear one-line error)."""
    assert sum(len(_machines(c)) for c in _cases(FIXTURES)) > 100
    assert {c.parent.name for c in _cases(FIXTURES)} == set(FOLDERS)


def test_the_sweep_names_every_rule_it_claims():
    """The slugs above are real rules (a renamed rule would otherwise drop out of the sweep unnoticed)."""
    from trl_doctor.registry import all_rules

    slugs = {r.slug for r in all_rules()}
    assert set(STATIC) <= slugs, set(STATIC) - slugs
