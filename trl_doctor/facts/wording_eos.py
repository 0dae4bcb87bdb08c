"""eos-termination's words (TD004), once for the full rule (rules/eos_termination.py), the terminator fact
(facts/chat.py) and `check --static` (static/judge.py), so a case reads the same in both. Imports nothing."""

from __future__ import annotations

NO_EOS = "the tokenizer has no eos token: nothing can end a completion"
TURN_END = "the chat template's end of the assistant turn"
STOP_SET = "stop set (HF generate and vLLM: tokenizer eos + generation config eos ids)"


def eos_why(conversational: bool) -> str:
    """Why the tokenizer's eos is the terminator: the template ends no turn with a special token, or no template."""
    return "the tokenizer's eos (" + (
        "the template puts no special token after a turn" if conversational else "plain-text prompts") + ")"


def unrendered(error: str) -> str:
    return f"the chat template cannot be rendered ({error}); the turn terminator is unknown"


def details(term: dict, eos, eos_id, config_json: dict, generation_json: dict | None, stop_names: list,
            use_vllm: bool) -> dict:
    """What every finding of the non-PPO path carries. `term`: {"token", "id", "why"}; `stop_names`: (token, id) of
    each id in the stop set."""
    return {"terminator": f"{term['token']!r} (id {term['id']}): {term['why']}",
            "tokenizer eos": f"{eos!r} (id {eos_id})",
            "config.json eos_token_id": config_json.get("eos_token_id"),
            "generation_config.json eos_token_id": None if generation_json is None else generation_json.get("eos_token_id"),
            STOP_SET: [f"{name!r} ({i})" for name, i in stop_names],
            "generation path": "vLLM" if use_vllm else "transformers generate"}


def stop_ids_from(gen_eos: list, has_generation_config: bool) -> str:
    """Where generation takes its eos ids: generation_config.json, else config.json."""
    return (f"generation_config.json eos_token_id {gen_eos}" if has_generation_config else
            f"config.json eos_token_id {gen_eos} (no generation_config.json)")


def never_stops(term: dict, use_vllm: bool, where: str, eos, eos_id) -> str:
    """The terminator is in no stop set (`where`: stop_ids_from's words)."""
    path = "vLLM" if use_vllm else "generation"
    return (f"{term['token']!r} (id {term['id']}) ends the assistant's turn but {path} will not stop at it: {where} and "
            f"the tokenizer's eos {eos!r} ({eos_id}) do not include it, so completions run to max_completion_length")


def in_stop_set(term: dict, how: str = "") -> str:
    return f"completions end at {term['token']!r} (id {term['id']}), which is in the stop set{how}"
