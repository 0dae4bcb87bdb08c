"""precision-and-attention's words (TD015) for precision against the GPUs, once for the full rule
(rules/precision_and_attention.py) and `check --static` (static/judge.py), so a case reads the same in both.
A GPU is facts.launch's dict (index, name, compute_capability). Imports nothing."""

from __future__ import annotations

BF16_MIN_CC = (8, 0)  # bfloat16 and TF32 units: Ampere and newer


def gpu_name(g: dict) -> str:
    return f"GPU {g['index']} ({g['name']})"


def gpu_lines(gpus: list) -> list[str]:
    """The details' list of GPUs judged."""
    return [f"{gpu_name(g)}: compute capability {g['compute_capability']}" for g in gpus]


def bf16_unsupported(origin: str, g: dict) -> str:
    """bf16 on a GPU below 8.0; `origin` is " (where the value comes from)", or "" when the config sets it."""
    return (f"bf16 is on{origin} but {gpu_name(g)} has compute capability {g['compute_capability']} and bfloat16 needs "
            "8.0 (Ampere) or newer: transformers stops with \"Your setup doesn't support bf16/gpu\" or runs it emulated, "
            "many times slower; set `bf16: false` (fp32; `fp16: true` is faster but can overflow to NaN), or use an "
            "Ampere or newer GPU")


def bf16_emulated(origin: str, g: dict, why: str) -> str:
    """bf16 on a GPU below 8.0 where the installed torch and transformers let it run emulated (`why`: their reading)."""
    return (f"bf16 is on{origin} and {gpu_name(g)} has compute capability {g['compute_capability']}, below the 8.0 "
            f"(Ampere) of bfloat16 units: the installed releases train it emulated, many times slower ({why}); set "
            "`bf16: false` (fp32; `fp16: true` is faster but can overflow to NaN), or use an Ampere or newer GPU")


def tf32_unsupported(g: dict) -> str:
    return (f"tf32: true but {gpu_name(g)} has compute capability {g['compute_capability']} and TF32 needs 8.0 (Ampere) "
            "or newer: TrainingArguments stops with \"--tf32 requires Ampere or a newer GPU arch\"; set `tf32: false`")


def vllm_bf16_unsupported(g: dict, colocate: bool) -> str:
    """vLLM (colocated, else a server) asked to load a bfloat16 checkpoint on a GPU below 8.0."""
    how = ("TRL builds vLLM's LLM(...) without a dtype, so the trainer's precision settings do not reach it; save the "
           "checkpoint in float16" if colocate else "start the server with `trl vllm-serve --dtype half`")
    return (f"use_vllm: vLLM loads the checkpoint's dtype (bfloat16, config.json) and refuses {gpu_name(g)} (compute "
            f"capability {g['compute_capability']}): \"Bfloat16 is only supported on GPUs with compute capability of at "
            f"least 8.0\"; {how}")
