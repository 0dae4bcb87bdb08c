"""The watch on the shapes real logs take (issue 61): levels from a baseline that cannot be 0, windowed shares where a
rule wanted N logs in a row, trl <= 0.16's lone `completion_length`, saturation told from failure, collapses flagged at
their onset, one log where every signal agrees, and noise lines that hold a dict. Each log is written as the job
writes it (transformers' printed dicts, or a trainer_state.json); the rules run in this process (run_doctor)."""

from __future__ import annotations

import math

import pytest

from test_watch import printed, state_file, watch_json

pytestmark = pytest.mark.release_free


def row(**values) -> dict:
    base = {"loss": 0.01, "grad_norm": 0.4, "learning_rate": 1e-6, "reward": 0.5, "reward_std": 0.3,
            "frac_reward_zero_std": 0.2, "completions/mean_length": 120.0, "completions/clipped_ratio": 0.05,
            "kl": 0.01, "entropy": 0.6, "epoch": 0.1}
    return {**base, **values}


def test_a_gradient_that_is_mostly_zero_gives_no_spikes(tmp_path):
    """Most logged grad_norm 0 (steps that trained on tied groups: no gradient without a KL term), the rest ordinary:
    a median of 0 made every ordinary step a spike ("spiked 11 times: 0.4071 at log 7 (median 0)")."""
    rows = [row(grad_norm=0.0, frac_reward_zero_std=0.9) if i % 4 else row(grad_norm=0.35 + 0.01 * (i % 5))
            for i in range(60)]
    _, results, _ = watch_json(str(state_file(tmp_path, rows)))
    assert results["grad-spike"]["status"] in ("pass", "skip"), results["grad-spike"]
    rows[40] = row(grad_norm=12.0)  # real spikes over the non-zero norms' level are still found
    rows[44], rows[48] = row(grad_norm=9.0), row(grad_norm=15.0)
    _, results, _ = watch_json(str(state_file(tmp_path, rows)))
    assert results["grad-spike"]["status"] == "warn", results["grad-spike"]
    assert "spiked 3 times" in results["grad-spike"]["message"]


def test_clipping_that_dips_below_the_streak_level_is_still_found_in_a_printed_log(tmp_path):
    """A printed log of 40 lines (no steps, no --config: 40 steps), clipped_ratio 0.9-1.0 at every log of its last
    quarter with reward 0: no five logs in a row reach 0.99 and the 100-step window never fills; the last quarter's
    share is the evidence."""
    rows = [row(reward=0.2) for _ in range(30)]
    rows += [row(reward=0.0, **{"completions/clipped_ratio": 0.9 + 0.1 * (i % 3 == 2)}) for i in range(10)]
    (tmp_path / "train.log").write_text(printed(rows))
    _, results, _ = watch_json(str(tmp_path / "train.log"))
    found = results["never-terminating"]
    assert found["status"] == "warn", found
    assert "nearly every completion ran to the length limit" in found["message"]
    assert found["details"]["since_log"] >= 30


def test_trl_0_16_s_completion_length_pinned_at_its_limit_is_evidence_itself(tmp_path):
    """trl <= 0.16 logs only `completion_length`: a mean of exactly 128 at 99 of 100 logs needs no recipe to say
    every completion was cut at 128."""
    rows = [{"loss": 0.0, "grad_norm": 0.1, "learning_rate": 1e-6, "rewards/format_reward": 0.0, "reward": 0.0,
             "reward_std": 0.0, "completion_length": 128.0 if i != 3 else 127.25, "kl": 0.001, "epoch": i / 100}
            for i in range(100)]
    (tmp_path / "train.log").write_text(printed(rows))
    _, results, _ = watch_json(str(tmp_path / "train.log"))
    found = results["never-terminating"]
    assert found["status"] == "fail", found
    assert "every completion 128 tokens long" in found["message"] and "the limit every completion was cut at" in \
        found["message"]
    healthy = [dict(r, completion_length=90.0 + 7.3 * math.sin(i)) for i, r in enumerate(rows)]
    (tmp_path / "train.log").write_text(printed(healthy))
    _, results, _ = watch_json(str(tmp_path / "train.log"))
    assert results["never-terminating"]["status"] == "skip" and "--config" in results["never-terminating"]["message"]


def test_ties_with_a_few_groups_keeping_a_spread_and_shrinking_completions(tmp_path):
    """frac_reward_zero_std 0.8-1.0 for the rest of a run while the reward stays at 0-0.2 and the completions shrink
    to about 3 tokens: the run ends on a short pending streak, which must not hide the windowed evidence."""
    rows = [row(reward=0.3, **{"completions/mean_length": 150.0}) for _ in range(20)]
    for i in range(30):
        share = [0.8, 0.9, 1.0, 0.85, 1.0, 0.95][i % 6]
        rows.append(row(reward=0.1 * (i % 3 == 0), frac_reward_zero_std=share,
                        **{"completions/mean_length": max(3.0, 150.0 * 0.7 ** i)}))
    rows[-2]["frac_reward_zero_std"] = rows[-1]["frac_reward_zero_std"] = 1.0  # a pending streak at the end
    _, results, _ = watch_json(str(state_file(tmp_path, rows)))
    zero = results["zero-advantage"]
    assert zero["status"] == "warn" and "most of each batch taught nothing" in zero["message"], zero
    length = results["length-collapse"]
    assert length["status"] == "warn" and "fell from 150 to" in length["message"], length
    assert length["details"]["began"] == "step 23", length  # below half its start from the third shrinking log


def test_saturation_is_told_apart_from_failure(tmp_path):
    """Groups that tie because every completion is right (the reward risen to its best, two generations a prompt)
    are a saturation, a warn that names it; groups that tie at the bottom are a failure."""
    rising = [row(reward=0.2 + 0.02 * i, frac_reward_zero_std=0.3) for i in range(30)]
    top = [row(reward=0.98, reward_std=0.0, frac_reward_zero_std=1.0) for _ in range(10)]
    code, results, _ = watch_json(str(state_file(tmp_path, rising + top)))
    zero = results["zero-advantage"]
    assert zero["status"] == "warn" and "saturated" in zero["message"] and "too easy" in zero["message"], zero
    assert code == 0
    bottom = [row(reward=0.0, reward_std=0.0, frac_reward_zero_std=1.0) for _ in range(10)]
    code, results, _ = watch_json(str(state_file(tmp_path, rising + bottom)))
    zero = results["zero-advantage"]
    assert zero["status"] == "fail" and "run's lowest reward" in zero["message"], zero
    # at the top from the first log (a format reward every completion earns, the task reward 0 behind it): the log
    # cannot tell a saturation, and the tie is judged a failure
    flat = [row(reward=0.5, reward_std=0.0, frac_reward_zero_std=1.0) if i % 5 else row(reward=0.36) for i in range(40)]
    _, results, _ = watch_json(str(state_file(tmp_path, flat)))
    assert results["zero-advantage"]["status"] == "fail", results["zero-advantage"]
    # identical completions (the entropy collapsed) tie every group whatever the reward: no saturation
    collapsed = rising + [dict(r, entropy=0.001) for r in top]
    _, results, _ = watch_json(str(state_file(tmp_path, collapsed)))
    assert "saturated" not in results["zero-advantage"]["message"], results["zero-advantage"]


def test_an_entropy_collapse_is_flagged_near_its_onset(tmp_path):
    """Entropy falling from step 20 (0.6, halved at each log to 0.08), below 0.05 only at step 210: flagged once it
    stays below a tenth of its start, naming where the fall began."""
    rows = [row(entropy=0.6) for _ in range(19)]
    rows += [row(entropy=max(0.08, 0.6 * 0.5 ** i)) for i in range(1, 190)]
    rows += [row(entropy=0.04) for _ in range(20)]
    _, results, _ = watch_json(str(state_file(tmp_path, rows)))
    found = results["entropy-collapse"]
    assert found["status"] == "warn", found
    assert found["details"]["since_log"] <= 30 and found["details"]["began"] == "step 21", found


def test_a_dict_in_a_printed_warning_is_not_a_log(tmp_path):
    """`Updated tokens: {...}` printed between the logs is the tokenizer's, not a log: the logs keep their numbers."""
    rows = [row(frac_reward_zero_std=1.0, reward_std=0.0, reward=0.0, grad_norm=0.1) for _ in range(8)]
    text = printed(rows[:3]) + "Updated tokens: {'<think>': 151665, '</think>': 151666}\n" + printed(rows[3:])
    (tmp_path / "train.log").write_text(text)
    from trl_doctor.watch.history import read

    assert len(read(tmp_path / "train.log").logs) == 8
    _, results, _ = watch_json(str(tmp_path / "train.log"))
    assert results["zero-advantage"]["details"]["since"] == "log 1"
    assert results["zero-advantage"]["details"]["until_log"] == 8, results["zero-advantage"]


def test_ties_as_common_as_chance_makes_them_are_not_a_failure(tmp_path):
    """One prompt group a step (Unsloth's notebooks: 8 completions of one prompt; or 2 generations a prompt): a tie
    is common by chance (31% of steps in unslothai/notebooks' Qwen2.5-3B GRPO run, a 5-of-6 stretch among them). The
    run's own rate before a stretch says how long a stretch chance makes; a failure that lasts outruns it."""
    pattern = [0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0]  # ties (1) in 4 of 13 logs
    ties = [pattern[i % len(pattern)] for i in range(120)]
    ties[60:66] = [1, 1, 1, 1, 0, 1]  # a 5-of-6 stretch, as chance makes one in a long run
    rows = [row(reward_std=0.0 if t else 0.3, frac_reward_zero_std=1.0 if t else 0.0) for t in ties]
    _, results, _ = watch_json(str(state_file(tmp_path, rows)))
    zero = results["zero-advantage"]
    assert zero["status"] == "pass" and "by chance" in zero["message"], zero
    failing = rows[:100] + [row(reward=0.0, reward_std=0.0, frac_reward_zero_std=1.0) for _ in range(12)]
    _, results, _ = watch_json(str(state_file(tmp_path, failing)))
    zero = results["zero-advantage"]
    assert zero["status"] == "fail" and zero["details"]["since"] == "step 100", zero  # step 100 tied too
