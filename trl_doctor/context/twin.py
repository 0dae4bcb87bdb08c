"""The miniature twin: the candidate's architecture class, vocabulary, special-token ids, rope and tying
settings, but 2 layers and a tiny width, with random weights from a fixed seed.

Probes that need real forward or backward passes run on it in seconds on a CPU, through the same
transformers code path the real model takes.
"""

from __future__ import annotations

import copy
from typing import Any

TWIN_LAYERS = 2
TWIN_HIDDEN = 64
TWIN_HEADS = 4
TWIN_INTERMEDIATE = 128
TWIN_SEED = 1234

# Sizes that scale with depth or width; everything else (vocab, special ids, rope, tying) is kept.
_LAYER_KEYS = ("num_hidden_layers", "max_window_layers", "num_layers")
_WIDTH_KEYS = ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size")


def twin_config(config: Any) -> Any:
    """A shrunken deep copy of a transformers config: depth and width capped, everything else kept."""
    small = copy.deepcopy(config)
    keys = small.to_dict()
    layers = min(getattr(small, "num_hidden_layers", TWIN_LAYERS) or TWIN_LAYERS, TWIN_LAYERS)
    for key in _LAYER_KEYS:
        if isinstance(keys.get(key), int):
            setattr(small, key, min(keys[key], layers))
    if hasattr(small, "num_hidden_layers"):
        small.num_hidden_layers = layers
    heads = getattr(small, "num_attention_heads", None)
    hidden = min(getattr(small, "hidden_size", TWIN_HIDDEN) or TWIN_HIDDEN, TWIN_HIDDEN)
    if heads is not None:
        new_heads = min(heads, TWIN_HEADS)
        kv = getattr(small, "num_key_value_heads", None)
        small.num_attention_heads = new_heads
        if kv is not None:
            # keep grouped-query attention grouped (and multi-query single-headed)
            small.num_key_value_heads = 1 if kv == 1 else (new_heads if kv >= heads else max(1, new_heads // 2))
        hidden -= hidden % new_heads
        if keys.get("head_dim") is not None:
            small.head_dim = hidden // new_heads
    if hasattr(small, "hidden_size"):
        small.hidden_size = hidden
    for key in _WIDTH_KEYS:
        if isinstance(keys.get(key), int):
            setattr(small, key, min(keys[key], TWIN_INTERMEDIATE))
    if "n_inner" in keys:
        small.n_inner = None  # GPT-2: 4 * hidden
    layer_types = keys.get("layer_types")
    if isinstance(layer_types, list):
        small.layer_types = layer_types[:layers]
    for key, cap in (("num_experts", 4), ("num_local_experts", 4), ("n_routed_experts", 4), ("num_experts_per_tok", 2)):
        if isinstance(keys.get(key), int):
            setattr(small, key, min(keys[key], cap))
    return small


def vision_language(config: Any) -> str | None:
    """The architecture's name when `config` is a vision-language model's (a vision tower beside the language model:
    Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3, LLaVA, Idefics...), else None."""
    if getattr(config, "vision_config", None) is None:
        return None
    names = getattr(config, "architectures", None) or []
    return str(names[0]) if names else type(config).__name__.replace("Config", "")


def auto_class(config: Any):
    """The auto class whose `from_config` builds the whole candidate: AutoModelForImageTextToText for a
    vision-language model (the vision tower and projector included, as TRL builds it from the checkpoint's own
    architecture), AutoModelForCausalLM otherwise."""
    import transformers

    if vision_language(config) is not None and hasattr(transformers, "AutoModelForImageTextToText"):
        return transformers.AutoModelForImageTextToText
    return transformers.AutoModelForCausalLM


def build_twin(config: Any, *, trust_remote_code: bool = False, seed: int = TWIN_SEED):
    """Instantiate the twin on the CPU in float32 with deterministic random weights. A vision-language model has
    none yet (its processor, image inputs and nested configs are not shrunk): Unavailable, so the probes that run the
    twin say `skip` and why."""
    import torch
    from transformers import AutoModelForCausalLM

    from trl_doctor.errors import Unavailable

    arch = vision_language(config)
    if arch is not None:
        raise Unavailable(f"{arch} is a vision-language model: trl-doctor has no miniature twin for one yet (its "
                          "processor, image inputs and vision tower), so nothing ran the trainer's code on it")
    small = twin_config(config)
    for attr in ("torch_dtype", "dtype"):
        if hasattr(small, attr):
            try:
                setattr(small, attr, torch.float32)
            except Exception:
                pass
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(small, trust_remote_code=trust_remote_code)
    return model.float().eval()


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
