"""TD009 trainer-config: the config is one the installed TRL accepts.

What goes wrong
    `trl grpo --config config.yaml` (and rloo, ppo) parses every key into TRL's dataclasses: the script
    arguments, the model arguments and the trainer's config class (GRPOConfig, RLOOConfig, PPOConfig). A
    key that none of them has (a typo, or a field renamed or removed between TRL releases, such as
    `max_prompt_length` or `use_vllm` options moving around) makes the parser stop before training starts,
    and a value TRL's own `__post_init__` rejects (a batch that does not divide into generations, a
    conflicting pair of options) stops the job inside the launcher, one error at a time.

Versions
    Field sets change with every TRL minor release; the rule asks the installed release, never a table.
    On a machine without a GPU the config is built with `use_cpu=True` (transformers otherwise rejects
    bf16 "on this setup"), because the config is meant for the training machine; precision against the
    real GPU is another rule's job.

How it is detected
    The values are read as TRL's own parser reads them (the `make_parser()` of the installed release's
    `trl/scripts/<trainer>.py`): argparse converts every string with the argument's type, so `2e-5` is a
    float and `num_generations: eight` is refused with the parser's own message, naming the key. The
    doctor's own keys (trainer, tokenizer_name_or_path, added_tokens, dataset_path, ...) are set aside;
    every other key must be an argument of that parser (script arguments, the trainer's config class,
    ModelConfig, DatasetMixtureConfig's `datasets:`), and the config class is built from its keys so that
    TRL's validation runs.

What the fix does
    A key renamed with the same meaning (trl_doctor/data/migrations.yaml: `torch_dtype` -> `dtype` in trl
    0.23, `warmup_ratio` -> `warmup_steps` in transformers 5) is renamed in the config, value unchanged. A
    removed key gets a manual fix (remove it) and the table's note on what replaced it; any other unknown key
    gets the closest known field only when it is really close (a typo), and TRL's own messages are quoted.
    The words follow the installed TRL: stopped at start-up (trl 0.19 and later), or dropped without a word.
"""

from __future__ import annotations

from trl_doctor import DELETE, Edit, Fix, Location, fail, manual, passed, rule


@rule(id="TD009", slug="trainer-config", title="The installed TRL accepts every key and value of the config")
def check(ctx):
    info = ctx.trainer_config_info
    details = {"config class": info.class_name, "trl": info.trl_version}
    if info.injected:
        details["set by the doctor to build it here"] = ", ".join(f"{k}={v}" for k, v in info.injected.items())
    if info.parser:
        details["read with"] = info.parser
    if info.typed:
        details["typed by TRL's parser"] = {k: repr(v) for k, v in info.typed.items()}
    for key, why in info.type_errors.items():
        yield fail(why, location=Location(str(ctx.config.path), key),
                   **details)
    if info.unknown_keys:
        yield from _unknown(ctx, info, details)
    if info.launch_note:
        details["batch arithmetic"] = f"left to batch-geometry: {info.launch_note}"
    deferred = bool(info.launch_note) or (info.error and _left_to_batch_geometry(ctx, info.error, details))
    if info.error and not deferred:
        yield fail(f"{info.class_name} rejects the config: {info.error}", **details)
    if not info.unknown_keys and not info.type_errors and (not info.error or deferred):
        extra = "; its batch check at 1 process is left to batch-geometry" if deferred else ""
        yield passed(f"{info.class_name} (trl {info.trl_version}) accepts all {len(info.passed_keys)} trainer keys{extra}", **details)


def _unknown(ctx, info, details: dict):
    """Unknown keys: a renamed or removed key (the migration table) says when and what replaces it, with a safe
    rename where the meaning is the same; any other gets the closest field when it is really close. What the
    installed TRL does with it decides the words: stop at start-up, or drop it without a word."""
    from trl_doctor.facts.migrations import migration_for, unknown_key_policy

    policy, evidence = unknown_key_policy()
    details["unknown keys"] = info.unknown_keys
    details["trl's parser"] = evidence
    consequence = (f"`trl {ctx.trainer} --config` stops on it at start-up" if policy == "stops" else
                   f"trl {info.trl_version}'s `trl {ctx.trainer} --config` drops it without a word: its value never "
                   "reaches the trainer")
    installed = {"trl": info.trl_version, "transformers": ctx.version("transformers")}
    plain = []
    for key in info.unknown_keys:
        entry = migration_for(key, installed, trainer=ctx.trainer)
        if entry is None:
            plain.append(f"{key!r} (did you mean {info.suggestions[key]!r}?)" if key in info.suggestions else repr(key))
            continue
        value = ctx.config.raw.get(key)
        if entry.replacement and entry.same_meaning and entry.replacement not in ctx.config.raw:
            fix = Fix(f"rename `{key}` to `{entry.replacement}` in {ctx.config.path.name} (same meaning)",
                      (Edit(str(ctx.config.path), set=((key, DELETE), (entry.replacement, value))),))
        else:
            fix = manual(f"remove `{key}` from {ctx.config.path.name}" + (f" (and set `{entry.replacement}`)"
                                                                          if entry.replacement else ""))
        yield fail(f"{entry.words()}; with {entry.package} {installed[entry.package]}, {consequence}", fix,
                   location=Location(str(ctx.config.path), key), **details)
    if plain:
        yield fail(f"trl {info.trl_version} does not know {', '.join(plain)}: {consequence}", **details)


def _left_to_batch_geometry(ctx, error: str, details: dict) -> bool:
    """TRL's config class checks the batch arithmetic against the processes it runs in: one, here. That is
    batch-geometry's question, which it answers at the launch's real process count with the fix: not repeated here."""
    from trl_doctor.facts.launch import is_geometry_error, launch

    if not is_geometry_error(error):
        return False
    the_launch = launch(ctx)
    details["batch arithmetic"] = (f"left to batch-geometry (the launch has {the_launch.processes} process"
                                   f"{'es' if the_launch.processes != 1 else ''}, {the_launch.processes_from}); TRL's "
                                   f"check in this single process says: {error}")
    return True
