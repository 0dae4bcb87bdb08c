"""The project's vocabularies, each written once (issue 47). A new trainer kind or output format is one entry here plus
its code: the rules' `trainers=`, the CLI's choices, the launch command's `trl SUBCOMMAND`, the capture's trainer
classes and the report formats all read these lists (CONTRIBUTING.md, "Adding a trainer or a format")."""

from __future__ import annotations

# TRL's RL trainers the doctor judges: its facts know each one's config class, trainer class and metric names
TRAINERS = ("grpo", "rloo", "ppo")
# any other TRL trainer a launch command builds (SFT, DPO...): only rules that say so judge it (opt-in)
OTHER_TRAINER = "other"
ALL_TRAINERS = (*TRAINERS, OTHER_TRAINER)
# TRL trainers the doctor recognizes but judges only by the rules that name them, and by the rules open to any trainer
# (`other`): TRL's AsyncGRPOTrainer (trl.experimental.async_grpo, trl >= 1.10), which generates on a `vllm serve` it
# never starts and trains with FlashAttention-3 kernels; every other rule says why it does not judge it
# (trl_doctor.facts.trl.async_grpo.NOT_JUDGED)
ASYNC_GRPO = "async_grpo"
OPT_IN_TRAINERS = (ASYNC_GRPO,)


def judges(trainers: tuple[str, ...], kind: str) -> bool:
    """Whether a rule declared for `trainers` judges a trainer of `kind`: one it names, or a recognized trainer of
    an opt-in kind when the rule judges any trainer (`other`)."""
    return kind in trainers or (kind in OPT_IN_TRAINERS and OTHER_TRAINER in trainers)

# `check` and `watch --format`, and `--output FORMAT=FILE` (trl_doctor/report/formats/: one module each)
FORMATS = ("table", "json", "junit", "github", "sarif")
# the listings (`trl-doctor rules`, `env`): a table for people, JSON for tools
LISTING_FORMATS = ("table", "json")
