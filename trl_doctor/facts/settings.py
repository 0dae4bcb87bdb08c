"""The resolved launch settings: the value the trainer will see for each config key (TRL's built config object,
else the user's value, else the installed class's default), the precision and the policy's dtype as the
installed TRL resolves them."""

from __future__ import annotations

import json
import re
from typing import Any

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float64": 8}

LOCAL_HOSTS = ("0.0.0.0", "localhost", "127.0.0.1", "::1", "", "::")
_MISSING = object()


def config_value(ctx, key: str, default: Any = None) -> Any:
    """The value the trainer will see for `key`: TRL's built config object when it builds, else the user's
    raw value, else the default of the installed config class (or TRL's ModelConfig / ScriptArguments)."""
    cfg = trainer_config_or_none(ctx)
    if cfg is not None and hasattr(cfg, key):
        return getattr(cfg, key)
    raw = ctx.config.raw
    if key in raw:
        return raw[key]
    found = _field_default(ctx.trainer, key)
    return default if found is _MISSING else found


def trainer_config_or_none(ctx):
    from .._errors import InputError, Unavailable

    try:
        return ctx.trainer_config
    except (Unavailable, InputError):
        return None


def _field_default(trainer: str, key: str) -> Any:
    import dataclasses

    try:
        from .trl import config_class

        classes = [config_class(trainer)]
        import trl

        classes += [getattr(trl, "ModelConfig", None), getattr(trl, "ScriptArguments", None)]
    except Exception:  # no TRL: no defaults to read
        return _MISSING
    from .trl import field_default

    for cls in classes:
        if cls is None or not dataclasses.is_dataclass(cls):
            continue
        value = field_default(cls, key, _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


def precision(ctx) -> tuple[bool, bool]:
    """(bf16, fp16) as the trainer resolves them (TRL >= 0.19 turns bf16=None into `not fp16`)."""
    fp16 = bool(config_value(ctx, "fp16", False))
    bf16 = config_value(ctx, "bf16", False)
    if bf16 is None:
        bf16 = not fp16
    return bool(bf16), fp16


def model_init_kwargs(ctx) -> dict:
    value = config_value(ctx, "model_init_kwargs", None)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    return dict(value) if isinstance(value, dict) else {}


def policy_dtype(ctx) -> tuple[str, str]:
    """(dtype name, where it comes from) of the policy's weights as TRL loads them."""
    kwargs = model_init_kwargs(ctx)
    raw = ctx.config.raw
    for where, mapping in (("model_init_kwargs", kwargs), ("the config", raw)):
        for key in ("dtype", "torch_dtype"):
            if mapping.get(key) is not None:
                return _resolve_dtype(ctx, mapping[key], f"{key} in {where}" if where != "the config" else f"`{key}`")
    for key in ("dtype", "torch_dtype"):
        found = _field_default(ctx.trainer, key)
        if found is not _MISSING and found is not None:
            return _resolve_dtype(ctx, found, f"TRL's ModelConfig default {key}={found!r}")
    # no dtype anywhere: TRL 1.x's create_model_from_path loads fp32; bare transformers 5 loads "auto"
    from .trl import trl_root

    root = trl_root()
    utils = root / "trainer" / "utils.py" if root else None
    if utils and utils.is_file() and re.search(r"""get\(\s*["']dtype["']\s*,\s*["']float32["']\s*\)""", utils.read_text()):
        return "float32", "TRL's create_model_from_path default (float32 when no dtype is given)"
    version = ctx.version("transformers") or "0"
    if int(version.split(".")[0]) >= 5:
        return _resolve_dtype(ctx, "auto", f"transformers {version}'s from_pretrained default 'auto'")
    return "float32", f"transformers {version}'s from_pretrained default (float32)"


def _resolve_dtype(ctx, value: Any, where: str) -> tuple[str, str]:
    name = str(value).replace("torch.", "")
    if name == "auto":
        cfg = ctx.read_json(ctx.model_file("config.json")) or {}
        found = cfg.get("dtype") or cfg.get("torch_dtype")
        if isinstance(found, str) and found in DTYPE_BYTES:
            return found, f"{where}: 'auto' reads {found} from config.json"
        return "float32", f"{where}: 'auto', and config.json names no dtype (assumed float32)"
    if name not in DTYPE_BYTES:
        return "float32", f"{where}: {value!r} is not a dtype this estimate knows (assumed float32)"
    return name, where
