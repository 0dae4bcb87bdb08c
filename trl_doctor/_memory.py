"""How much GPU memory one training process of an RL job needs: a per-component estimate from plain numbers.

`estimate(plan)` is pure arithmetic on a `Plan` (no torch, no transformers), so any rule, the smoke step
or a test can call it with numbers of its own. `plan_from_context(ctx)` fills a Plan from a check context
(the meta-device model's exact parameter count, the trainer config's precision, batch, lengths, reference
and reward models, PEFT and vLLM settings); `from_context(ctx, gpu_total_bytes)` does both. Heavy imports
happen only inside the context readers.

The model of one process (no sharding):
- weights: the policy as loaded (fp32 unless a dtype is given: TRL's `model_init_kwargs` / the CLI's `dtype`),
  a frozen reference copy when `beta != 0` and there is no PEFT adapter, frozen reward models, a value model;
- training: gradients and optimizer states of what trains (all weights, or the fp32 LoRA adapters), in the
  trained parameters' dtype (the HF Trainer keeps no separate fp32 master copy: AdamW's states take the
  parameter dtype), activations for `per_device_train_batch_size` sequences of prompt + completion tokens,
  and the log-prob head: TRL 1.x's fused, tiled LM head, or the logits tensor older trainers take log-probs from;
- generation (without vLLM): the KV cache of the sequences the trainer generates at once;
- vLLM colocate: `vllm_gpu_memory_utilization` × the GPU's total memory, claimed at start-up;
- the CUDA context.
The peak is what stays resident plus the larger of the training step and the generation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

GiB = 2**30
MiB = 2**20
CUDA_CONTEXT_BYTES = 512 * MiB  # CUDA context + cuBLAS workspace of one process, measured 0.3-0.6 GiB
ADAPTER_BYTES = 4  # PEFT casts LoRA adapters to fp32 (autocast_adapter_dtype=True) whatever the base dtype
DEFAULT_PROMPT_LENGTH = 512  # TRL <0.28's max_prompt_length default; later TRLs do not truncate prompts
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float64": 8}
QUANT_BYTES = {
    # bitsandbytes: 4-bit weights plus one fp32 absmax per 64-weight block; 8-bit weights plus row scales
    "4bit": 0.5 + 4 / 64,
    "8bit": 1.0,
}

@dataclass(frozen=True)
class Plan:
    """The numbers one training process's memory depends on. Sizes are parameter counts; bytes are per parameter."""

    policy_params: int
    param_bytes: float = 4.0  # the policy's weights as loaded (4 fp32, 2 bf16/fp16)
    quantized_params: int = 0  # policy parameters stored 4/8-bit (bitsandbytes); the rest take param_bytes
    quantized_bytes: float = 0.0
    peft_params: int = 0  # LoRA adapter parameters (fp32); > 0 means only they train
    reference: bool = False  # a frozen copy of the policy (beta != 0 without PEFT)
    reward_params: tuple[int, ...] = ()  # frozen reward models
    reward_bytes: float | None = None  # per reward-model parameter; None: param_bytes
    value_params: int = 0  # a trained value model (PPO), at param_bytes
    optimizer: str = "adamw_torch"
    batch_size: int = 1  # sequences per device per micro-step
    seq_len: int = 0  # prompt + completion tokens
    logits_positions: int | None = None  # positions projected on the vocabulary per sequence; None: seq_len
    fused_lm_head: bool = False  # TRL >= 1.x's chunked log-prob head: no [batch, positions, vocab] tensor
    logits_tile: tuple[int, int] = (4096, 32768)  # (tokens, vocabulary columns) of one fused-head tile
    hidden_size: int = 0
    num_layers: int = 0
    intermediate_size: int = 0
    kv_dim: int = 0  # num_key_value_heads × head_dim
    num_heads: int = 0
    vocab_size: int = 0
    activation_bytes: float = 2.0  # 2 with bf16/fp16 (autocast or 16-bit weights), 4 in plain fp32
    gradient_checkpointing: bool = False
    eager_attention: bool = False  # attn_implementation="eager" keeps the seq × seq attention probabilities
    generation_batch: int = 0  # sequences the trainer generates at once (no vLLM); 0: no in-trainer generation
    vllm_gpu_memory_utilization: float = 0.0  # vLLM colocate's share of each GPU's total memory
    overhead_bytes: int = 0  # the CUDA context
    notes: tuple[str, ...] = ()  # how the numbers were read (assumptions), shown with the estimate
    labels: tuple[tuple[str, Any], ...] = ()  # the inputs as the user set them, for the report

    @property
    def trainable_params(self) -> int:
        return (self.peft_params if self.peft_params else self.policy_params) + self.value_params


@dataclass(frozen=True)
class Component:
    name: str
    bytes: int
    phase: str  # "resident", "training" (forward + backward) or "generation"
    how: str  # the arithmetic, in words and numbers

    @property
    def gib(self) -> float:
        return self.bytes / GiB


@dataclass(frozen=True)
class Estimate:
    components: tuple[Component, ...]
    total_bytes: int  # the peak: resident + max(training, generation)
    peak_phase: str
    assumptions: tuple[str, ...] = ()

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GiB

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def in_peak(self) -> list[Component]:
        """The components the peak adds up (resident ones plus those of the peak phase), non-zero only."""
        return [c for c in self.components if c.bytes and c.phase in ("resident", self.peak_phase)]

    def summary(self) -> str:
        """'policy weights 14.9, gradients 14.9, AdamW states 29.9, ...' in GiB."""
        return ", ".join(f"{c.name} {c.gib:.1f}" for c in self.in_peak())

    def breakdown(self) -> dict[str, str]:
        """Each component in GiB with its arithmetic, for a report's details."""
        return {c.name: f"{c.gib:.2f} GiB ({c.phase}): {c.how}" for c in self.components if c.bytes}


def optimizer_state_bytes(optimizer: str, trained_bytes: float) -> tuple[float, str]:
    """(bytes of optimizer state per trained parameter, description) for a TrainingArguments `optim` name.
    torch's optimizers keep their states in the parameters' dtype; bitsandbytes' in 8 or 32 bits."""
    name = str(getattr(optimizer, "value", optimizer)).lower()
    states = 1 if ("lion" in name or "rmsprop" in name) else 3 if "ademamix" in name else 2
    plural = "s" if states > 1 else ""
    if any(k in name for k in ("sgd", "lomo")):
        return 0.0, f"{name}: no per-parameter state counted (SGD without momentum, LOMO)"
    if "adafactor" in name:
        return 0.0, f"{name}: factored second moments (rows + columns per matrix), counted as 0"
    if "8bit" in name:
        return float(states), f"{name}: {states} 8-bit state{plural} per parameter"
    if "4bit" in name:
        return states * 0.5, f"{name}: {states} 4-bit state{plural} per parameter"
    if "32bit" in name or "bnb" in name:
        return states * 4.0, f"{name}: {states} fp32 state{plural} per parameter"
    if any(k in name for k in ("adam", "lion", "rmsprop")):
        what = "exp_avg, exp_avg_sq" if states == 2 else "momentum" if states == 1 else "three moments"
        return states * trained_bytes, f"{name}: {states} state{plural} ({what}) in the parameters' dtype"
    return 2 * trained_bytes, f"{name}: not known here, counted as AdamW (2 states in the parameters' dtype)"


def estimate(plan: Plan, gpu_total_bytes: int | None = None) -> Estimate:
    """The memory one training process needs, per component, and its peak."""
    p = plan
    notes = list(p.notes)
    comps: list[Component] = []

    def add(name: str, n: float, phase: str, how: str) -> None:
        comps.append(Component(name, int(round(n)), phase, how))

    dense = p.policy_params - p.quantized_params
    weights = dense * p.param_bytes + p.quantized_params * p.quantized_bytes
    how = f"{p.policy_params:,} parameters × {_b(p.param_bytes)} bytes"
    if p.quantized_params:
        how = (f"{dense:,} parameters × {_b(p.param_bytes)} bytes + {p.quantized_params:,} quantized × "
               f"{_b(p.quantized_bytes)} bytes")
    add("policy weights", weights, "resident", how)

    if p.peft_params:
        add("LoRA adapters", p.peft_params * ADAPTER_BYTES, "resident",
            f"{p.peft_params:,} adapter parameters × {ADAPTER_BYTES} bytes (fp32)")
    trained = [(p.peft_params, ADAPTER_BYTES) if p.peft_params else (p.policy_params, p.param_bytes)]
    if p.value_params:
        add("value model", p.value_params * p.param_bytes, "resident",
            f"{p.value_params:,} parameters × {_b(p.param_bytes)} bytes")
        trained.append((p.value_params, p.param_bytes))
    grads = sum(n * b for n, b in trained)
    opt = 0.0
    opt_how = ""
    for n, b in trained:
        per, opt_how = optimizer_state_bytes(p.optimizer, b)
        opt += n * per
    trained_n = sum(n for n, _ in trained)
    add("gradients", grads, "training",
        " + ".join(f"{n:,} trained parameters × {_b(b)} bytes" for n, b in trained))
    add(_optimizer_label(p.optimizer), opt, "resident", f"{trained_n:,} trained parameters; {opt_how}")

    if p.reference:
        add("reference model", weights, "resident", "a frozen copy of the policy weights (beta != 0, no PEFT)")
    if p.reward_params:
        rb = p.param_bytes if p.reward_bytes is None else p.reward_bytes
        add("reward models", sum(p.reward_params) * rb, "resident",
            " + ".join(f"{n:,}" for n in p.reward_params) + f" parameters × {_b(rb)} bytes")

    tokens = p.batch_size * p.seq_len
    per_layer = 6 * p.hidden_size + 2 * p.kv_dim + 4 * p.intermediate_size
    if p.gradient_checkpointing:
        elems = tokens * (p.num_layers * p.hidden_size + per_layer)
        act_how = (f"{p.batch_size} × {p.seq_len} tokens × ({p.num_layers} layers × {p.hidden_size} checkpointed inputs "
                   f"+ one recomputed layer's {per_layer:,}) × {_b(p.activation_bytes)} bytes")
    else:
        elems = tokens * p.num_layers * per_layer
        act_how = (f"{p.batch_size} × {p.seq_len} tokens × {p.num_layers} layers × {per_layer:,} values "
                   f"(6·hidden + 2·kv + 4·intermediate) × {_b(p.activation_bytes)} bytes")
    act = elems * p.activation_bytes
    if p.eager_attention:
        layers_kept = 1 if p.gradient_checkpointing else p.num_layers
        att = p.batch_size * p.num_heads * p.seq_len**2 * 2 * p.activation_bytes * layers_kept
        act += att
        act_how += f" + eager attention scores and probabilities {p.num_heads} heads × {p.seq_len}² per sequence"
    add("activations", act, "training", act_how)

    positions = p.seq_len if p.logits_positions is None else p.logits_positions
    if p.fused_lm_head:
        scored = p.batch_size * positions
        rows, cols = min(scored, p.logits_tile[0]), min(p.vocab_size, p.logits_tile[1])
        head_trains = not p.peft_params
        fused = rows * cols * p.activation_bytes + scored * p.hidden_size * 4
        how = (f"fused LM head: one {rows} × {cols} tile × {_b(p.activation_bytes)} bytes + the fp32 gradient of "
               f"{scored:,} scored tokens' hidden states ({p.hidden_size})")
        if head_trains:
            fused += p.vocab_size * p.hidden_size * 4
            how += f" + the fp32 gradient of the output layer ({p.vocab_size:,} × {p.hidden_size})"
        add("logits", fused, "training", how)
    else:
        logit_bytes = 2 * p.activation_bytes
        add("logits", p.batch_size * positions * p.vocab_size * logit_bytes, "training",
            f"{p.batch_size} × {positions} positions × {p.vocab_size:,} vocabulary × {_b(logit_bytes)} bytes "
            "(the logits and the temperature-scaled copy TRL takes log-probs from)")

    if p.generation_batch:
        add("KV cache (generation)", p.generation_batch * p.seq_len * p.num_layers * 2 * p.kv_dim * p.activation_bytes,
            "generation", f"{p.generation_batch} sequences × {p.seq_len} tokens × {p.num_layers} layers × 2 × "
            f"{p.kv_dim} (keys and values) × {_b(p.activation_bytes)} bytes")

    if p.vllm_gpu_memory_utilization:
        if gpu_total_bytes is None:
            notes.append(f"vLLM colocate claims {p.vllm_gpu_memory_utilization:g} of the GPU's memory: not counted "
                         "(no GPU size given)")
        else:
            add("vLLM share", p.vllm_gpu_memory_utilization * gpu_total_bytes, "resident",
                f"vllm_gpu_memory_utilization {p.vllm_gpu_memory_utilization:g} × {gpu_total_bytes / GiB:.1f} GiB "
                "(vLLM colocate reserves it for its weights and KV cache at start-up)")
    if p.overhead_bytes:
        add("CUDA context", p.overhead_bytes, "resident", "CUDA context and cuBLAS workspace of the process")

    resident = sum(c.bytes for c in comps if c.phase == "resident")
    training = sum(c.bytes for c in comps if c.phase == "training")
    generation = sum(c.bytes for c in comps if c.phase == "generation")
    phase = "training" if training >= generation else "generation"
    return Estimate(tuple(comps), resident + max(training, generation), phase, tuple(notes))


def _optimizer_label(optimizer: str) -> str:
    name = str(getattr(optimizer, "value", optimizer)).lower()
    if name.startswith("adamw") or name.startswith("paged_adamw"):
        return "AdamW states"
    return "optimizer states"


def _b(x: float) -> str:
    return f"{x:g}"


# -- filling a Plan from a check context ----------------------------------------------------------------

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
    from ._errors import InputError, Unavailable

    try:
        return ctx.trainer_config
    except (Unavailable, InputError):
        return None


def _field_default(trainer: str, key: str) -> Any:
    import dataclasses

    try:
        from ._trl import config_class

        classes = [config_class(trainer)]
        import trl

        classes += [getattr(trl, "ModelConfig", None), getattr(trl, "ScriptArguments", None)]
    except Exception:  # no TRL: no defaults to read
        return _MISSING
    from ._trl import field_default

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
    from ._trl import trl_root

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


def _text_config(model_config):
    return model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config


def _dims(model_config, meta_model) -> dict[str, int]:
    t = _text_config(model_config)
    hidden = int(getattr(t, "hidden_size", 0) or getattr(t, "n_embd", 0) or 0)
    heads = int(getattr(t, "num_attention_heads", 0) or getattr(t, "n_head", 0) or 1)
    kv_heads = int(getattr(t, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(t, "head_dim", None) or (hidden // heads if heads else 0))
    inter = getattr(t, "intermediate_size", None) or getattr(t, "n_inner", None) or 4 * hidden
    layers = int(getattr(t, "num_hidden_layers", 0) or getattr(t, "n_layer", 0) or 0)
    vocab = int(getattr(t, "vocab_size", 0) or 0)
    out = meta_model.get_output_embeddings() if hasattr(meta_model, "get_output_embeddings") else None
    weight = getattr(out, "weight", None)
    if weight is not None and weight.dim() == 2:
        vocab = int(weight.shape[0])
    return {"hidden_size": hidden, "num_heads": heads, "kv_dim": kv_heads * head_dim,
            "intermediate_size": int(inter), "num_layers": layers, "vocab_size": vocab}


def count_params(model) -> int:
    """Parameters of a (meta-device) model, tied weights counted once."""
    return sum(p.numel() for p in model.parameters())


def lora_adapter_params(model, r: int, targets: Any, use_dora: bool = False) -> tuple[int, list[str]]:
    """Parameters LoRA adds: r × (in + out) for each targeted linear (+ out for DoRA's magnitude), and the
    module names matched. `targets` as PEFT takes them: a list of name suffixes, a regex string, 'all-linear'."""
    linears = _linear_modules(model)
    if targets == "all-linear" or targets == ["all-linear"]:
        out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        chosen = [(n, i, o) for n, m, i, o in linears if m is not out_emb]
    elif isinstance(targets, str):
        chosen = [(n, i, o) for n, _, i, o in linears if re.fullmatch(targets, n)]
    else:
        wanted = list(targets or [])
        chosen = [(n, i, o) for n, _, i, o in linears if any(n == t or n.endswith("." + t) for t in wanted)]
    total = sum(r * (i + o) + (o if use_dora else 0) for _, i, o in chosen)
    return total, [n for n, _, _ in chosen]


def _linear_modules(model) -> list[tuple[str, Any, int, int]]:
    import torch

    found = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            found.append((name, module, module.in_features, module.out_features))
        elif type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:  # GPT-2's linear
            found.append((name, module, module.weight.shape[0], module.weight.shape[1]))
    return found


def _peft_default_targets(model_type: str) -> tuple[Any, str]:
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as mapping
    except Exception:
        return ["q_proj", "v_proj"], "peft is not importable here: assumed PEFT's usual default q_proj, v_proj"
    found = mapping.get(model_type)
    if found is None:
        return ["q_proj", "v_proj"], f"PEFT has no default target modules for {model_type!r}: assumed q_proj, v_proj"
    return list(found), f"PEFT's default target modules for {model_type}: {', '.join(found)}"


def _quantized_linear_params(model) -> int:
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return sum(m.weight.numel() for _, m, _, _ in _linear_modules(model) if m is not out_emb)


def reward_model_refs(ctx) -> list[tuple[str, Any]]:
    """(config key, local folder) of every reward / value model the config loads besides the policy."""
    from pathlib import Path

    from ._config import resolve_artifact

    cfg = ctx.config
    refs: list[tuple[str, Any]] = []
    keys = ["reward_model_name_or_path", "reward_model_path"]
    for key in keys:
        ref = cfg.get(key)
        if isinstance(ref, str) and ref:
            refs.append((key, resolve_artifact(ref, cfg.base_dir, str(cfg.path), key, need="config.json").path))
    for name in cfg.reward_funcs:  # TRL also takes a reward model's folder or hub id in reward_funcs
        folder = Path(name).expanduser()
        folder = folder if folder.is_absolute() else cfg.base_dir / folder
        if (folder / "config.json").is_file():
            refs.append(("reward_funcs", folder.resolve()))
    return refs


def seq_classifier_params(ctx, folder) -> int:
    """Exact parameters of the 1-label sequence classifier TRL builds from `folder`, on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from ._errors import InputError

    trc = ctx.options.trust_remote_code
    try:
        mcfg = AutoConfig.from_pretrained(str(folder), trust_remote_code=trc, local_files_only=True, num_labels=1)
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(mcfg, trust_remote_code=trc)
    except Exception as exc:
        raise InputError(f"{folder / 'config.json'}: cannot build it as a sequence classifier: "
                         f"{' '.join(str(exc).split())[:300]}") from None
    return count_params(model)


def logits_path(ctx, model) -> dict:
    """How the installed trainer gets log-probs, read from its source: a fused, tiled LM head (TRL 1.x:
    `fused_lm_head=True`, no logits tensor), or logits for the completion only (when the model's forward takes
    the keyword the trainer passes), or logits for the whole sequence (trl#2770)."""
    import inspect

    from ._trl import trainer_source, trl_root

    found = trainer_source(ctx.trainer) if ctx.trainer in ("grpo", "rloo") else None
    src = found[1] if found else ""
    if re.search(r"fused_lm_head\s*=\s*True", src):
        tile = [4096, 32768]
        root = trl_root()
        for i, (rel, name) in enumerate((("kernels/chunked_logprob.py", "TOKEN_CHUNK_SIZE"),
                                         ("trainer/utils.py", "_CHUNKED_LOGPROB_CHUNK_SIZE"))):
            path = root / rel if root else None
            m = re.search(rf"^{name}\s*=\s*(\d+)", path.read_text(), re.M) if path and path.is_file() else None
            if m:
                tile[i] = int(m.group(1))
        return {"fused": True, "keeps": True, "tile": tuple(tile),
                "words": f"{found[0]} scores completions through TRL's fused LM head, in {tile[0]} × {tile[1]} tiles"}
    kwarg = None
    if re.search(r"\bnum_logits_to_keep\s*=", src):
        kwarg = "num_logits_to_keep"
    elif re.search(r"""\blogits_to_keep\s*=\s*logits_to_keep|\[["']logits_to_keep["']\]\s*=""", src):
        kwarg = "logits_to_keep"
    try:
        accepted = inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):
        accepted = {}
    keeps = kwarg is not None and kwarg in accepted
    if keeps:
        words = f"the trainer passes {kwarg} and {type(model).__name__}.forward takes it: logits for the completion only"
    elif kwarg:
        words = (f"the trainer passes {kwarg} but {type(model).__name__}.forward does not take it: logits for the whole "
                 "sequence (see logits-contract)")
    else:
        words = "logits for the whole sequence"
    return {"fused": False, "keeps": keeps, "tile": (4096, 32768), "words": words}


def plan_from_context(ctx, meta_model=None) -> Plan:
    """A Plan for the config in `ctx`, with how each number was read in `notes`."""
    model = ctx.meta_model if meta_model is None else meta_model
    mcfg = ctx.model_config
    raw = ctx.config.raw
    notes: list[str] = []
    labels: list[tuple[str, Any]] = []

    params = count_params(model)
    dtype, dtype_from = policy_dtype(ctx)
    bf16, fp16 = precision(ctx)
    labels += [("policy parameters", f"{params:,} (meta-device model, exact)"),
               ("policy dtype", f"{dtype} ({dtype_from})"), ("bf16", bf16), ("fp16", fp16)]
    param_bytes = DTYPE_BYTES[dtype]

    quantized, qbytes = 0, 0.0
    for key, kind in (("load_in_4bit", "4bit"), ("load_in_8bit", "8bit")):
        if config_value(ctx, key, False):
            quantized, qbytes = _quantized_linear_params(model), QUANT_BYTES[kind]
            notes.append(f"{key}: the linear layers' {quantized:,} weights at {qbytes:g} bytes (bitsandbytes, with "
                         "block scales); embeddings, norms and the output layer at the load dtype")
            labels.append((key, True))

    peft = 0
    use_peft = bool(config_value(ctx, "use_peft", False))
    if use_peft:
        r = int(config_value(ctx, "lora_r", 16) or 16)
        targets = raw.get("lora_target_modules", _field_default(ctx.trainer, "lora_target_modules"))
        if targets is _MISSING or targets is None:
            targets, why = _peft_default_targets(getattr(mcfg, "model_type", ""))
            notes.append(why)
        peft, names = lora_adapter_params(model, r, targets, bool(config_value(ctx, "use_dora", False)))
        saved = config_value(ctx, "lora_modules_to_save", None) or []
        if isinstance(saved, str):
            saved = [saved]
        for name, module in model.named_modules():
            if any(name == s or name.endswith("." + s) for s in saved):
                peft += sum(p.numel() for p in module.parameters())
        labels += [("PEFT", f"LoRA r={r} on {len(names)} linear layers: {peft:,} trainable parameters")]
        notes.append("PEFT: LoRA adapters train in fp32 (PEFT's autocast_adapter_dtype); the base stays frozen")

    beta = config_value(ctx, "beta", 0.0)
    beta = 0.0 if beta is None else float(beta)
    reference = beta != 0.0 and not use_peft
    labels.append(("beta", beta))
    if beta != 0.0 and use_peft:
        notes.append("beta != 0 with PEFT: the reference is the base model with the adapter disabled (no copy)")
    elif beta == 0.0:
        notes.append("beta = 0: no reference model is loaded")
    if ctx.trainer == "ppo":
        reference = True  # PPO always holds a reference policy
        notes.append("PPO holds a reference copy of the policy")

    reward, value = [], 0
    for key, folder in reward_model_refs(ctx):
        n = seq_classifier_params(ctx, folder)
        reward.append(n)
        labels.append((f"reward model ({key})", f"{folder}: {n:,} parameters"))
    vref = ctx.config.get("value_model_path")
    if ctx.trainer == "ppo" and isinstance(vref, str) and vref:
        from ._config import resolve_artifact

        folder = resolve_artifact(vref, ctx.config.base_dir, str(ctx.config.path), "value_model_path", need="config.json").path
        value = seq_classifier_params(ctx, folder)
        labels.append(("value model", f"{folder}: {value:,} parameters (trained)"))

    optim = config_value(ctx, "optim", "adamw_torch")
    optimizer = str(getattr(optim, "value", optim))  # TrainingArguments holds an OptimizerNames enum
    batch = int(config_value(ctx, "per_device_train_batch_size", 8) or 8)
    completion = config_value(ctx, "max_completion_length", None)
    if completion is None:
        completion = config_value(ctx, "response_length", None)  # PPO's name
    if completion is None:
        completion = 256
        notes.append("no max_completion_length: assumed 256 completion tokens")
    prompt = config_value(ctx, "max_prompt_length", None)
    if prompt is None:
        prompt = DEFAULT_PROMPT_LENGTH
        notes.append(f"no max_prompt_length (TRL >= 0.28 does not truncate prompts): assumed {DEFAULT_PROMPT_LENGTH} "
                     "prompt tokens; long prompts need more")
    completion, prompt = int(completion), int(prompt)
    seq = prompt + completion
    dims = _dims(mcfg, model)
    head = logits_path(ctx, model)
    if head["fused"]:
        positions = completion
    else:
        positions = completion + 1 if head["keeps"] else seq

    gc = bool(config_value(ctx, "gradient_checkpointing", False))
    mixed = bf16 or fp16 or param_bytes == 2
    act_bytes = 2.0 if mixed else 4.0
    attn = model_init_kwargs(ctx).get("attn_implementation") or raw.get("attn_implementation")
    use_vllm = bool(config_value(ctx, "use_vllm", False))
    mode = config_value(ctx, "vllm_mode", None) if use_vllm else None
    share = 0.0
    if use_vllm and mode == "colocate":
        share = float(config_value(ctx, "vllm_gpu_memory_utilization", 0.3) or 0.0)
    gen = 0
    if not use_vllm:
        steps = config_value(ctx, "steps_per_generation", None) or config_value(ctx, "gradient_accumulation_steps", 1) or 1
        gen = batch * int(steps)
    labels += [("optimizer", optimizer), ("per_device_train_batch_size", batch),
               ("tokens per sequence", f"{prompt} prompt + {completion} completion"),
               ("log-probs", head["words"]),
               ("gradient_checkpointing", gc), ("use_vllm", use_vllm)]
    if use_vllm:
        labels.append(("vllm_mode", mode or "a separate GPU (TRL < 0.16)"))
    if gen:
        labels.append(("sequences generated at once", gen))
    notes += [
        "one training process per GPU, nothing sharded: DeepSpeed ZeRO and FSDP are not modelled",
        "weights, gradients and AdamW states in the trained parameters' dtype; no fp32 master copy (the HF Trainer "
        "keeps none; DeepSpeed's bf16 optimizer would add one)",
        "activations: 6·hidden + 2·kv + 4·intermediate values per token and layer (Llama-style decoder with SDPA or "
        "flash attention), layer inputs only with gradient checkpointing; allocator fragmentation not counted",
    ]
    return Plan(
        policy_params=params, param_bytes=param_bytes, quantized_params=quantized, quantized_bytes=qbytes,
        peft_params=peft, reference=reference, reward_params=tuple(reward), reward_bytes=param_bytes,
        value_params=value, optimizer=optimizer, batch_size=batch, seq_len=seq, logits_positions=positions,
        fused_lm_head=head["fused"], logits_tile=head["tile"],
        activation_bytes=act_bytes, gradient_checkpointing=gc, eager_attention=attn == "eager",
        generation_batch=gen, vllm_gpu_memory_utilization=share, overhead_bytes=CUDA_CONTEXT_BYTES,
        notes=tuple(notes), labels=tuple(labels), **dims,
    )


def from_context(ctx, gpu_total_bytes: int | None = None) -> Estimate:
    """The estimate for the config in `ctx` on a GPU of `gpu_total_bytes` (which sizes vLLM's colocate share)."""
    return estimate(plan_from_context(ctx), gpu_total_bytes)


__all__ = ["Plan", "Component", "Estimate", "estimate", "plan_from_context", "from_context", "optimizer_state_bytes",
           "config_value", "precision", "policy_dtype", "lora_adapter_params", "count_params", "GiB", "MiB",
           "CUDA_CONTEXT_BYTES"]
