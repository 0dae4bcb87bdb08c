"""How much GPU memory one training process of an RL job needs: a per-component estimate from plain numbers.

`estimate(plan)` is pure arithmetic on a `Plan` (no torch, no transformers, no context), so any rule, the
smoke step or a test can call it with numbers of its own. Filling a Plan from a check is the facts layer's:
`trl_doctor.facts.memory.plan.plan_from_context(ctx)` reads the meta-device model's exact parameter count and the
resolved settings (`facts.launch.settings.settings(ctx)`: precision, dtype, batch, lengths, PEFT, vLLM), the reference
and reward models; `facts.memory.plan.from_context(ctx, gpu_total_bytes)` does both.

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
The peak is what stays resident plus the larger of the training step and the generation. Within the training
step the gradients and the activations do not add up when each optimizer step follows one micro-batch
(`gradient_accumulation_steps` 1): see `training_peak`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


GiB = 2**30
MiB = 2**20
# CUDA context, cuBLAS workspace and loaded kernels of one training process: what NVML counts for the process beyond
# torch's reserved memory. docs/gpu-verdicts.json (H100, torch 2.11+cu130, 2026-11-27): 1.27 GiB in each process that
# generated and took an optimizer step with TRL 1.16 (0.5B and 1.5B full fine-tunes), 0.5-0.76 GiB in processes
# that stopped earlier or ran transformers 4.48; it was 0.5 GiB here, from older drivers' 0.3-0.6 GiB
CUDA_CONTEXT_BYTES = 1280 * MiB
ADAPTER_BYTES = 4  # PEFT casts LoRA adapters to fp32 (autocast_adapter_dtype=True) whatever the base dtype
DEFAULT_PROMPT_LENGTH = 512  # TRL <0.28's max_prompt_length default; later TRLs do not truncate prompts
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
    logits_bytes: float = 4.0  # per logit as TRL reads them: 4 under mixed precision (fp32 outputs) or fp32 weights
    gradient_checkpointing: bool = False
    eager_attention: bool = False  # attn_implementation="eager" keeps the seq × seq attention probabilities
    generation_batch: int = 0  # sequences the trainer generates at once (no vLLM); 0: no in-trainer generation
    vllm_gpu_memory_utilization: float = 0.0  # vLLM colocate's share of each GPU's total memory
    overhead_bytes: int = 0  # the CUDA context
    gradient_accumulation_steps: int = 1  # > 1: the gradients live on through the next micro-batches' activations
    # a vision-language model's tower, when it trains: patches per sequence (before any merge), its width, blocks and
    # MLP width; 0 when there are no images or the tower is frozen (a frozen tower keeps no activations for backward)
    vision_patches: int = 0
    vision_hidden: int = 0
    vision_layers: int = 0
    vision_intermediate: int = 0
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
    # values autograd keeps per token and layer: 6·hidden + 2·kv + 4·intermediate, and in 16-bit the fp32 copy of the
    # input each of the two RMSNorms keeps (4·hidden more at 2 bytes). Measured on a CPU (Qwen2.5-0.5B's widths, SDPA,
    # bf16, the resident memory a forward adds): 62.4 kB per token and layer with transformers 4.48, 59.7 kB with
    # 5.24; this counts 57.3 kB (without the norms' copies 50.2 kB, 20% under)
    norms = 4 * p.hidden_size if p.activation_bytes == 2 else 0
    per_layer = 6 * p.hidden_size + 2 * p.kv_dim + 4 * p.intermediate_size + norms
    what = "6·hidden + 2·kv + 4·intermediate" + (" + 4·hidden: the RMSNorms' fp32 copies" if norms else "")
    if p.gradient_checkpointing:
        elems = tokens * (p.num_layers * p.hidden_size + per_layer)
        act_how = (f"{p.batch_size} × {p.seq_len} tokens × ({p.num_layers} layers × {p.hidden_size} checkpointed inputs "
                   f"+ one recomputed layer's {per_layer:,}: {what}) × {_b(p.activation_bytes)} bytes")
    else:
        elems = tokens * p.num_layers * per_layer
        act_how = (f"{p.batch_size} × {p.seq_len} tokens × {p.num_layers} layers × {per_layer:,} values "
                   f"({what}) × {_b(p.activation_bytes)} bytes")
    act = elems * p.activation_bytes
    if p.eager_attention:
        layers_kept = 1 if p.gradient_checkpointing else p.num_layers
        att = p.batch_size * p.num_heads * p.seq_len**2 * 2 * p.activation_bytes * layers_kept
        act += att
        act_how += f" + eager attention scores and probabilities {p.num_heads} heads × {p.seq_len}² per sequence"
    if p.vision_patches:
        v_tokens = p.batch_size * p.vision_patches
        v_layer = 6 * p.vision_hidden + 4 * p.vision_intermediate
        v_elems = v_tokens * (p.vision_layers * p.vision_hidden + v_layer if p.gradient_checkpointing
                              else p.vision_layers * v_layer)
        act += v_elems * p.activation_bytes
        act_how += (f" + the vision tower's {p.batch_size} × {p.vision_patches} image patches × {p.vision_layers} blocks "
                    f"× (6·{p.vision_hidden} + 4·{p.vision_intermediate}) values"
                    + (" (block inputs only, checkpointed)" if p.gradient_checkpointing else ""))
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
        # the logits, then in backward their gradient and the gradient of the slice TRL takes them from: 3.0 copies
        # at the peak, measured on a CPU on TRL 0.15's path (transformers 4.48, 151,936-token vocabulary); in the
        # dtype the model returns (fp32 under mixed precision: accelerate converts the outputs). An H200 run
        # (docs/gpu-verdicts.json): TRL 0.15's launch allocated 10.7 GiB, where 2 copies at 2 bytes counted 7.6
        add("logits", 3 * p.batch_size * positions * p.vocab_size * p.logits_bytes, "training",
            f"3 × {p.batch_size} × {positions} positions × {p.vocab_size:,} vocabulary × {_b(p.logits_bytes)} bytes "
            "(the logits, their gradient and the gradient of the slice TRL takes log-probs from"
            + (", in fp32: accelerate returns a mixed-precision model's outputs in fp32)" if p.logits_bytes == 4 and
               p.param_bytes != 4 else ")"))

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

    overlap = p.gradient_accumulation_steps > 1
    if not overlap:
        notes.append("gradient_accumulation_steps 1: the gradients are counted against the activations and logits, "
                     "not on top of them (backward frees a layer's activations as it writes its gradients)")
    return peak_estimate(comps, notes, overlap)


def training_peak(comps, gradients_overlap: bool) -> int:
    """The training step's own peak over the resident memory. Backward frees each layer's activations as it writes
    that layer's gradients, and with one micro-batch per optimizer step the Trainer frees the gradients
    (zero_grad(set_to_none=True)) before the next forward: so the peak is the larger of the activations + logits
    (the start of backward: no gradient yet) and the whole gradients (the optimizer step: activations freed), not
    their sum. Summing them overcounted a 0.5B full fine-tune by its activations (issue 22: 8.5 GiB estimated
    against 7.45 measured, a CUDA context beside it that the allocator's peak does not see). With gradient
    accumulation (or a sharding backend's persistent gradient buffers) the gradients outlive the step: the sum."""
    grads = sum(c.bytes for c in comps if c.phase == "training" and c.name == "gradients")
    rest = sum(c.bytes for c in comps if c.phase == "training" and c.name != "gradients")
    return grads + rest if gradients_overlap else max(grads, rest)


def peak_estimate(comps, notes, gradients_overlap: bool) -> Estimate:
    """The Estimate of `comps`: resident + the larger of the training step's peak and the generation."""
    resident = sum(c.bytes for c in comps if c.phase == "resident")
    training = training_peak(comps, gradients_overlap)
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
