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
    """A shrunken deep copy of a transformers config: depth and width capped, everything else kept. A
    vision-language config is shrunk part by part: its language model as any causal LM (top-level keys, as
    transformers 4 keeps them, and `text_config`), its vision tower to 2 blocks of a small width, with the sizes the
    parts must agree on (the tower's output width is the language model's, multimodal rope sections fill half the
    new head size) made to agree again."""
    small = copy.deepcopy(config)
    _shrink_text(small)
    text = getattr(small, "text_config", None)
    if text is not None and text is not small:
        _shrink_text(text)
    lm = text if text is not None else small
    vision = getattr(small, "vision_config", None)
    if vision is not None:
        _shrink_vision(vision, out_width=getattr(lm, "hidden_size", None))
        _fit_mrope(lm)
    return small


def _shrink_text(small: Any) -> None:
    keys = small.to_dict()
    if not any(k in keys for k in _LAYER_KEYS + ("hidden_size", "num_attention_heads")):
        return  # a composite config's outer layer (transformers 5's VLMs nest the language model in text_config)
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


# The vision tower's twin: 2 blocks of width 32 in 2 heads. Patch, merge and image sizes are kept, so an image
# becomes as many tokens as on the real model.
VISION_LAYERS = 2
VISION_WIDTH = 32
VISION_HEADS = 2
VISION_INTERMEDIATE = 64
_VISION_DEPTH_KEYS = ("depth", "num_hidden_layers", "num_layers")
_VISION_HEAD_KEYS = ("num_heads", "num_attention_heads")
# block indexes into the tower (Qwen2.5-VL's full-attention blocks, Qwen3-VL's deepstack taps): kept inside it
_VISION_INDEX_KEYS = ("fullatt_block_indexes", "deepstack_visual_indexes")


def _shrink_vision(vision: Any, out_width: int | None) -> None:
    keys = vision.to_dict()
    depth = VISION_LAYERS
    for key in _VISION_DEPTH_KEYS:
        if isinstance(keys.get(key), int):
            depth = min(keys[key], VISION_LAYERS)
            setattr(vision, key, depth)
    for key in _VISION_HEAD_KEYS:
        if isinstance(keys.get(key), int):
            setattr(vision, key, min(keys[key], VISION_HEADS))
    # Qwen2-VL names the tower's width embed_dim and its merger's output (the language model's width) hidden_size;
    # Qwen2.5-VL and Qwen3-VL name the width hidden_size and the output out_hidden_size; CLIP/SigLIP towers have
    # only hidden_size, which their projector maps to the language model's width itself
    width_key = "embed_dim" if isinstance(keys.get("embed_dim"), int) else "hidden_size"
    if isinstance(keys.get(width_key), int):
        setattr(vision, width_key, min(keys[width_key], VISION_WIDTH))
    if out_width is not None:
        if width_key == "embed_dim" and isinstance(keys.get("hidden_size"), int):
            vision.hidden_size = out_width
        if isinstance(keys.get("out_hidden_size"), int):
            vision.out_hidden_size = out_width
    if isinstance(keys.get("intermediate_size"), int):
        vision.intermediate_size = min(keys["intermediate_size"], VISION_INTERMEDIATE)
    if isinstance(keys.get("projection_dim"), int):
        vision.projection_dim = min(keys["projection_dim"], VISION_WIDTH)
    for key in _VISION_INDEX_KEYS:
        if isinstance(keys.get(key), list):
            setattr(vision, key, sorted({min(int(i), depth - 1) for i in keys[key]}))


def _fit_mrope(lm: Any) -> None:
    """Multimodal rope splits half of each head's rotary dimensions among time, height and width
    (`mrope_section`, summing to head_dim / 2): rescaled, in proportion, to the twin's smaller head."""
    heads = getattr(lm, "num_attention_heads", None)
    hidden = getattr(lm, "hidden_size", None)
    head_dim = getattr(lm, "head_dim", None) or (hidden // heads if heads and hidden else None)
    for attr in ("rope_parameters", "rope_scaling"):
        rope: Any = getattr(lm, attr, None)
        sections = rope.get("mrope_section") if isinstance(rope, dict) else None
        if not head_dim or not isinstance(sections, list) or not sections or sum(sections) == head_dim // 2:
            continue
        rope = dict(rope)
        rope["mrope_section"] = rescaled(sections, head_dim // 2)
        setattr(lm, attr, rope)


def rescaled(parts: list[int], total: int) -> list[int]:
    """`parts` scaled to sum to `total`, in proportion (largest remainders first; no part below 1 while it fits)."""
    whole = sum(parts)
    exact = [p * total / whole for p in parts]
    out = [max(1, int(x)) if total >= len(parts) else int(x) for x in exact]
    by_remainder = sorted(range(len(parts)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    i = 0
    while sum(out) < total:
        out[by_remainder[i % len(parts)]] += 1
        i += 1
    while sum(out) > total:
        j = max(range(len(out)), key=lambda k: out[k])
        out[j] -= 1
    return out


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
    """Instantiate the twin on the CPU in float32 with deterministic random weights, with the class that builds the
    whole candidate (a vision-language model's vision tower and projector included)."""
    import torch

    small = twin_config(config)
    for part in (small, getattr(small, "text_config", None), getattr(small, "vision_config", None)):
        if part is None:
            continue
        for attr in ("dtype",) if "dtype" in vars(part) else ("torch_dtype",):  # transformers 4 / 5
            if hasattr(part, attr):
                try:
                    setattr(part, attr, torch.float32)
                except Exception:
                    pass
    torch.manual_seed(seed)
    model = auto_class(small).from_config(small, trust_remote_code=trust_remote_code)
    return model.float().eval()


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
