"""Chat-template facts several rules need: whether the dataset is conversational, and which token ends
an assistant turn in the template the tokenizer will render."""

from __future__ import annotations

from typing import Any

_MARK = "TRLDOCTORMARK"


def is_conversational(row: dict[str, Any], column: str = "prompt") -> bool:
    value = row.get(column)
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "role" in value[0]


def special_ids(tok) -> set[int]:
    ids = set(tok.all_special_ids)
    for token_id, added in getattr(tok, "added_tokens_decoder", {}).items():
        if getattr(added, "special", False):
            ids.add(int(token_id))
    return ids


def turn_terminator(tok) -> dict[str, Any] | None:
    """The first special token the template puts after an assistant message's content, e.g. <|im_end|>,
    <|eot_id|>: the token a model trained on this template emits to end its turn. None without a template."""
    if not getattr(tok, "chat_template", None):
        return None
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK}]
    try:
        text = tok.apply_chat_template(conversation, tokenize=False)
    except Exception as exc:  # a template that cannot render is the chat-template rule's finding
        return {"error": f"{type(exc).__name__}: {exc}"}
    if _MARK not in text:
        return {"error": "the template does not render the assistant's content"}
    after = text.split(_MARK, 1)[1]
    specials = special_ids(tok)
    for token_id in tok(after, add_special_tokens=False)["input_ids"]:
        if token_id in specials:
            return {"token": tok.convert_ids_to_tokens(token_id), "id": int(token_id), "text_after_content": after}
    return {"token": None, "id": None, "text_after_content": after}


def completion_terminator(tok, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The token a completion should end with: the template's turn terminator for conversational prompts,
    else the tokenizer's eos. {"id", "token", "why", "conversational", "template_error"}."""
    conversational = bool(rows) and is_conversational(rows[0])
    out = {"conversational": conversational, "template_error": None}
    if conversational:
        term = turn_terminator(tok)
        if term and term.get("error"):
            out["template_error"] = term["error"]
        elif term and term.get("id") is not None:
            return {**out, "id": term["id"], "token": term["token"], "why": "the chat template's end of the assistant turn"}
    return {**out, "id": tok.eos_token_id, "token": tok.eos_token,
            "why": "the tokenizer's eos (" + ("the template puts no special token after a turn" if conversational else "plain-text prompts") + ")"}
