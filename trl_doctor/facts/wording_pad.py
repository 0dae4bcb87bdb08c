"""pad-token's words (TD001), once for the full rule (rules/pad_token.py) and `check --static` (static/judge.py), so
a case reads the same in both. Plain strings from plain values; imports nothing."""

from __future__ import annotations

NEITHER = "the tokenizer has neither a pad token nor an eos token; batches cannot be padded"


def details(*, tokenizer, pad, pad_id, eos, eos_id, rows, config_pad, generation_json, trl) -> dict:
    """The details every pad-token finding carries (`generation_json`: generation_config.json, or None without one)."""
    return {"tokenizer": tokenizer, "pad_token": pad, "pad_token_id": pad_id, "eos_token": eos, "eos_token_id": eos_id,
            "vocab_size (embedding rows)": rows, "config.json pad_token_id": config_pad,
            "generation_config.json pad_token_id": None if generation_json is None else generation_json.get("pad_token_id"),
            "trl": trl}


def set_to_eos(trainer: str, trainer_cls: str, trl: str, eos, eos_id) -> str:
    """No pad token, and the trainer sets pad = eos itself (PPO: with the harm that does to its masks)."""
    harm = (" PPO then masks that eos out of the value and reward forwards, so the model is never rewarded for stopping."
            if trainer == "ppo" else "")
    return (f"the tokenizer has no pad token; {trainer_cls} in trl {trl} will silently set pad_token = eos_token "
            f"{eos!r} (id {eos_id}).{harm}")


def never_set(trainer_cls: str, trl: str) -> str:
    return (f"the tokenizer has no pad token and {trainer_cls} in trl {trl} does not set one: the first batch fails with "
            "'Asking to pad but the tokenizer does not have a padding token'")


def outside_rows(pad, pad_id, rows) -> str:
    return (f"pad token {pad!r} has id {pad_id}, outside the model's {rows} embedding rows (config.json vocab_size): "
            "the first forward pass indexes past the embedding matrix")


def files_disagree(pad, pad_id, disagree: dict) -> str:
    """`disagree`: file name -> the pad_token_id it says."""
    listed = ", ".join(f"{name} says {value}" for name, value in disagree.items())
    return f"pad_token_id disagrees between files: the tokenizer's pad {pad!r} is id {pad_id} but {listed}"


def ppo_stop(pad, pad_id) -> str:
    return (f"pad token {pad!r} is also PPO's stop token (id {pad_id}): PPO masks pad ids out of the value and reward "
            "forwards, so the final eos is masked and the model is never rewarded for stopping")


def healthy(pad, pad_id, rows) -> str:
    within = f"and within the {rows} embedding rows" if rows is not None else "(config.json names no vocab_size)"
    return f"pad token {pad!r} (id {pad_id}) is set {within}"
