"""Token facts several rules need: the embedding's rows, the tokenizer's pad and eos, and token-id lists as configs
spell them. Each is answered in the full check (the loaded tokenizer and model config) and under --static (the files
read as JSON: trl_doctor.static); a context without either (the watch) says Unavailable through the context."""

from __future__ import annotations

from typing import Any, NamedTuple

from trl_doctor.errors import Unavailable


class Specials(NamedTuple):
    pad: str | None
    pad_id: int | None
    eos: str | None
    eos_id: int | None


def embedding_rows(ctx: Any) -> int | None:
    """Rows of the input embedding, from the model config (vocab_size of the text config)."""
    if ctx.kind == "static":
        return ctx.vocab_rows
    cfg = ctx.model_config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return getattr(text, "vocab_size", None)


def specials(ctx: Any) -> Specials:
    """The tokenizer's pad and eos tokens and their ids, as the trainer holds the tokenizer. Under --static, a config
    that adds tokens (`added_tokens`, which may hold the pad) leaves the pad to the full check: Unavailable."""
    if ctx.kind == "static" and ctx.config.added_tokens:
        raise Unavailable("needs the full check: `added_tokens` change the tokenizer the trainer holds")
    return _specials(ctx)


def eos_token(ctx: Any) -> tuple[str | None, int | None]:
    """The tokenizer's eos token and its id (tokens a config adds come after it and leave it as it is)."""
    found = _specials(ctx)
    return found.eos, found.eos_id


def _specials(ctx: Any) -> Specials:
    if ctx.kind == "static":
        tok = ctx.token_ids()
        pad, eos = tok.token("pad_token"), tok.token("eos_token")
        return Specials(pad, tok.id_of(pad), eos, tok.id_of(eos))
    tok = ctx.tokenizer
    return Specials(tok.pad_token, tok.pad_token_id, tok.eos_token, tok.eos_token_id)


def token_names(ctx: Any, ids) -> dict[int, str | None]:
    """{id: the token's text} for token ids, from the tokenizer the trainer holds (or its files under --static)."""
    if ctx.kind == "static":
        tok = ctx.token_ids()
        return {i: tok.name_of(i) for i in ids}
    tok = ctx.tokenizer
    return {i: tok.convert_ids_to_tokens(i) for i in ids}


def as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)]
