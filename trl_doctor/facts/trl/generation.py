"""How the installed trainer generates: the GenerationConfig it builds (read from its source), what transformers
really samples with once it merges the checkpoint's generation_config.json into it (asked of the installed
transformers on the meta-device model), and which eos ids end the trainer's completion mask.

Several rules ask these questions: eos-termination (which ids stop generation, which end the mask) and
generation-settings (which sampling values the job really uses, whether the prompt batch reaches `generate`
whole). Every reading returns its evidence (file:line) for the rule to quote.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from trl_doctor.facts.inputs.text import line_of as _line
from trl_doctor.facts.trl.installed import trainer_source, trainer_tree

# keys that change which token is sampled or how long generation runs; special-token ids are eos-termination's
SAMPLING_KEYS = ("do_sample", "temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
                 "repetition_penalty", "no_repeat_ngram_size", "encoder_repetition_penalty", "length_penalty",
                 "num_beams", "max_new_tokens", "max_length", "min_new_tokens", "min_length", "bad_words_ids",
                 "suppress_tokens", "begin_suppress_tokens", "renormalize_logits", "guidance_scale")
SPECIAL_KEYS = ("eos_token_id", "pad_token_id", "bos_token_id")


@dataclass(frozen=True)
class TrainerGenerationConfig:
    """The GenerationConfig the installed trainer builds for `generate`, read from its source."""

    kwargs: dict[str, Any]  # resolved values, as the trainer passes them (from this config, or TRL's constants)
    sources: dict[str, str]  # key -> where the value comes from ("GRPOConfig.temperature", "TRL constant")
    unresolved: tuple[str, ...]  # keys whose expression could not be evaluated here
    evidence: str  # "trl/trainer/grpo_trainer.py:1173: `GenerationConfig(**generation_kwargs, ...)`"
    overrides_model_config: bool  # the trainer swaps its kwargs into model.generation_config while generating
    # (unwrap_model_for_generation(..., generation_kwargs=...), TRL's workaround for transformers#42762)
    eos_expr: str | None = None  # the source text of its eos_token_id value, None when it passes none


@dataclass(frozen=True)
class MaskEos:
    """Which ids end the trainer's completion mask, read from its source."""

    kind: str  # "all" (tokenizer eos plus every generation_config eos id) or "tokenizer" (the tokenizer's eos only)
    evidence: str


_MASK_ALL = re.compile(r"torch\.isin\(\s*completion_ids\s*,\s*torch\.tensor\(\s*self\.eos_token_ids")
_MASK_ONE = re.compile(r"(?:is_eos|contain_eos_token)\s*=\s*[^\n]*==\s*(?:self\.)?(?:processing_class|_tokenizer|tokenizer)\.eos_token_id"
                       r"|is_eos\s*=\s*completion_ids\s*==\s*self\.eos_token_id")


def mask_eos(trainer: str) -> MaskEos | None:
    """Whether the installed GRPO/RLOO trainer ends the completion mask at every eos id the model declares (TRL 1.x:
    `torch.isin(completion_ids, self.eos_token_ids)`) or at the tokenizer's eos only (`completion_ids ==
    processing_class.eos_token_id`); None when neither is found."""
    found = trainer_source(trainer)
    if found is None:
        return None
    rel, text = found
    m = _MASK_ALL.search(text)
    if m is not None:
        return MaskEos("all", f"{rel}:{_line(text, m.start())}: `{m.group(0)})`")
    m = _MASK_ONE.search(text)
    if m is not None:
        return MaskEos("tokenizer", f"{rel}:{_line(text, m.start())}: `{m.group(0)}`")
    return None


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "GenerationConfig":
            yield node


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


class _Self:
    """`self` of the trainer as far as its generation kwargs need it: config attributes and the tokenizer."""

    def __init__(self, cfg, tok):
        self.args, self.processing_class, self._tokenizer, self.tokenizer = cfg, tok, tok, tok
        self._cfg = cfg

    def __getattr__(self, name):
        return getattr(self._cfg, name)


def trainer_generation_config(trainer: str, cfg, tok) -> TrainerGenerationConfig | None:
    """The kwargs of the first `GenerationConfig(...)` the installed trainer builds (the training one: PPO builds a
    second, greedy one for its sample generations), with `**name` expanded from the dict literal assigned to `name`
    in the same function and `name.update(args.generation_kwargs)` applied. Values are the trainer's expressions
    evaluated against this config (`args`, `self.<field>`) and tokenizer; None without a GenerationConfig call."""
    parsed = trainer_tree(trainer)
    if parsed is None:
        return None
    rel, text, tree = parsed
    for func in _functions(tree):
        calls = [c for c in _calls(func) if c.lineno >= func.lineno]
        if not calls:
            continue
        call = min(calls, key=lambda c: c.lineno)
        # the innermost function holding the first call
        inner = [f for f in _functions(func) if f is not func and any(c is call for c in _calls(f))]
        if inner:
            continue
        break
    else:
        return None
    exprs: dict[str, ast.expr] = {}
    update_from_config = False
    for kw in call.keywords:
        if kw.arg is not None:
            exprs[kw.arg] = kw.value
        elif isinstance(kw.value, ast.Name):
            name = kw.value.id
            for node in ast.walk(func):
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and node.lineno <= call.lineno
                        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)):
                    for k, v in zip(node.value.keys, node.value.values):
                        if isinstance(k, ast.Constant) and isinstance(k.value, str):
                            exprs.setdefault(k.value, v)
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == name
                        and "generation_kwargs" in ast.unparse(node.args[0] if node.args else node)):
                    update_from_config = True
    namespace = {"args": cfg, "self": _Self(cfg, tok), "processing_class": tok, "tokenizer": tok,
                 "model": None, "None": None, "True": True, "False": False}
    cls_name = type(cfg).__name__
    kwargs, sources, unresolved = {}, {}, []
    eos_expr = ast.unparse(exprs["eos_token_id"]) if "eos_token_id" in exprs else None
    for key, expr in exprs.items():
        code = ast.unparse(expr)
        try:
            value = eval(compile(ast.Expression(expr), rel, "eval"), {"__builtins__": {}}, dict(namespace))  # noqa: S307
        except Exception:
            unresolved.append(key)
            continue
        kwargs[key] = value
        attrs = re.findall(r"\b(?:args|self)\.(\w+)", code)
        fields = [a for a in attrs if a not in ("args", "processing_class", "_tokenizer", "tokenizer")]
        sources[key] = (f"{cls_name}.{fields[0]}" if fields and hasattr(cfg, fields[0]) else
                        "the tokenizer" if re.search(r"processing_class|tokenizer", code) else f"TRL constant `{code}`")
    extra = getattr(cfg, "generation_kwargs", None) if update_from_config else None
    if isinstance(extra, dict):
        for key, value in extra.items():
            kwargs[key] = value
            sources[key] = f"{cls_name}.generation_kwargs"
    overrides = bool(re.search(r"unwrap_model_for_generation\([^)]*generation_kwargs\s*=", text, re.S))
    segment = ast.get_source_segment(text, call)  # once: it splits the trainer's whole source in Python
    code = " ".join(segment.split()) if segment else "GenerationConfig(...)"
    evidence = f"{rel}:{call.lineno}: `{code if len(code) < 160 else code[:157] + '...'}`"
    return TrainerGenerationConfig(kwargs, sources, tuple(unresolved), evidence, overrides, eos_expr)


def pad_passed_to_generate(ctx) -> str | None:
    """Where the installed trainer hands `generate` the tokenizer's pad id itself (`GenerationConfig(...,
    pad_token_id=processing_class.pad_token_id)`, every GRPO from trl 0.14 to 1.x), as "file:line: `code`": then
    transformers never fills the pad id from generation_config.json, so that file's pad_token_id pads nothing. None
    when the trainer passes no pad id (PPO: generate pads finished sequences with generation_config.json's), when
    its source is not installed."""
    import types

    from trl_doctor.facts.trl.trainer_config import trainer_config_or_none

    # the pad id's expression reads the tokenizer only: a config TRL refuses (batch sizes) still has a trainer
    # that passes it, so the script's own config object, or none, serves as well
    cfg = trainer_config_or_none(ctx) or getattr(getattr(ctx, "live", None), "args", None) or types.SimpleNamespace()
    built = trainer_generation_config(ctx.trainer, cfg, ctx.tokenizer)
    if built is None or built.sources.get("pad_token_id") != "the tokenizer":
        return None
    return f"{built.evidence.split(': `', 1)[0]}: GenerationConfig(..., pad_token_id=<the tokenizer's pad id>)"


@dataclass(frozen=True)
class EffectiveGeneration:
    """What transformers' `generate` samples with: the trainer's GenerationConfig merged with the model's."""

    changed: dict[str, tuple[Any, Any]]  # key -> (value generate uses, value it would use without generation_config.json)
    how: str  # how the merge was asked ("transformers 5.23.0 GenerationMixin._prepare_generation_config ...")


def effective_generation(ctx, trainer_kwargs: dict, use_override: bool) -> EffectiveGeneration | None:
    """Ask the installed transformers what `generate` will sample with: the trainer's GenerationConfig merged (by
    `_prepare_generation_config`, as `generate` merges it) into the meta-device model's generation config, once as
    the checkpoint's generation_config.json and once as a blank GenerationConfig; TRL's own override context
    (transformers#42762) runs when the trainer uses it. The keys whose value differs are what generation_config.json
    changes. None when the installed transformers has no such method or the model has no generation_config.json."""
    import contextlib
    import copy

    from transformers import GenerationConfig

    kwargs = dict(trainer_kwargs)
    model_gen = ctx.generation_config
    if model_gen is None:
        return None
    model = ctx.meta_model
    prepare = getattr(model, "_prepare_generation_config", None)
    if prepare is None:
        return None
    override: Any = None
    if use_override:
        try:
            import trl.models.utils as trl_utils

            override = trl_utils._override_model_generation_config
        except (ImportError, AttributeError):
            override = None

    def merged(base):
        model.generation_config = base
        manager = override(model, generation_kwargs=kwargs) if override is not None else contextlib.nullcontext()
        with manager:
            out = prepare(GenerationConfig(**kwargs))
        return out[0] if isinstance(out, tuple) else out

    saved = model.generation_config
    try:
        # a copy that keeps the file's transformers_version (to_dict writes the installed one): transformers
        # 4.50-4.57 fill default-valued keys from the model's config only when the file was written by 4.50+
        with_file = merged(copy.deepcopy(model_gen))
        without = merged(GenerationConfig())
    except Exception:  # a value transformers refuses is trainer-config's finding, not this one's
        return None
    finally:
        model.generation_config = saved
    changed = {}
    for key in SAMPLING_KEYS:
        used, plain = getattr(with_file, key, None), getattr(without, key, None)
        if used != plain:
            changed[key] = (used, plain)
    if with_file.max_new_tokens is not None:  # max_new_tokens wins over max_length
        changed.pop("max_length", None)
    how = (f"transformers {ctx.version('transformers')} GenerationMixin._prepare_generation_config"
           + (" inside TRL's _override_model_generation_config" if override is not None else ""))
    return EffectiveGeneration(changed, how)


def token_type_ids_reach_generate(trainer: str) -> tuple[bool | None, str]:
    """Whether the installed trainer hands the tokenizer's extra outputs (token_type_ids) to `generate` for
    conversational prompts: TRL 1.x keeps every key of apply_chat_template's output other than input_ids and
    attention_mask as `multimodal_fields` and passes them to generate; TRL 0.x passes `prompt_inputs["input_ids"]`
    and the attention mask only. (None, why) when the source says neither."""
    found = trainer_source(trainer)
    if found is None:
        return None, f"no {trainer} trainer source installed"
    rel, text = found
    m = re.search(r"multimodal_fields\s*=\s*\{k:\s*v\s+for\s+k,\s*v\s+in\s+tokenized\.items\(\)[^}]*\}", text)
    g = re.search(r"generate_inputs\[k\]\s*=", text)
    if m is not None and g is not None:
        return True, (f"{rel}:{_line(text, m.start())}: `{' '.join(m.group(0).split())}` and {rel}:{_line(text, g.start())} "
                      "puts each of them into generate's inputs")
    m = re.search(r"\.generate\(\s*\*\*prompt_inputs", text)
    if m is not None:
        return True, f"{rel}:{_line(text, m.start())}: `{m.group(0)}`"
    m = re.search(r"prompt_inputs\[\s*[\"']input_ids[\"']\s*\]", text) or re.search(r"\[\s*[\"']input_ids[\"']\s*\]", text)
    if m is not None:
        return False, f"{rel}:{_line(text, m.start())}: the trainer takes `input_ids` (and the attention mask) only"
    return None, f"{rel}: no prompt tokenization recognised"


# What TRL sets itself in the sampling settings it builds, and which of its config's keys each follows: GRPOTrainer
# (and the GRPO-style RLOO) builds a GenerationConfig, and vLLM's SamplingParams (colocate and server), from its own
# arguments and then applies `generation_kwargs` over them (trl/trainer/grpo_trainer.py `generation_kwargs.update`,
# trl/generation/vllm_generation.py, vllm_client.py `sampling_params.update`): a key of both is silently replaced.
# None: a key TRL sets from no config key of the user's (n, num_return_sequences: TRL's own per-prompt counts).
SAMPLING_OWN = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                "repetition_penalty": "repetition_penalty", "max_new_tokens": "max_completion_length",
                "max_tokens": "max_completion_length", "n": None, "num_return_sequences": None}


@dataclass(frozen=True)
class KwargsCollision:
    key: str  # the generation_kwargs key
    value: Any  # what generation_kwargs sets
    follows: str | None  # the config key TRL fills it from (None: TRL's own count)
    own: Any  # that config key's value


def generation_kwargs_collisions(kwargs: Any, config: dict) -> list[KwargsCollision]:
    """The keys of `generation_kwargs` that replace a sampling setting TRL sets itself, with a value other than
    TRL's: `config` maps the config keys the job holds a value for (temperature, max_completion_length, a top_p it
    set...) to those values; a key it does not map is the job's to pin in generation_kwargs."""
    if not isinstance(kwargs, dict):
        return []
    out = []
    for key, value in kwargs.items():
        if key not in SAMPLING_OWN:
            continue
        follows = SAMPLING_OWN[key]
        if follows is not None and (follows not in config or _same(value, config[follows])):
            continue  # a key the job leaves to generation_kwargs, or the same value
        own = config.get(follows) if follows else None
        out.append(KwargsCollision(key, value, follows, own))
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return a == b or (a is not None and b is not None and abs(float(a) - float(b)) < 1e-9)
    except (TypeError, ValueError):
        return False
