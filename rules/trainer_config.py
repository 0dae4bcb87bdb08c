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
    Nothing automatic: an unknown key is reported with the closest known field name, and TRL's own
    error message is quoted.
"""

from __future__ import annotations

from trl_doctor import Location, fail, passed, rule


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
        yield fail(f"{why}: `trl {ctx.trainer} --config` stops before training starts", location=Location(str(ctx.config.path), key),
                   **details)
    if info.unknown_keys:
        listed = ", ".join(
            f"{k!r} (did you mean {info.suggestions[k]!r}?)" if k in info.suggestions else repr(k) for k in info.unknown_keys
        )
        details["unknown keys"] = info.unknown_keys
        yield fail(
            f"trl {info.trl_version} does not know {listed}: `trl {ctx.trainer} --config` would stop on it",
            **details,
        )
    if info.launch_note:
        details["batch arithmetic"] = f"left to batch-geometry: {info.launch_note}"
    deferred = bool(info.launch_note) or (info.error and _batch_error_at_other_process_count(ctx, info.error, details))
    if info.error and not deferred:
        yield fail(f"{info.class_name} rejects the config: {info.error}", **details)
    if not info.unknown_keys and not info.type_errors and (not info.error or deferred):
        extra = "; its batch check at 1 process is left to batch-geometry" if deferred else ""
        yield passed(f"{info.class_name} (trl {info.trl_version}) accepts all {len(info.passed_keys)} trainer keys{extra}", **details)


def _batch_error_at_other_process_count(ctx, error: str, details: dict) -> bool:
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
