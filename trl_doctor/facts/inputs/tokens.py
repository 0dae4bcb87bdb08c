"""Token facts several rules need: the embedding's rows, and token-id lists as configs spell them."""

from __future__ import annotations

from typing import Any


def embedding_rows(ctx: Any) -> int | None:
    """Rows of the input embedding, from the model config (vocab_size of the text config)."""
    cfg = ctx.model_config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return getattr(text, "vocab_size", None)


def vocab_size_on_disk(folder) -> int | None:
    """`vocab_size` in the config.json of `folder` (its text config's for a multimodal model), as a loader that
    starts from the folder (vLLM) sees it; None when the file or the number is not there."""
    import json
    from pathlib import Path

    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    size = text.get("vocab_size", data.get("vocab_size"))
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)]
