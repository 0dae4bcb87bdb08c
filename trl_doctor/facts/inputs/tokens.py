"""Token facts several rules need: the embedding's rows, and token-id lists as configs spell them."""

from __future__ import annotations

from typing import Any


def embedding_rows(ctx: Any) -> int | None:
    """Rows of the input embedding, from the model config (vocab_size of the text config)."""
    cfg = ctx.model_config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return getattr(text, "vocab_size", None)


def as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)]
