"""The project's vocabularies, each written once (issue 47). A new trainer kind or output format is one entry here plus
its code: the rules' `trainers=`, the CLI's choices, the launch command's `trl SUBCOMMAND`, the capture's trainer
classes and the report formats all read these lists (CONTRIBUTING.md, "Adding a trainer or a format")."""

from __future__ import annotations

# TRL's RL trainers the doctor judges: its facts know each one's config class, trainer class and metric names
TRAINERS = ("grpo", "rloo", "ppo")
# any other TRL trainer a launch command builds (SFT, DPO...): only rules that say so judge it (opt-in)
OTHER_TRAINER = "other"
ALL_TRAINERS = (*TRAINERS, OTHER_TRAINER)

# `check` and `watch --format`, and `--output FORMAT=FILE` (trl_doctor/report/formats/: one module each)
FORMATS = ("table", "json", "junit", "github", "sarif")
# the listings (`trl-doctor rules`, `env`): a table for people, JSON for tools
LISTING_FORMATS = ("table", "json")
