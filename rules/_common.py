"""Helpers shared by the built-in rules: trainer names, what the installed trainer does (read from its
source), and the token facts several rules need."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

TRAINER_CLASS = {"grpo": "GRPOTrainer", "rloo": "RLOOTrainer", "ppo": "PPOTrainer"}

# `x.pad_token = x.eos_token` for the policy's tokenizer (reward tokenizers are handled separately by TRL)
_POLICY_PAD_RE = re.compile(r"^\s*([\w.]+)\.pad_token\s*=\s*\1\.eos_token\b", re.M)


def trainer_sets_pad_to_eos(trainer: str) -> tuple[bool | None, str]:
    """Whether the installed TRL trainer fills a missing pad token with eos, and the evidence (file:line)."""
    from trl_doctor._trl import trainer_source

    found = trainer_source(trainer)
    if found is None:
        return None, f"trl has no {TRAINER_CLASS[trainer]} source installed"
    rel, text = found
    for m in _POLICY_PAD_RE.finditer(text):
        if "reward" in m.group(1):
            continue
        line = text.count("\n", 0, m.start()) + 1
        return True, f"{rel}:{line}: `{m.group(0).strip()}`"
    return False, f"{rel} never assigns the policy tokenizer's pad_token"


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


# -- reading source text and small JSON files ---------------------------------------------------------------

def line_of(text: str, pos: int) -> int:
    """1-based line number of offset `pos` in `text`."""
    return text.count("\n", 0, pos) + 1


def line_text(text: str, pos: int) -> str:
    """The stripped line of `text` that contains offset `pos`."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else None].strip()


def read_json(path: Path) -> dict | None:
    """A JSON object from `path`, or None when the file is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
