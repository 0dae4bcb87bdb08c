"""Model facts: where a model reference resolves (a local folder or the hub cache, never a download) and how
many parameters a model holds."""

from __future__ import annotations

from .._config import resolve_artifact
from .._twin import parameter_count

__all__ = ["parameter_count", "resolve_artifact"]


def score_rows(folder) -> int | None:
    """Rows of a sequence classifier's head (`score.weight`, `classifier.weight`) in the checkpoint's safetensors,
    read from the file headers only (no weights); None when there is none to read. A config may leave num_labels at
    its default of 2 over a 1-row head, which `num_labels=1` (TRL's example scripts) loads as it is."""
    import glob
    import os

    try:
        from safetensors import safe_open
    except ImportError:
        return None
    for file in sorted(glob.glob(os.path.join(str(folder), "*.safetensors"))):
        try:
            with safe_open(file, framework="pt") as f:
                for key in f.keys():
                    if key.endswith(("score.weight", "classifier.weight")):
                        return int(f.get_slice(key).get_shape()[0])
        except Exception:
            continue
    return None


# -- the model's family and its code -------------------------------------------------------------------------

def config_json(ctx) -> dict:
    """The candidate's config.json as a plain dict (no transformers, no remote code); {} without one."""
    return ctx.read_json(ctx.model_file("config.json")) or {}


def model_types(ctx) -> tuple[str, ...]:
    """config.json's `model_type`, then its text_config's (a vision-language Gemma 3 is gemma3 over gemma3_text)."""
    cfg = config_json(ctx)
    found = [cfg.get("model_type")]
    if isinstance(cfg.get("text_config"), dict):
        found.append(cfg["text_config"].get("model_type"))
    return tuple(str(t) for t in found if t)


def default_attention(ctx) -> tuple[str | None, str]:
    """(the attention implementation the installed transformers picks for this model when none is asked for, the
    model class): read from the meta-device model, which transformers builds with its own default; (None, why) when
    the model cannot be built here."""
    from .. import InputError, Unavailable

    try:
        model = ctx.meta_model
    except (InputError, Unavailable) as exc:
        return None, str(exc)
    except Exception as exc:  # an architecture the installed transformers cannot build: no default to read
        return None, f"{type(exc).__name__}: {exc}"
    impl = getattr(model.config, "_attn_implementation", None)
    return (str(impl) if impl else None), type(model).__name__


def model_class_source(ctx) -> tuple[type | None, str]:
    """(the installed transformers' causal-LM class for config.json's model_type, the text of its modeling file), read
    without building a model; (None, "") for a model_type transformers does not ship (remote code, or too new)."""
    import importlib
    import inspect

    for model_type in model_types(ctx):
        try:
            from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        except ImportError:
            return None, ""
        name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
        if not name:
            continue
        module_name = model_type.replace("-", "_")
        for candidate in (module_name, module_name.removesuffix("_text")):
            try:
                module = importlib.import_module(f"transformers.models.{candidate}.modeling_{candidate}")
            except ImportError:
                continue
            cls = getattr(module, name, None)
            if cls is None:
                continue
            try:
                return cls, inspect.getsource(module)
            except (OSError, TypeError):
                return cls, ""
    return None, ""


def remote_code(ctx) -> dict | None:
    """The model's own code, as config.json declares it (`auto_map`), read without running it: None when it has
    none; else {"auto_map", "model_type", "native" (the installed transformers ships this model_type, so a load
    without trust_remote_code takes transformers' own class instead of the model's code), "trusted_by" (the key of
    the trainer config that lets TRL run it, or None)}."""
    cfg = config_json(ctx)
    auto_map = cfg.get("auto_map")
    if not isinstance(auto_map, dict) or not auto_map:
        return None
    model_type = cfg.get("model_type")
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        native = model_type in CONFIG_MAPPING_NAMES
    except ImportError:
        native = False
    return {"auto_map": {str(k): str(v) for k, v in auto_map.items()}, "model_type": model_type, "native": native,
            "trusted_by": trusted_by(ctx)}


def trusted_by(ctx) -> str | None:
    """The trainer config's key that makes TRL load the model with trust_remote_code=True, or None.

    `model_init_kwargs.trust_remote_code` reaches from_pretrained in every release; the top-level
    `trust_remote_code` is the config class's own field where the installed TRL has one (GRPOConfig in 1.x puts it
    into model_init_kwargs), and TRL's ModelConfig's otherwise (the `trl grpo` script passes it to from_pretrained)."""
    from .settings import model_init_kwargs

    try:
        kwargs = model_init_kwargs(ctx)
    except Exception:  # a refused model_init_kwargs value: trainer-config reports it
        kwargs = {}
    if isinstance(kwargs, dict) and kwargs.get("trust_remote_code") is True:
        return "model_init_kwargs.trust_remote_code"
    if ctx.config.raw.get("trust_remote_code") is True:
        return "trust_remote_code"
    return None
