"""CI's 45 minutes (.ci/run): the tests that take longest run in turns, one turn a day.

A rotation is a pure function of the date: its members are split into turns, and day N (the date's ordinal) runs
turn N mod the number of turns, so every member runs within that many days and every machine agrees on which. A
member outside today's turn is skipped saying so; a test named by its node id on the command line, the rotation's
own variable (TRL_DOCTOR_ACCURACY_ALL, ...) or TRL_DOCTOR_ROTATION_ALL=1 runs every turn.

The rotations: the accuracy harness's slowest corpus cases (tests/test_accuracy.py), the fuzz suite's halves
(tests/test_fuzz.py), the watch's runs at TRL's defaults (tests/test_watch_defaults.py), the frameworks' own one-step
runs (tests/test_frameworks.py), the release lanes' halves (lane_halves below: pytest --half-a-day), and HEAVY below: every other test measured at 8 s or more in a lane of .ci/run,
listed by node id, in three turns balanced by their measured seconds (tests/conftest.py skips those outside today's
turn; tests/test_rotation.py holds the list to tests that exist). Left out of HEAVY on purpose: the safety tests (the
fenced worker, remote code, the network, --fix's writes, bad input), the network audit of every lane (issue 42) and
the corpus's own verdicts (tests/test_corpus.py, the doctor's word on each real recipe: every run)."""

from __future__ import annotations

import datetime
import os
import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Mapping

ALL = "TRL_DOCTOR_ROTATION_ALL"


def _on(variable: str) -> bool:
    return os.environ.get(variable, "") not in ("", "0")


def day() -> int:
    return datetime.date.today().toordinal()


@dataclass(frozen=True)
class Rotation:
    what: str  # what the members are, for the skip's words: "slowest corpus cases"
    turns: tuple[frozenset[str], ...]
    variable: str  # runs every turn of this rotation (as ALL does for all of them)

    @classmethod
    def of(cls, what: str, turns: Iterable[Iterable[str] | str], variable: str) -> "Rotation":
        """Turns given as names (one member a turn) or as collections of names."""
        return cls(what, tuple(frozenset([t] if isinstance(t, str) else t) for t in turns), variable)

    @classmethod
    def by_hash(cls, what: str, names: Iterable[str], turns: int, variable: str) -> "Rotation":
        """`turns` turns split by crc32 of each name: the same split on every machine, whatever else is listed."""
        names = list(names)
        return cls.of(what, [[n for n in names if zlib.crc32(n.encode()) % turns == k] for k in range(turns)],
                      variable)

    @cached_property  # asked once per collected test by conftest
    def members(self) -> frozenset[str]:
        return frozenset().union(*self.turns)

    def today(self) -> frozenset[str]:
        return self.turns[day() % len(self.turns)]

    def everything(self) -> bool:
        return _on(ALL) or _on(self.variable)

    def runs(self, name: str) -> bool:
        """Whether `name` runs today (a name outside the rotation always does)."""
        return name not in self.members or self.everything() or name in self.today()

    def why_not(self, name: str) -> str | None:
        """Why `name` does not run today (None: it runs)."""
        if self.runs(name):
            return None
        shown = sorted(self.today())
        listed = ", ".join(shown) if len(shown) <= 3 else f"{len(shown)} of {len(self.members)}"
        return (f"in rotation (CI's 45 minutes): today's turn of the {self.what} is {listed}, each one runs within "
                f"{len(self.turns)} days; {self.variable}=1 or {ALL}=1 runs all")

    def skip_unless_today(self, name: str) -> None:
        why = self.why_not(name)
        if why:
            import pytest

            pytest.skip(why)


def balanced(seconds: Mapping[str, float], turns: int) -> tuple[frozenset[str], ...]:
    """`turns` turns of about equal measured time: longest first, each into the turn with least so far (names break
    ties, so the split is the same on every machine)."""
    filled: list[tuple[float, list[str]]] = [(0.0, []) for _ in range(turns)]
    for name in sorted(seconds, key=lambda n: (-seconds[n], n)):
        i = min(range(turns), key=lambda k: (filled[k][0], k))
        filled[i] = (filled[i][0] + seconds[name], filled[i][1] + [name])
    return tuple(frozenset(names) for _, names in filled)


# Every other test measured at 8 s or more (call time, on this project's 2-core machine on 2026-11-26: the default
# lane's README and long selections with --junitxml, the legacy and trl024 lanes' --durations in .ci/run's log),
# with those seconds. A node id here that no longer exists fails tests/test_rotation.py. Measured again on 2026-11-28
# with TRL_DOCTOR_HEAVY_ALL=1: the members the rule harness (trl_doctor.testing) made fast left the list (the process
# count's sources 0.2 s, the meta model 0.04 s, a healthy smoke sweep 1.8 s, the trackio store's judgment 0.04 s), and
# a test marked `boundary` runs on every submission in CI's step of its own (a vendored transformers fork, 6.6 s).
HEAVY_SECONDS = {
    # PPO (trl 1.12.0, its last release with PPOTrainer, installed beside: marker other_trl)
    "tests/test_value_model.py::test_with_a_ppo_trainer_the_healthy_and_the_fixed_config_pass": 40.3,
    "tests/test_batch_geometry.py::test_ppo_on_trl_1_12": 37.3,
    "tests/test_watch_runs.py::test_ppo_failures_are_flagged_and_stopped[ppo_constant_reward]": 37.0,
    "tests/test_twin_heads.py::test_ppo_example_with_a_causal_lm_reward_path_takes_its_step": 32.4,
    "tests/test_smoke_step.py::test_ppo_step_with_the_last_trl_that_has_ppo": 31.9,
    "tests/test_launch.py::test_ppo_script_passing_the_policy_as_its_own_reference": 29.7,
    "tests/test_value_model.py::test_ppo_example_with_a_causal_lm_path_warns_on_the_reward_model_only": 26.5,
    "tests/test_migrations.py::test_ppov1_keys_on_the_last_release_with_ppo": 25.0,
    "tests/test_value_model.py::test_causal_lm_value_model_is_trained_and_causal_lm_reward_model_warns": 24.3,
    "tests/test_value_model.py::test_trl_0_12_fails_on_modules_instead": 16.1,
    # the watch's real runs and its trackers' own stores
    "tests/test_watch_stores.py::test_an_mlflow_tracking_server_on_this_machine": 38.5,
    "tests/test_watch_stores.py::test_the_profiling_rows_are_in_the_store": 31.8,
    "tests/test_watch_async_grpo.py::test_the_callback_stops_a_tied_async_grpo_job[5-10]": 31.6,
    "tests/test_watch_async_grpo.py::test_the_callback_lets_a_healthy_async_grpo_job_run": 28.0,
    "tests/test_watch_async_grpo.py::test_the_callback_stops_a_tied_async_grpo_job[None-5]": 14.3,
    "tests/test_watch_runs.py::test_two_processes_agree_when_one_is_late": 25.8,
    "tests/test_watch_runs.py::test_two_processes_stop_at_the_same_step": 18.0,
    "tests/test_watch_runs.py::test_the_watch_s_own_trouble_is_a_line_and_the_job_goes_on_to_its_verdict": 13.2,
    # trainer runs of single rules
    "tests/test_eos_termination.py::test_multi_eos_terminator_the_mask_ignores_is_reported_and_the_fix_retargets_the_"
    "tokenizer_eos": 37.0,
    "tests/test_eos_termination.py::test_adding_a_terminator_also_retargets_the_eos_where_the_mask_needs_it": 22.0,
    "tests/test_twin_heads.py::test_termination_probe_is_skipped_on_a_model_without_output_embeddings": 19.7,
    "tests/test_vllm_server.py::test_trl_1_10_client_against_its_own_server_and_against_vllms": 24.8,
    "tests/test_gpu_capacity.py::test_colocate_kv_cache_is_judged_at_the_length_the_installed_trl_passes": 22.9,
    "tests/test_logits_contract.py::test_remote_code_the_trainer_config_does_not_trust": 19.2,
    "tests/test_logits_contract.py::test_remote_forward_that_swallows_logits_to_keep": 16.3,
    "tests/test_logits_contract.py::test_remote_model_without_output_embeddings": 9.6,
    "tests/test_unchecked_trainers.py::test_online_dpo_reward_tokenizer_is_judged_as_the_installed_trl_runs_it"
    "[healthy]": 17.1,
    "tests/test_unchecked_trainers.py::test_online_dpo_reward_tokenizer_is_judged_as_the_installed_trl_runs_it"
    "[reward-tokenizer-without-pad]": 11.9,
    "tests/test_unchecked_trainers.py::test_a_trainer_given_a_pad_token_passes_and_trains": 10.6,
    "tests/test_async_grpo.py::test_trls_own_refusal_of_a_lora_on_lm_head_is_a_finding_with_its_words": 13.4,
    "tests/test_smoke_step.py::test_an_async_callable_class_reward_fails_as_trl_1_13_calls_it": 9.2,
    "tests/test_launch.py::test_doctor_callback_stops_the_job_before_step_one": 12.6,
    "tests/test_launch.py::test_doctor_callback_lets_a_healthy_job_train": 12.5,
    "tests/test_generation_settings.py::test_checkpointed_generation_by_release[0.22.0-pass]": 10.7,
    "tests/test_generation_settings.py::test_checkpointed_generation_by_release[0.21.0-warn]": 10.2,
    "tests/test_ci_integrations.py::test_the_python_hook_gives_real_verdicts_without_torch": 19.8,
    # where a check's finding points (a copy of a library on the path is the library's, not the user's)
    "tests/test_error_location.py::test_a_copy_of_the_installed_transformers_on_pythonpath_is_a_library": 13.3,
    "tests/test_error_location.py::test_a_copy_of_an_installed_package_put_on_pythonpath_inside_the_project_is_a_"
    "library": 11.0,
    # the accuracy harness: TRL's own run of a case beside the doctor's (the corpus's verdicts run every time:
    # tests/test_corpus.py)
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-dpo-full]": 24.2,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-sft-lora]": 15.0,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-sft-full]": 14.1,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-grpo-cli]": 13.2,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-rloo-cli]": 12.3,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-grpo-module-lora]": 12.2,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-dpo-lora]": 11.2,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[trl-kto-full]": 10.5,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/willccbb_grpo_demo]": 18.8,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/open_r1_recipe_on_trl1]": 11.4,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/qlora_grpo_vllm]": 36.2,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/grpo-recipe-trl015]": 29.8,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/open_r1_olmo_old_trl]": 16.3,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/mini-r1-countdown-trl015]": 14.6,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/ppo-example-causal-rm-trl015]": 9.4,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/rloo-example-trl015]": 8.7,
    "tests/test_accuracy.py::test_the_doctor_agrees_with_trl[corpus/ppo-example-trl015]": 8.6,
    "tests/test_accuracy_truth.py::test_a_recipe_key_the_scripts_trlparser_drops_is_shown": 12.6,
    "tests/test_accuracy_truth.py::test_a_model_moved_to_cuda_by_hand_stays_on_the_cpu": 11.3,
    "tests/test_accuracy_harness.py::test_a_notebook_is_its_code_cells_without_ipython_lines": 11.7,
}

def lane_halves(node_ids: Iterable[str]) -> Rotation:
    """CI's release lanes (legacy, trl017, trl024, vLLM) and the default lane's long selection (.ci/run's
    --half-a-day) run half their selection a day, split by crc32 of each node id (the same split on every machine and
    in every lane): the README's command runs its whole selection, and a test a release breaks fails in its lane
    within two days."""
    return Rotation.by_hash("release lane's tests", node_ids, 2, "TRL_DOCTOR_LANE_ALL")


HEAVY = Rotation("measured-heavy tests", balanced(HEAVY_SECONDS, 3), "TRL_DOCTOR_HEAVY_ALL")
