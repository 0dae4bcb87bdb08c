"""A reward function may return a lazy iterable (a generator, `map`, `itertools.starmap`, Modal's
`Function.starmap`): TRL >= 0.16 builds its reward tensor from `[r if r is not None else nan for r in output]`, so
it trains (corpus/modal_grpo_trl). The smoke step's recording wrapper used to flag it ("returned a starmap, not a
list") where TRL took the step. Real TRL, the tiny fixture model, the doctor run as a user runs it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from conftest import result_of, run_doctor

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"


def _installed_call():
    from trl_doctor.facts.rewards import reward_call

    call = reward_call("grpo")
    if call is None or not call.none_allowed:
        pytest.skip("this TRL hands the reward function's value to torch.tensor as it is (trl < 0.16)")
    return call


def test_a_lazy_iterable_is_read_as_the_installed_trl_reads_it():
    from trl_doctor.facts.rewards import as_trl_reads, new_stats, record_values

    call = _installed_call()
    lazy = itertools.starmap(float, [("1",), ("0.5",)])
    values = as_trl_reads(lazy, call)
    assert values == [1.0, 0.5]
    stats = new_stats()
    assert record_values(stats, values, 2) == [1.0, 0.5] and "wrong_type" not in stats
    # a plain string or dict is no list of scores whatever TRL does with it
    assert as_trl_reads("0.5", call) == "0.5"
    stats = new_stats()
    assert record_values(stats, as_trl_reads({"a": 1}, call), 1) is None and stats["wrong_type"] == "dict"


def test_the_smoke_step_trains_with_a_lazy_reward_as_trl_does():
    _installed_call()
    proc = run_doctor("check", "--select", "smoke-step,reward-functions", "--format", "json", "--",
                      "python", "grpo_lazy_reward.py", cwd=LAUNCH)
    assert proc.stdout, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    smoke, rewards = result_of(report, "smoke-step"), result_of(report, "reward-functions")
    assert proc.returncode == 0, (smoke["message"], rewards["message"])
    assert smoke["status"] == "pass" and "not a list" not in smoke["message"], smoke["message"]
    recorded = smoke["details"]["reward __main__.reward_len"]
    assert "completions" in recorded and "no numeric scores" not in recorded, recorded
    assert rewards["status"] == "pass", rewards["message"]
