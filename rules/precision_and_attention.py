"""TD015 precision-and-attention: precision, attention kernel and load dtype suit the GPUs and model.

What it does
    Compares bf16/fp16 (as TRL resolves them) with the GPUs' compute capability (NVML, --target),
    the attention implementation with the flash-attention packages and Gemma's `_supports_sdpa`, the
    load dtype with the checkpoint's and GPU memory, a recipe's keys with what the script loads.

Why is this bad?
    - bf16 below compute capability 8.0 (T4, V100; on by default in GRPO, RLOO from TRL 0.19):
      "ValueError: Your setup doesn't support bf16/gpu." or emulated, far slower; vLLM colocate:
      "Bfloat16 is only supported on GPUs with compute capability of at least 8.0".
    - flash_attention_2 (_3, _4) without its package: "ImportError: FlashAttention2 has been toggled
      on, but it cannot be used ..." (transformers 5 + `kernels`: a warn); a broken build
      ("undefined symbol"); below 8.0 (FA2) or 9.0 (FA3, FA4): "FlashAttention only supports Ampere
      GPUs or newer."; fp32: "FlashAttention only support fp16 and bf16 data type".
    - Gemma 2-4 on sdpa or flash: NaN or zero loss (transformers#32390, LlamaFactory#7755,
      Automodel#1883).
    - TRL 1.x loads float32 without a dtype, 0.x transformers' default (float32 before 5.0): 16
      bytes per parameter for a full fine-tune (8B: 120 GiB), a doubled LoRA base; fp16 weights with
      `fp16: true`: "ValueError: Attempting to unscale FP16 gradients."
    - recipe keys the script never passes on (`dtype`, `load_in_4bit`...; mini-R1): a warn.

Example
    bf16: true                          # on a Tesla T4 (compute capability 7.5)
    -> fail: bf16 is on but ... has compute capability 7.5 and bfloat16 needs 8.0 (Ampere) or newer

Fix safety
    Safe: `bf16: false` below 8.0; `attn_implementation: sdpa` for flash attention that cannot run,
    `eager` for Gemma; in `model_init_kwargs` the checkpoint's 16-bit dtype (LoRA, frozen reference)
    or float32 for fp16 weights under `fp16: true`; never over an explicit dtype.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from trl_doctor import Edit, Fix, Unavailable, fail, passed, rule, warn
from trl_doctor.facts.launch.launcher import compute_capability, launch, package_version
from trl_doctor.facts.inputs.models import config_json
from trl_doctor.facts.launch.settings import config_value, precision, settings, unapplied_model_keys
from trl_doctor.facts.trl.behaviour import bf16_default
from trl_doctor.facts.trl.installed import TRAINER_CLASS, dtype_key

FLASH = {  # version: (module, distributions that provide it, minimum compute capability, GPU family)
    2: ("flash_attn", ("flash-attn",), (8, 0), "Ampere"),
    3: ("flash_attn_interface", ("flash-attn-3",), (9, 0), "Hopper"),
    4: ("flash_attn", ("flash-attn-4",), (9, 0), "Hopper"),
}
# Gemma 2, 3 and 4 train with eager attention (docs/coverage.md: H6): their config.json model_type, or their text_config's
GEMMA_EAGER = ("gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text")
FROZEN_WASTE_GIB = 2.0  # frozen fp32 copies of a 16-bit checkpoint: warn from this much extra memory
NO_GPU_BUDGET_GIB = 80.0  # without a GPU, a full fine-tune's fp32 state is compared with one 80 GiB GPU
GiB = 2**30


# -- the words both judgments say (precision against the GPUs) -----------------------------------------------

BF16_MIN_CC = (8, 0)  # bfloat16 and TF32 units: Ampere and newer


def _name(g: dict) -> str:
    return f"GPU {g['index']} ({g['name']})"


def gpu_lines(gpus: list) -> list[str]:
    """The details' list of GPUs judged."""
    return [f"{_name(g)}: compute capability {g['compute_capability']}" for g in gpus]


def bf16_unsupported(origin: str, g: dict) -> str:
    """bf16 on a GPU below 8.0; `origin` is " (where the value comes from)", or "" when the config sets it."""
    return (f"bf16 is on{origin} but {_name(g)} has compute capability {g['compute_capability']} and bfloat16 needs "
            "8.0 (Ampere) or newer: transformers stops with \"Your setup doesn't support bf16/gpu\" or runs it emulated, "
            "many times slower; set `bf16: false` (fp32; `fp16: true` is faster but can overflow to NaN), or use an "
            "Ampere or newer GPU")


def bf16_emulated(origin: str, g: dict, why: str) -> str:
    """bf16 on a GPU below 8.0 where the installed torch and transformers let it run emulated (`why`: their reading)."""
    return (f"bf16 is on{origin} and {_name(g)} has compute capability {g['compute_capability']}, below the 8.0 "
            f"(Ampere) of bfloat16 units: the installed releases train it emulated, many times slower ({why}); set "
            "`bf16: false` (fp32; `fp16: true` is faster but can overflow to NaN), or use an Ampere or newer GPU")


def tf32_unsupported(g: dict) -> str:
    return (f"tf32: true but {_name(g)} has compute capability {g['compute_capability']} and TF32 needs 8.0 (Ampere) "
            "or newer: TrainingArguments stops with \"--tf32 requires Ampere or a newer GPU arch\"; set `tf32: false`")


def vllm_bf16_unsupported(g: dict, colocate: bool) -> str:
    """vLLM (colocated, else a server) asked to load a bfloat16 checkpoint on a GPU below 8.0."""
    how = ("TRL builds vLLM's LLM(...) without a dtype, so the trainer's precision settings do not reach it; save the "
           "checkpoint in float16" if colocate else "start the server with `trl vllm-serve --dtype half`")
    return (f"use_vllm: vLLM loads the checkpoint's dtype (bfloat16, config.json) and refuses {_name(g)} (compute "
            f"capability {g['compute_capability']}): \"Bfloat16 is only supported on GPUs with compute capability of at "
            f"least 8.0\"; {how}")


@rule(
    id="TD015",
    slug="precision-and-attention",
    title="bf16/fp16, the attention kernel and the load dtype suit the GPUs and the checkpoint",
    needs=("model_config",),
    fixable="sometimes",
    contexts=("full", "static"),
)
def check(ctx):
    raw = ctx.config.raw
    bf16, fp16 = precision(ctx)
    the_launch = launch(ctx)
    visible, gpu_reason = list(the_launch.gpus), the_launch.gpus_missing
    on_cpu = raw.get("use_cpu") is True  # as the file asks (the built config holds the doctor's stand-in)
    bf16_words = _bf16_origin(ctx)
    ckpt = _checkpoint_dtype(ctx)
    details: dict[str, Any] = {
        "bf16 / fp16": f"{bf16} / {fp16} ({bf16_words})",
        "GPUs": gpu_lines(visible) or f"none ({gpu_reason})",
        "checkpoint dtype (config.json)": ckpt or "not given",
    }
    found = _Found("", details, [])
    device_words = found.add(_device(ctx, raw, bf16, fp16, bf16_words, visible, gpu_reason, on_cpu, ckpt))
    try:
        attn_words = found.add(_attention(ctx, raw, visible, on_cpu))
        # no bf16 weights are proposed for a GPU that cannot run bf16
        bf16_runs = not (visible and not on_cpu and min(compute_capability(g) for g in visible) < BF16_MIN_CC)
        dtype_words = found.add(_dtype(ctx, raw, bf16 and bf16_runs, fp16, ckpt, visible))
        quant_words = found.add(_quantization(ctx, raw, on_cpu))
        found.add(_unapplied(ctx))
    except Unavailable as why:  # the model as transformers loads it is not here (--static): the precision alone
        yield from _precision_only(found, device_words, visible, gpu_reason, why, details)
        return
    if not found.findings:
        yield passed("; ".join(w for w in (device_words, attn_words, dtype_words, quant_words) if w), **details)
        return
    for status, message, fix in found.findings:
        yield (fail if status == "fail" else warn)(message, fix=fix, **details)


@dataclass
class _Found:
    """What one part of the check found: its words for the pass message ("" once it has a finding), its details,
    its findings as (status, message, fix)."""

    words: str
    details: dict[str, Any]
    findings: list[tuple[str, str, Fix | None]]

    def add(self, part: "_Found") -> str:
        """`part`'s details and findings added after these (in the order they were found); its words."""
        self.details.update(part.details)
        self.findings += part.findings
        return part.words


# -- what the launch asks for and the model never gets -------------------------------------------------------

def _unapplied(ctx) -> _Found:
    """A recipe's (or command line's) ModelConfig loading keys that the script never hands to the model."""
    details: dict[str, Any] = {}
    findings: list[tuple[str, str, Fix | None]] = []
    missing = unapplied_model_keys(ctx)
    if not missing:
        return _Found("", details, findings)
    resolved = settings(ctx)
    kwargs = resolved.model_init_kwargs
    asked = " and ".join(f"`{k}: {v}`" for k, (v, _) in missing.items())
    where = sorted({w for _, w in missing.values()})
    them = "it" if len(missing) == 1 else "them"
    how = (f"the script loads the model itself without {them}" if ctx.live.model is not None else
           f"the script gives {TRAINER_CLASS[ctx.trainer]} the model's name and "
           + (f"model_init_kwargs {kwargs}" if kwargs else "no `model_init_kwargs`") + ", which is all it loads with")
    gets = []
    if "attn_implementation" in missing:
        gets.append(f"attention {kwargs['attn_implementation']}" if kwargs.get("attn_implementation") else
                    "transformers' default attention (sdpa where the model supports it)")
    if "dtype" in missing or "torch_dtype" in missing:
        gets.append(f"weights in {resolved.policy_dtype} ({resolved.policy_dtype_from})")
    if "load_in_4bit" in missing or "load_in_8bit" in missing:
        gets.append("no quantization (the weights load unquantized)")
    wanted = {k: v for k, (v, _) in missing.items() if k not in ("load_in_4bit", "load_in_8bit")}
    quant = len(wanted) < len(missing)
    if ctx.live.model is not None:
        remedy = (f"pass {them} to the script's from_pretrained (" + ", ".join(f"{k}=model_args.{k}" for k in wanted)
                  + (", quantization_config=get_quantization_config(model_args)" if quant else "") + ")")
    else:
        remedy = (f"set `training_args.model_init_kwargs = {wanted}` before building the trainer"
                  + (", with a BitsAndBytesConfig as its quantization_config" if quant else ""))
    details["ModelConfig keys that do not reach the model"] = {k: f"{v} ({w})" for k, (v, w) in missing.items()}
    findings.append(("warn", (
        f"{' and '.join(where)} sets {asked} for TRL's ModelConfig, but {'it never reaches' if them == 'it' else 'they never reach'} "
        f"the model: {how}, so the policy loads with {', '.join(gets)}; {remedy}, or drop {them} from "
        f"{' and '.join(where)}"), None))
    return _Found("", details, findings)


# -- precision against the device -------------------------------------------------------------------------

def _device(ctx, raw, bf16, fp16, bf16_words, visible, gpu_reason, on_cpu, ckpt) -> _Found:
    details: dict[str, Any] = {}
    findings: list[tuple[str, str, Fix | None]] = []
    if bf16 and fp16:
        findings.append(("fail", "bf16 and fp16 are both on: transformers stops with \"At most one of fp16 and bf16 can "
                                 "be True, but not both\"; keep one (`bf16: false` or `fp16: false`)", None))
        return _Found("", details, findings)
    mode = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    if on_cpu:
        return _Found(
            f"use_cpu: true: {mode} on the CPU" + (" (fp16 mixed precision is not applied there)" if fp16 else ""), details, findings)
    if not visible:  # not the launch machine: its GPUs decide (--target), never a verdict from this one
        return _Found(f"{mode} ({bf16_words}); no GPU here to check it against ({gpu_reason}): pass --target (e.g. "
                      "--target 8xH100-80GB) to check against the launch machine", details, findings)
    lowest = min(visible, key=compute_capability)
    use_vllm = bool(config_value(ctx, "use_vllm", False))
    if bf16 and compute_capability(lowest) < BF16_MIN_CC:
        where = "" if raw.get("bf16") is True else f" ({bf16_words})"  # the file's own words: set there or not
        fix = Fix(f"set bf16: false in {ctx.config.path.name} (train in fp32 on {lowest['name']})",
                  (Edit(str(ctx.config.path), set=(("bf16", False),)),))
        emulated = bf16_below_ampere()
        if emulated.runs:
            findings.append(("warn", bf16_emulated(where, lowest, emulated.why), fix))
        else:
            findings.append(("fail", bf16_unsupported(where, lowest), fix))
    if raw.get("tf32") is True and compute_capability(lowest) < BF16_MIN_CC:  # as the file asks (the built config holds the doctor's stand-in)
        fix = Fix(f"set tf32: false in {ctx.config.path.name} ({lowest['name']} has no TF32 units)",
                  (Edit(str(ctx.config.path), set=(("tf32", False),)),))
        findings.append(("fail", tf32_unsupported(lowest), fix))
    if use_vllm and ckpt == "bfloat16" and compute_capability(lowest) < BF16_MIN_CC:
        mode_v = str(config_value(ctx, "vllm_mode") or "server")
        findings.append(("fail" if mode_v == "colocate" else "warn",
                         vllm_bf16_unsupported(lowest, mode_v == "colocate"), None))
    if bf16:
        return _Found(
            f"bf16 ({bf16_words}) on GPUs of compute capability {lowest['compute_capability']} or more (8.0 needed)", details, findings)
    return _Found(f"{mode} on {len(visible)} GPU{'s' if len(visible) != 1 else ''}", details, findings)


def _precision_only(found, device_words, visible, gpu_reason, why, details):
    """What the precision settings alone decide against the GPUs, the rest named as left to the full check."""
    if found.findings:
        for status, message, fix in found.findings:
            yield (fail if status == "fail" else warn)(message, fix=fix, **details)
        return
    if not visible:
        raise Unavailable(f"no GPU here to check precision against ({gpu_reason}): pass --target (e.g. "
                          f"--target 1xA10G); {why}")
    yield passed(f"{device_words}; the attention kernel and the load dtype are judged in the full check ({why})",
                 **details)


def _bf16_origin(ctx) -> str:
    """Where bf16's value comes from: the config, or the judged TRL's config class's default."""
    raw = ctx.config.raw
    if "bf16" in raw:
        return f"`bf16: {str(raw['bf16']).lower()}` in the config"  # where the value comes from: the file
    found = bf16_default(ctx)
    if found is None:
        return "bf16 not set"
    name, default, post_init, whose = found
    if default is None and post_init:
        return f"{whose}'s default: {name}.bf16 is None, which its __post_init__ makes `not fp16`"
    return f"{whose}'s default: {name}.bf16 = {default}"


# -- attention --------------------------------------------------------------------------------------------

def _attention(ctx, raw, visible, on_cpu) -> _Found:
    found = _Found("", {}, [])
    kwargs = settings(ctx).model_init_kwargs
    if kwargs.get("attn_implementation"):
        attn, where = kwargs["attn_implementation"], "model_init_kwargs"
    elif raw.get("attn_implementation"):  # which key of the file chose it: the fix writes there
        attn, where = raw["attn_implementation"], "attn_implementation"
    else:
        cfg_json = ctx.read_json(ctx.model_file("config.json")) or {}
        attn = cfg_json.get("attn_implementation") or cfg_json.get("_attn_implementation")
        where = "config.json"
    gemma = _gemma_type(ctx)
    if attn:
        attn = str(attn)
        found.details["attn_implementation"] = f"{attn} ({where})"
        words = found.add(_flash(ctx, raw, attn, where, kwargs, visible, on_cpu, gemma))
    else:
        words = "attention: transformers' default (sdpa where the model supports it)"
    if gemma:
        gemma_words = found.add(_gemma(ctx, raw, attn, where, kwargs, gemma))
        words = gemma_words if not attn else "; ".join(w for w in (words, gemma_words) if w)
    return _Found(words, found.details, found.findings)


def _flash(ctx, raw, attn, where, kwargs, visible, on_cpu, gemma) -> _Found:
    details: dict[str, Any] = {}
    findings: list[tuple[str, str, Fix | None]] = []
    m = re.fullmatch(r"(?:paged\|)?flash_attention_(\d)", attn)
    if m is None or int(m.group(1)) not in FLASH:
        return _Found(f"attention: {attn}", details, findings)
    version = int(m.group(1))
    module, dists, need_cc, family = FLASH[version]
    installed = _flash_installed(module, dists)
    details["flash attention package"] = installed or f"not installed ({' or '.join(dists)}, module {module})"
    # for Gemma the way out is eager, not sdpa: the Gemma finding carries that fix
    fix = None if gemma else _sdpa_fix(ctx, raw, where, kwargs)
    alt = "eager" if gemma else "sdpa"
    name = f"FlashAttention{version}"
    if launch(ctx).software_here:
        problem, import_error = _flash_package_problem(ctx, attn, where, module, dists, name, alt, installed)
        details.update(import_error)
        if problem is not None:
            findings.append((*problem, fix))
            return _Found("", details, findings)
    else:
        # installed or not on the launch machine is that machine's business: judged there (a GPU here, or --target in
        # this environment) only; the GPUs and the dtype are still judged
        details["flash attention package"] += f": not judged ({launch(ctx).not_judged})"
        installed = "its package not judged here"
    if on_cpu:
        findings.append(("fail", f"{where}: {attn} with use_cpu: true: {name} runs only on a CUDA GPU; use "
                                 f"`attn_implementation: {alt}`", fix))
        return _Found("", details, findings)
    if not visible:
        return _Found(f"attention: {attn} (no GPU here to check it against: pass --target)", details, findings)
    old = [g for g in visible if compute_capability(g) < need_cc]
    if old:
        g = old[0]
        findings.append(("fail", (
            f"{where}: {attn}, but {_name(g)} has compute capability {g['compute_capability']} and {name} needs "
            f"{need_cc[0]}.{need_cc[1]} ({family}) or newer: the first forward stops (\"FlashAttention only supports "
            f"{family} GPUs or newer\"); use `attn_implementation: {alt}` on this GPU"), fix))
        return _Found("", details, findings)
    dtype_problem = _flash_dtype_problem(ctx, attn, where, name, alt)
    if dtype_problem is not None:
        findings.append((*dtype_problem, fix))
        return _Found("", details, findings)
    return _Found(
        f"{name} ({installed}) on compute capability {min(visible, key=compute_capability)['compute_capability']}", details, findings)


def _flash_package_problem(ctx, attn, where, module, dists, name, alt, installed) -> tuple[tuple[str, str] | None, dict]:
    """(('fail' / 'warn', message) when the flash-attention package of this environment cannot serve the load, else
    None; the details: the import's error): not installed (unless transformers falls back to a Hub kernel: a
    warning), or installed but failing to import (a wheel built for another torch or CUDA: "undefined symbol")."""
    if not installed:
        fallback = _kernels_fallback()
        if fallback:
            return ("warn", (
                f"{where}: {attn}, but {dists[0]} is not installed: transformers {ctx.version('transformers')} falls back "
                f"to the Hub kernel {fallback} through the kernels package, which needs the Hub (or a cached kernel) at "
                f"model loading; install {dists[0]}, or use `attn_implementation: {alt}`")), {}
        return ("fail", (
            f"{where}: {attn}, but the package {dists[0]} (module {module}) is not installed: model loading stops "
            f"with \"ImportError: {name} has been toggled on, but it cannot be used due to the following error: "
            f"the package ... is not installed\"; install {dists[0]} (a wheel built for this torch and CUDA), or "
            f"use `attn_implementation: {alt}`")), {}
    error = _import_error(module)
    if error is None:
        return None, {}
    return ("fail", (
        f"{where}: {attn}, but {installed} does not import against torch {ctx.version('torch')} here ({error}): model "
        f"loading stops with \"ImportError: {name} has been toggled on, but it cannot be used\"; reinstall "
        f"{dists[0]} built for this torch and CUDA (`pip install {dists[0]} --no-build-isolation` rebuilds it), or "
        f"use `attn_implementation: {alt}`")), {"flash attention import": error}


IMPORT_TIMEOUT_S = 120  # the import of flash_attn imports torch: seconds, not minutes


def _import_error(module: str) -> str | None:
    """The error importing `module` raises here (its last line), or None when it imports. In a subprocess of this
    Python and environment: a compiled extension built for another torch fails at import with an undefined
    symbol, which find_spec and the metadata cannot see, and a broken one must not take the check down."""
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"`import {module}` did not finish in {IMPORT_TIMEOUT_S}s"
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    return (lines[-1] if lines else f"`import {module}` exited with status {proc.returncode}")[:400]


def _flash_dtype_problem(ctx, attn, where, name, alt) -> tuple[str, str] | None:
    """('fail', message) when the weights load in fp32 and nothing autocasts (neither bf16 nor fp16): flash
    attention takes fp16/bf16 only, and transformers casts fp32 queries to the autocast dtype when there is one,
    else to the linear layers' dtype (transformers/integrations/flash_attention.py get_target_dtype): fp32 here.
    Under bf16/fp16 accelerate wraps the model's forward in autocast, so fp32 weights reach the kernel in 16 bits."""
    resolved = settings(ctx)
    if resolved.policy_dtype in HALF_DTYPES or resolved.bf16 or resolved.fp16:
        return None
    return "fail", (
        f"{where}: {attn} with the policy loaded in {resolved.policy_dtype} ({resolved.policy_dtype_from}) and neither "
        f"bf16 nor fp16 on: {name} takes fp16 or bf16 tensors only, and nothing autocasts the fp32 ones: the first "
        "forward stops (\"RuntimeError: FlashAttention only support fp16 and bf16 data type\"); turn `bf16: true` on, "
        f"load the weights in bf16 (`model_init_kwargs: {{dtype: bfloat16}}`), or use `attn_implementation: {alt}`")


HALF_DTYPES = ("bfloat16", "float16", "half")


def _bnb_bits(ctx) -> str | None:
    """"4bit" / "8bit" when the policy loads bitsandbytes-quantized: `load_in_*` in model_init_kwargs, in its
    `quantization_config` (a recipe's mapping, or the object a script built, as settings turns it into one), or as
    TRL's ModelConfig keys."""
    kwargs = settings(ctx).model_init_kwargs
    quant = kwargs.get("quantization_config") if isinstance(kwargs.get("quantization_config"), dict) else {}
    return next((b for b in ("4bit", "8bit") if quant.get(f"load_in_{b}") or kwargs.get(f"load_in_{b}")
                 or config_value(ctx, f"load_in_{b}", False) is True), None)


def _quantization(ctx, raw, on_cpu) -> _Found:
    """bitsandbytes loading (`quantization_config` with quant_method bitsandbytes, `load_in_4bit` / `load_in_8bit`
    in model_init_kwargs or as TRL's ModelConfig keys) needs the bitsandbytes package and a GPU at model loading."""
    details: dict[str, Any] = {}
    findings: list[tuple[str, str, Fix | None]] = []
    kwargs = settings(ctx).model_init_kwargs
    quant = kwargs.get("quantization_config") if isinstance(kwargs.get("quantization_config"), dict) else {}
    bits = _bnb_bits(ctx)
    if bits is None and str(quant.get("quant_method", "")).lower() != "bitsandbytes":
        return _Found("", details, findings)
    what = f"bitsandbytes {bits or ''} loading".replace("  ", " ")
    have = package_version("bitsandbytes")
    details["quantization"] = f"{what}; bitsandbytes {have or 'not installed'}"
    if on_cpu:
        findings.append(("fail", f"{what} with use_cpu: true: bitsandbytes quantized weights train on a CUDA GPU; "
                                 "drop the quantization or use_cpu", None))
        return _Found("", details, findings)
    if have is None:
        if not launch(ctx).software_here:
            details["quantization"] += f": not judged ({launch(ctx).not_judged})"
            return _Found(f"{what} (bitsandbytes not installed here: the launch machine needs it)", details, findings)
        findings.append(("fail", (f"{what} is asked for but the bitsandbytes package is not installed: model loading "
                                  "stops (\"Using `bitsandbytes` 4-bit quantization requires bitsandbytes\"); pip install "
                                  "bitsandbytes, or load the model unquantized"), None))
        return _Found("", details, findings)
    return _Found(f"{what} (bitsandbytes {have})", details, findings)


def _gemma_type(ctx) -> str | None:
    """config.json's model_type (or its text_config's) when it is a Gemma that must train with eager attention."""
    from trl_doctor.facts.inputs.models import model_types

    return next((t for t in model_types(ctx) if t in GEMMA_EAGER), None)


def _gemma(ctx, raw, attn, where, kwargs, model_type) -> _Found:
    """Gemma 2/3/4 with an attention other than eager: what the installed transformers does with it (refuses sdpa,
    warns while training, or says nothing) and the NaN / zero-loss reports (transformers#32390, LlamaFactory#7755)."""
    details: dict[str, Any] = {}
    findings: list[tuple[str, str, Fix | None]] = []
    from trl_doctor.facts.inputs.models import config_json

    tf = ctx.version("transformers")
    cls, source = model_class_source(ctx)
    if attn:
        effective, origin = attn, f"{where}: {attn}"
    else:
        effective, cls_name = default_attention(ctx)
        if effective is None:
            return _Found(
                f"{model_type}: transformers {tf} cannot build it here to read its default attention ({cls_name})", details, findings)
        origin = f"no attn_implementation set: transformers {tf}'s default for {cls_name} is {effective}"
    details["Gemma attention"] = f"{model_type}, {origin}"
    if effective.split("|")[-1] == "eager":
        return _Found(f"{model_type} with eager attention ({origin})", details, findings)
    cls_name = cls.__name__ if cls is not None else f"the {model_type} model"
    fix = _attn_fix(ctx, raw, where if attn else None, kwargs, "eager")
    cfg = config_json(ctx)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    softcap = text.get("attn_logit_softcapping", cfg.get("attn_logit_softcapping"))
    if attn and effective.split("|")[-1] == "sdpa" and cls is not None and getattr(cls, "_supports_sdpa", True) is False:
        findings.append(("fail", (
            f"{origin}, but transformers {tf}'s {cls_name} has no sdpa path (`_supports_sdpa = False`: sdpa cannot "
            f"soft-cap the attention logits{f', attn_logit_softcapping={softcap}' if softcap else ''}): from_pretrained "
            f"stops with \"{cls_name} does not support an attention implementation through "
            f"torch.nn.functional.scaled_dot_product_attention yet\"; use `attn_implementation: eager`"), fix))
        return _Found("", details, findings)
    warned = re.search(r"strongly recommended to train \w+ models with the `?eager`? attention", source or "")
    why = (f"it soft-caps its attention logits (attn_logit_softcapping={softcap}), and eager is the path that "
           "computes them as trained" if softcap else
           f"its attention under {effective} is reported to diverge from eager in training")
    said = (f"; transformers {tf} itself warns in training: \"It is strongly recommended to train {cls_name.replace('ForCausalLM', '').replace('ForConditionalGeneration', '')} "
            "models with the `eager` attention implementation\"" if warned else "")
    findings.append(("warn", (
        f"{model_type} trains with {effective} attention ({origin}): {why}, and Gemma runs with sdpa or flash attention "
        f"are reported to reach NaN or zero loss (transformers#32390, LlamaFactory#7755){said}; train Gemma with "
        "`attn_implementation: eager`"), fix))
    return _Found("", details, findings)


def _attn_fix(ctx, raw, where: str | None, kwargs: dict, value: str) -> Fix | None:
    """Write `attn_implementation: value` where the config chose it (the top-level key, or model_init_kwargs), or into
    model_init_kwargs when nothing chose it (config.json's choice or transformers' default)."""
    path, name = str(ctx.config.path), ctx.config.path.name
    if where == "attn_implementation":
        return Fix(f"set attn_implementation: {value} in {name}", (Edit(path, set=(("attn_implementation", value),)),))
    current = raw.get("model_init_kwargs")  # the file's value, which the fix rewrites
    if current is not None and not isinstance(current, dict):
        return None  # a JSON string: left to the user
    new = dict(current or {})
    new["attn_implementation"] = value
    return Fix(f"set model_init_kwargs.attn_implementation: {value} in {name}",
               (Edit(path, set=(("model_init_kwargs", new),)),))


def _flash_installed(module: str, dists: tuple) -> str | None:
    import importlib.util

    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    for dist in dists:
        version = package_version(dist)
        if version:
            return f"{dist} {version}"
    return None


def _kernels_fallback() -> str | None:
    """The Hub kernel transformers uses when flash_attn is missing and `kernels` is installed, read from its source."""
    import importlib.util
    from pathlib import Path

    if package_version("kernels") is None:
        return None
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    try:
        modeling = (root / "modeling_utils.py").read_text(encoding="utf-8")
        if "FLASH_ATTN_KERNEL_FALLBACK[" not in modeling:
            return None
        m = re.search(r"\"flash_attention_2\"\s*:\s*\"([^\"]+)\"", (root / "modeling_flash_attention_utils.py").read_text())
    except OSError:
        return None
    return m.group(1) if m else "a kernels-community flash-attention kernel"


def _sdpa_fix(ctx, raw, where: str, kwargs: dict) -> Fix | None:
    path = str(ctx.config.path)
    if where == "attn_implementation":
        return Fix(f"set attn_implementation: sdpa in {ctx.config.path.name}", (Edit(path, set=(("attn_implementation", "sdpa"),)),))
    if where == "model_init_kwargs" and isinstance(raw.get("model_init_kwargs"), dict):  # the file's, rewritten
        new = dict(raw["model_init_kwargs"])
        new["attn_implementation"] = "sdpa"
        return Fix(f"set attn_implementation: sdpa in model_init_kwargs of {ctx.config.path.name}",
                   (Edit(path, set=(("model_init_kwargs", new),)),))
    return None


# -- the load dtype against the checkpoint ----------------------------------------------------------------

def _checkpoint_dtype(ctx) -> str | None:
    cfg = config_json(ctx)
    found = cfg.get("dtype") or cfg.get("torch_dtype")
    if found is None and isinstance(cfg.get("text_config"), dict):
        found = cfg["text_config"].get("dtype") or cfg["text_config"].get("torch_dtype")
    return str(found).replace("torch.", "") if found else None


def _dtype(ctx, raw, bf16, fp16, ckpt, visible) -> _Found:
    details: dict[str, Any] = {}
    findings: list[tuple[str, str, Fix | None]] = []
    resolved = settings(ctx)
    load, load_from = resolved.policy_dtype, resolved.policy_dtype_from
    details["load dtype"] = f"{load} ({load_from})"
    if any(config_value(ctx, k, False) for k in ("load_in_4bit", "load_in_8bit")) or _bnb_bits(ctx):
        return _Found(f"weights load quantized ({load} for the rest)", details, findings)
    explicit = bool(_explicit_dtype(raw, resolved.model_init_kwargs))
    use_peft = bool(config_value(ctx, "use_peft", False))
    beta = config_value(ctx, "beta", 0.0)
    reference = ctx.trainer == "ppo" or (beta not in (None, 0, 0.0) and not use_peft)

    if load == "float16" and fp16 and not use_peft:
        fix = _dtype_fix(ctx, raw, "float32", override=True)
        findings.append(("fail", (
            f"the weights load in float16 ({load_from}) and fp16: true trains them in place: the first optimizer step "
            "stops with \"ValueError: Attempting to unscale FP16 gradients.\" (the gradient scaler needs fp32 "
            f"parameters); load them in float32 (`model_init_kwargs: {{{dtype_key(ctx.trainer)}: float32}}`, fp16 autocast keeps "
            "the speed), "
            "or train LoRA adapters"), fix))
        return _Found("", details, findings)
    if ckpt not in ("bfloat16", "float16") or load != "float32" or explicit:
        if ckpt and load != ckpt:
            return _Found(f"weights load as {load} ({load_from}), checkpoint {ckpt}", details, findings)
        return _Found(f"weights load as {load}" + (f" (checkpoint {ckpt})" if ckpt else ""), details, findings)
    params = _params(ctx)
    if params is None:
        return _Found(f"weights load as float32 ({load_from}), checkpoint {ckpt}", details, findings)
    gib32, gib16 = params * 4 / GiB, params * 2 / GiB
    details["policy parameters"] = f"{params:,} (meta-device model)"
    details["weights"] = f"{gib32:.1f} GiB in float32, {gib16:.1f} GiB in {ckpt}"
    frozen = (params if use_peft else 0) + (params if reference else 0)
    waste = frozen * 2 / GiB
    if frozen and waste >= FROZEN_WASTE_GIB:
        what = " and ".join(w for w, on in (("the LoRA base (frozen: only the adapters train)", use_peft),
                                            ("the frozen reference copy", reference)) if on)
        matches = (ckpt == "bfloat16" and bf16) or (ckpt == "float16" and fp16)
        fix = _dtype_fix(ctx, raw, ckpt) if matches else None
        findings.append(("warn", (
            f"the {ckpt} checkpoint loads in float32 ({load_from}): {what} take{'s' if frozen == params else ''} "
            f"{frozen * 4 / GiB:.1f} GiB instead of {frozen * 2 / GiB:.1f} GiB ({params:,} parameters), {waste:.1f} GiB "
            f"for no gain in precision; load it in {ckpt} (`model_init_kwargs: {{{dtype_key(ctx.trainer)}: {ckpt}}}`)"), fix))
        return _Found("", details, findings)
    if use_peft:
        return _Found(
            f"weights load as float32 ({load_from}), checkpoint {ckpt}: {waste:.1f} GiB more for the frozen base", details, findings)
    sharded = [k for k in ("deepspeed", "fsdp") if raw.get(k)]  # as the file asks (the built config holds the doctor's stand-in) (deepspeed)
    state32, state16 = params * 16 / GiB, params * 8 / GiB
    budget = min((g["memory_total_bytes"] for g in visible), default=NO_GPU_BUDGET_GIB * GiB) / GiB
    budget_words = (f"{_name(min(visible, key=lambda g: g['memory_total_bytes']))}'s {budget:.1f} GiB" if visible
                    else f"one {NO_GPU_BUDGET_GIB:.0f} GiB GPU (there is no GPU here)")
    details["full fine-tune state"] = (f"weights, gradients and AdamW's 2 states: {state32:.1f} GiB in float32 (16 bytes "
                                       f"per parameter), {state16:.1f} GiB in {ckpt} (8 bytes)")
    if not sharded and state32 > budget:
        findings.append(("warn", (
            f"the {ckpt} checkpoint loads in float32 ({load_from}): weights, gradients and AdamW's two states of the "
            f"{params:,} parameters take {state32:.1f} GiB, more than {budget_words}, before any activation "
            f"({state16:.1f} GiB in {ckpt}); load in {ckpt} (`model_init_kwargs: {{{dtype_key(ctx.trainer)}: {ckpt}}}`, no fp32 master "
            "weights), train LoRA adapters (`use_peft: true`), or shard with ZeRO-3 / FSDP"), None))
        return _Found("", details, findings)
    return _Found(
        f"weights load as float32 ({load_from}), checkpoint {ckpt}: fp32 master weights for a full fine-tune, "
        f"{state32:.1f} GiB of weights, gradients and AdamW states", details, findings)


def _explicit_dtype(raw: dict, kwargs: dict) -> str | None:
    for mapping in (kwargs, raw):
        for key in ("dtype", "torch_dtype"):
            if mapping.get(key) not in (None, "auto"):
                return str(mapping[key]).replace("torch.", "")
    return None


def _params(ctx) -> int | None:
    from trl_doctor import InputError, Unavailable
    from trl_doctor.facts.memory.plan import count_params

    try:
        return count_params(ctx.meta_model)
    except (InputError, Unavailable):
        return None
    except Exception:  # a model transformers cannot build on the meta device: the GiB figures are left out
        return None


def _dtype_fix(ctx, raw, dtype: str, override: bool = False) -> Fix | None:
    """Write `dtype` where the load dtype is decided: into model_init_kwargs, or over an explicit key when
    `override` (only for a choice that cannot train)."""
    current = raw.get("model_init_kwargs")  # the file's value, which the fix rewrites
    if current is not None and not isinstance(current, dict):
        return None  # a JSON string: left to the user
    path, name = str(ctx.config.path), ctx.config.path.name
    for key in ("dtype", "torch_dtype"):
        if (current or {}).get(key) not in (None, "auto"):
            if not override:
                return None  # the dtype was chosen explicitly
            new = dict(current)
            new[key] = dtype
            return Fix(f"set model_init_kwargs.{key}: {dtype} in {name}", (Edit(path, set=(("model_init_kwargs", new),)),))
    for key in ("dtype", "torch_dtype"):
        if raw.get(key) not in (None, "auto"):
            if not override:
                return None
            return Fix(f"set {key}: {dtype} in {name}", (Edit(path, set=((key, dtype),)),))
    key = dtype_key(ctx.trainer)
    new = dict(current or {})
    new[key] = dtype
    return Fix(f"set model_init_kwargs.{key}: {dtype} in {name}", (Edit(path, set=(("model_init_kwargs", new),)),))


# -- bf16 below Ampere, as the installed torch and transformers decide it ----------------------------------------------
# Whether bf16 training runs on a GPU below compute capability 8.0 (T4, V100), read from torch's and transformers'
# source files as text (no import: the static judgment asks it too).
#
# transformers' TrainingArguments refuses bf16 on a GPU unless `is_torch_bf16_gpu_available()`; from 4.x on that is
# `torch.cuda.is_bf16_supported()`. torch's answer changed: up to 2.0 it needed compute capability 8.0; from 2.1 it
# falls back to creating a bfloat16 tensor on the device (`_check_bf16_tensor_supported`), which works on older GPUs,
# and from 2.3 that fallback is the default of `including_emulation=True`. Where both say yes, bf16 trains, emulated
# and far slower (a warning); where either refuses, the job stops with "Your setup doesn't support bf16/gpu" (a fail).

@dataclass(frozen=True)
class Bf16BelowAmpere:
    runs: bool | None  # True: emulated; False: refused; None: the sources could not be read
    why: str  # the evidence, with the files and functions read


@lru_cache(maxsize=None)
def bf16_below_ampere() -> Bf16BelowAmpere:
    torch_says = _torch_emulates()
    transformers_says = _transformers_delegates()
    if torch_says is None or transformers_says is None:
        return Bf16BelowAmpere(None, "the installed torch / transformers sources could not be read")
    emulates, torch_why = torch_says
    delegates, tf_why = transformers_says
    return Bf16BelowAmpere(emulates and delegates, f"{tf_why}; {torch_why}")


def _function(text: str, name: str) -> str | None:
    """The source of the top-level function `name` in `text` (to the next top-level statement)."""
    m = re.search(rf"^def {name}\(.*?(?=^\S)", text + "\n_end_", re.S | re.M)
    return m.group(0) if m else None


def _read(package: str, rel: str) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / rel
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _torch_emulates(text: str | None = None) -> tuple[bool, str] | None:
    """(emulates, words) from torch/cuda/__init__.py's `is_bf16_supported` (`text`: that file; default: the installed)."""
    body = _function(text if text is not None else _read("torch", "cuda/__init__.py") or "", "is_bf16_supported")
    if body is None:
        return None
    header = body.split("\n", 1)[0]  # the signature line
    falls_back = "_check_bf16_tensor_supported" in body
    if "including_emulation" in header:
        default_on = re.search(r"including_emulation\s*:\s*bool\s*=\s*True|including_emulation\s*=\s*True", header)
        emulates = falls_back and default_on is not None
    else:
        emulates = falls_back
    how = ("counts an emulated bfloat16 (it creates a bfloat16 tensor on the device when the compute capability is "
           "below 8.0)" if emulates else "requires compute capability 8.0")
    return emulates, f"torch's cuda.is_bf16_supported() {how}"


def _transformers_delegates() -> tuple[bool, str] | None:
    body = _function(_read("transformers", "utils/import_utils.py") or "", "is_torch_bf16_gpu_available")
    if body is None:
        return None
    cuda = body.split("if is_torch_xpu_available", 1)[0]
    delegates = "is_bf16_supported()" in cuda and "including_emulation=False" not in cuda
    how = ("asks torch.cuda.is_bf16_supported()" if delegates else
           "checks the compute capability itself")
    return delegates, f"transformers' is_torch_bf16_gpu_available() {how}"


def default_attention(ctx) -> tuple[str | None, str]:
    """(the attention implementation the installed transformers picks for this model when none is asked for, the
    model class): read from the meta-device model, which transformers builds with its own default; (None, why) when
    the model cannot be built here."""
    from trl_doctor import InputError, Unavailable

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

    from trl_doctor.facts.inputs.models import model_types

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
