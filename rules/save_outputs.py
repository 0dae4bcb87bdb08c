"""TD022 save-outputs: the trainer can write its checkpoints and its final model.

What it does
    Saves the tokenizer the trainer holds with transformers' own `save_pretrained` into a scratch
    folder (all but its vocabulary file, the slow part: milliseconds), writes the model's config
    to JSON, and looks at `output_dir`: a folder, or one that can be made, and writable (a relative
    path is judged where the check runs; an absolute one where it exists on this machine). It runs
    for every trainer a launch command builds, TRL's online DPO and any `transformers.Trainer`
    included: saving is transformers' code for all of them.

Why is this bad?
    Checkpoints and `trainer.save_model()` write config.json and tokenizer_config.json after
    `save_steps` steps or at the end of the run, so what cannot be written stops the job after the
    hours it trained. TRL's examples/scripts/online_dpo.py (at 1.10) passes its model's keyword
    arguments, `dtype` included, to `AutoTokenizer.from_pretrained`; transformers 5 keeps them in
    the tokenizer's init kwargs, and the final save stops with "TypeError: Object of type dtype is
    not JSON serializable". An `output_dir` that is a file stops the first checkpoint. LoRA under
    FSDP2 with FULL_STATE_DICT on accelerate < 1.15 saves only rank 0's shard of each adapter
    tensor (accelerate#4206): a resume silently resets the others' to their initial values.

Example
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", dtype=torch.bfloat16)
    -> fail: trainer.save_model() and every checkpoint will stop at the tokenizer: TypeError:
       Object of type dtype is not JSON serializable; its init kwargs hold
       dtype=torch.bfloat16 (torch.dtype)

Fix safety
    No automatic fix: the script's call is the user's code. A manual fix names the keyword to
    drop from the tokenizer's `from_pretrained` call, or the folder to use.
"""

from __future__ import annotations

from pathlib import Path

from trl_doctor import ALL_TRAINERS, fail, manual, passed, rule, Unavailable, warn
from trl_doctor.facts.inputs.saving import (config_save_error, output_dir_problem, tokenizer_save_error,
                                           unsaveable_kwargs)
from trl_doctor.facts.launch.fsdp_adapter import adapter_save_loses_shards
from trl_doctor.facts.launch.settings import config_value


@rule(
    id="TD022",
    slug="save-outputs",
    title="The trainer can write its checkpoints and final model: the output folder, tokenizer and model config",
    trainers=ALL_TRAINERS,
    needs=("tokenizer",),
    fixable="never",
    static_skip="it saves the loaded tokenizer with transformers' save_pretrained",
)
def check(ctx):
    details, problems, fixes = {}, [], []
    output_dir = _output_dir(ctx)
    if output_dir is not None:
        problem, how = output_dir_problem(str(output_dir), Path.cwd())
        details["output_dir"] = how or problem
        if problem:
            problems.append(problem)
            fixes.append("set output_dir to a folder that can be made and written")
    error = tokenizer_save_error(ctx.tokenizer)
    if error:
        held = unsaveable_kwargs(ctx.tokenizer)
        details["tokenizer init kwargs JSON cannot write"] = held or "none found"
        problems.append(f"trainer.save_model() and every checkpoint will stop at the tokenizer: {error}"
                        + (f"; its init kwargs hold {', '.join(held)}" if held else ""))
        if held:
            names = ", ".join(h.split("=", 1)[0] for h in held)
            fixes.append(f"drop {names} from the tokenizer's from_pretrained call (a model's keyword arguments passed "
                         "to the tokenizer stay in its init kwargs and are written to tokenizer_config.json)")
    details["tokenizer"] = "saves" if not error else "does not save"
    config = _model_config(ctx)
    error = config_save_error(config)
    if error:
        problems.append(f"the model's config.json cannot be written: {error}")
    details["model config"] = "not read" if config is None else ("saves" if not error else "does not save")
    shards = adapter_save_loses_shards(ctx)
    if shards is not None:
        problems.append(shards.message)
        fixes.append(shards.fix)
        details["adapter under FSDP2"] = "rank 0's shard only (accelerate < 1.15.0, FULL_STATE_DICT)"
    if problems:
        fix = manual("; ".join(fixes)) if fixes else None
        strategy = _save_strategy(ctx)
        details["save_strategy"] = strategy
        if strategy == "no":  # no checkpoint: only a save_model() call of the script's own writes
            yield warn("; ".join(problems) + " (save_strategy is 'no': this stops a save_model() call the script "
                       "makes at its end, and nothing else)", fix, **details)
            return
        yield fail("; ".join(problems), fix, **details)
        return
    yield passed("the tokenizer and model config save, and output_dir can be written", **details)


def _output_dir(ctx):
    """The output folder the trainer writes to: the script's own TrainingArguments, else the config's key."""
    args = getattr(ctx.live, "args", None) if ctx.live is not None else None
    if args is not None:
        return getattr(args, "output_dir", None)
    return ctx.config.raw.get("output_dir")  # the file's: the built config holds the doctor's own scratch folder


def _save_strategy(ctx) -> str:
    args = getattr(ctx.live, "args", None) if ctx.live is not None else None
    # the script's own args even where TRL refuses their batch at one process (config_value then reads the flags)
    value = getattr(args, "save_strategy", None) if args is not None else config_value(ctx, "save_strategy", "steps")
    return str(getattr(value, "value", value) or "steps")


def _model_config(ctx):
    if ctx.live is not None and ctx.live.model is None:
        return None
    try:
        return ctx.model_config
    except Unavailable:
        return None
