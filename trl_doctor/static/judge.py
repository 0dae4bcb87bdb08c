"""The judgments `check --static` makes from files, one per rule it can decide, under the full check's rule ids and
in its words. A judgment returns Findings as a rule does, or raises Unavailable (a `skip` with the reason); a rule
with no judgment here is skipped with SKIPPED's reason. Each one reads trl_doctor.static.files and the TRL release
knowledge of trl_doctor.static.fields, never the ML stack, and reuses the full check's pure facts where they are
light (the geometry evaluator, the migration table, the launch's process count). Words both sides say come from the
facts layer's wording modules (facts/wording_*.py), so a finding reads the same in --static and the full check."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from trl_doctor.errors import Unavailable
from trl_doctor.types import Finding, Location, fail, passed, warn
from ..facts import wording_config as words_config, wording_eos as words_eos, wording_pad as words_pad
from ..facts import wording_precision as words_precision
from ..facts.bf16_support import bf16_below_ampere
from ..facts.tokens import as_id_list
from ..facts.wording_dataset import no_prompt_column, prompt_reader
from . import fields as F

FULL = "needs the full check"
SKIPPED = {
    "vllm-tokenizer-drift": f"{FULL}: it loads the tokenizer and vLLM's view of it",
    "logits-contract": f"{FULL}: it runs the model",
    "value-model": f"{FULL}: it loads the value and reward models",
    "smoke-step": f"{FULL}: it trains one step",
    "version-skew": f"{FULL}: it judges the installed training stack",
    "gpu-capacity": f"{FULL}: it counts the model's parameters on the meta device",
    "chat-template": f"{FULL}: it tokenizes every prompt through the template",
    "reward-functions": f"{FULL}: it imports and calls the repository's reward functions (static never runs them)",
    "peft-setup": f"{FULL}: it builds the adapter on the meta-device model",
    "model-files": f"{FULL}: it reads the weights' headers against the model",
    "vllm-server": f"{FULL}: it asks the vLLM server",
    "distributed-setup": f"{FULL}: it judges the installed accelerate and DeepSpeed",
    "vllm-weights": f"{FULL}: it loads the model's weights",
    "generation-settings": f"{FULL}: it reads the trainer's generation code",
}


def ppo_style(s) -> bool:
    """PPO, and RLOO before trl 0.22 (PPO-style: responses end at the config's stop token)."""
    return s.trainer == "ppo" or (s.trainer == "rloo" and F._key(s.release) < (0, 22))


# -- trainer-config -------------------------------------------------------------------------------------------

_BOOL = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def _type_error(key: str, value: Any, kind: str) -> str | None:
    """Why TRL's parser would refuse `value` for a field annotated `kind` (argparse converts strings with the type)."""
    base = re.sub(r"^(Optional\[|typing\.Optional\[)(.*)\]$", r"\2", kind.replace(" ", ""))
    base = re.sub(r"\|None$|^None\|", "", base)
    if value is None or base not in ("int", "float", "bool"):
        return None
    if base == "bool":
        ok = isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in _BOOL)
    elif isinstance(value, bool):
        ok = False
    elif isinstance(value, (int, float)):
        ok = base == "float" or (isinstance(value, int) or float(value).is_integer())
    else:
        ok = _parses(str(value), int if base == "int" else float)
    return None if ok else f"`{key}`: {value!r} is not a valid {base} (TRL's parser: invalid {base} value: {str(value)!r})"


def _parses(text: str, kind: type) -> bool:
    try:
        kind(text)
        return True
    except ValueError:
        return False


def trainer_config(s) -> Iterable[Finding]:
    import difflib

    from trl_doctor.context.config import DOCTOR_KEYS
    from trl_doctor.context.config import SCRIPT_EXTRA_KEYS
    from ..facts.migrations import arrival_for, migration_for

    own, name = F.config_fields(s.release, s.trainer)
    class_name = name or f"{s.trainer.upper()}Config"
    details = {"config class": class_name, "trl": s.release_words, "TrainingArguments from": F.training_arguments()[1]}
    if name is None:
        yield fail(words_config.rejected(class_name, f"trl {s.release} has no {class_name}"), **details)
        return
    init = {k for k, f in own.items() if f.get("init", True)}
    known = init | set(F.script_fields(s.release, s.trainer)) | set(DOCTOR_KEYS) | set(SCRIPT_EXTRA_KEYS)
    typed = {**own, **F.script_fields(s.release, s.trainer)}
    errors = {k: why for k, v in s.cfg.raw.items() if k in typed and (why := _type_error(k, v, typed[k]["type"]))}
    for key, why in errors.items():
        yield fail(why, location=Location(str(s.cfg.path), key), **details)
    unknown = [k for k in s.cfg.raw if k not in known]
    stops = F._key(s.release) >= (0, 19)
    consequence = words_config.unknown_key_consequence(s.trainer, s.release, stops)
    report = fail if stops else warn
    installed = {"trl": s.release, "transformers": F.training_arguments()[1].split()[1]}
    plain = []
    for key in unknown:
        loc = Location(str(s.cfg.path), key)
        entry = migration_for(key, installed, trainer=s.trainer)
        if entry is not None:
            yield report(words_config.migrated(entry, installed, consequence), location=loc, **details)
            continue
        arrival = arrival_for(key, installed, trainer=s.trainer)
        if arrival is not None:
            yield report(words_config.arrives_later(key, class_name, s.release, arrival, consequence), location=loc,
                         **details)
            continue
        near = [n for n in difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.8) if abs(len(n) - len(key)) <= 2]
        plain.append(words_config.unknown(key, near[0] if near else None))
    if plain:
        yield report(words_config.not_known(s.release, plain, consequence), **details)
    if not unknown and not errors:
        keys = [k for k in s.cfg.raw if k in init]
        yield passed(f"{class_name} (trl {s.release}) has all {len(keys)} trainer keys with values of the right type "
                     "(its __post_init__ validation runs in the full check)", **details)


# -- batch-geometry -------------------------------------------------------------------------------------------

def _reading(stored: dict):
    """The full check's geometry Reading, from the statements tools/gen_trl_fields.py stored for the release."""
    import ast

    from ..facts.trl_geometry import Reading, Unit

    def body(unit: dict) -> tuple:
        out = []
        for line, text in unit["statements"]:
            out.extend(ast.parse("\n" * (line - 1) + text).body)
        return tuple(out)

    units, chain = [], None
    for unit in reversed(stored["config"]):  # innermost parent first
        chain = Unit("config", f"{unit['file']}:{unit['line']}", body(unit), unit["file"], 0, (chain,) if chain else ())
    if chain is not None:
        units.append(chain)
    if stored.get("trainer"):
        t = stored["trainer"]
        units.append(Unit("trainer", f"{t['file']}:{t['line']}", body(t), t["file"], 0))
    return Reading(tuple(units))


def batch_geometry(s) -> Iterable[Finding]:
    from ..facts.launch import launch
    from ..facts.trl_geometry import AUTO_FIND_BATCH_SIZE, Evaluator, values_over

    own, name = F.config_fields(s.release, s.trainer)
    if name is None:
        yield passed(words_config.no_config_class(s.release, s.trainer))
        return
    refused = sorted(k for k in s.cfg.raw if k in own and _type_error(k, s.cfg.raw[k], own[k]["type"])
                     and any(w in k for w in ("batch", "generation", "steps", "accumulation", "rloo_k", "epochs")))
    if refused:
        raise Unavailable(words_config.refused_numbers(refused))
    the_launch = launch(s)
    procs, where = the_launch.processes, the_launch.processes_from
    reading = _reading(F.release(s.release)["geometry"][s.trainer])
    problems, resolved = Evaluator(reading, procs).run(values_over({k: f.get("default") for k, f in own.items()},
                                                                   s.cfg.raw))
    details: dict[str, Any] = {"trl": s.release_words, "processes": f"{procs} ({where})"}
    if the_launch.processes_note:
        details["process count note"] = the_launch.processes_note
    details["read from"] = words_config.read_from(reading.units)
    details["not done here"] = "the cross-check that builds TRL's config class, and the --fix plan: the full check"
    gen = resolved.get("generation_batch_size")
    summary = (f"per_device_train_batch_size {resolved.get('per_device_train_batch_size')} x "
               f"{words_config.processes(procs)}" + (f", generation batch {gen}" if isinstance(gen, int) else "") +
               (f", num_generations {resolved.get('num_generations')}" if "num_generations" in resolved else ""))
    lines = [f"({i}) {p.message} [{p.site}]" for i, p in enumerate(problems, 1)]
    if s.trainer in ("grpo", "rloo") and s.cfg.raw.get("auto_find_batch_size") is True and \
            not any("auto_find_batch_size" in p.message for p in problems):
        lines.append(f"({len(lines) + 1}) {AUTO_FIND_BATCH_SIZE}")
    if not lines:
        yield passed(words_config.geometry_healthy(procs, where, summary), **details)
        return
    details["violations"] = lines
    yield fail(words_config.violations(lines, procs, where, s.release), **details)


# -- pad-token ----------------------------------------------------------------------------------------------

def _tokenizer(s):
    if not s.tok.readable:
        raise Unavailable(f"{FULL}: {s.cfg.tokenizer.path} has no tokenizer.json (a sentencepiece-only tokenizer): "
                          "its token ids need the tokenizer library")
    return s.tok


def _rows(s) -> int | None:
    text = s.model_json.get("text_config") if isinstance(s.model_json.get("text_config"), dict) else s.model_json
    size = text.get("vocab_size", s.model_json.get("vocab_size"))
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def pad_token(s) -> Iterable[Finding]:
    from ..facts.trl import TRAINER_CLASS

    tok = _tokenizer(s)
    rows = _rows(s)
    pad, eos = tok.token("pad_token"), tok.token("eos_token")
    pad_id, eos_id = tok.id_of(pad), tok.id_of(eos)
    gen = s.gen_json
    trainer_cls = TRAINER_CLASS[s.trainer]
    details = words_pad.details(tokenizer=str(s.cfg.tokenizer.path), pad=pad, pad_id=pad_id, eos=eos, eos_id=eos_id,
                                rows=rows, config_pad=s.model_json.get("pad_token_id"), generation_json=gen,
                                trl=s.release_words)
    if s.cfg.added_tokens:
        raise Unavailable(f"{FULL}: `added_tokens` change the tokenizer the trainer holds")
    if pad is None:
        if eos is None:
            yield fail(words_pad.NEITHER, **details)
            return
        evidence = F.release(s.release)["sets_pad_to_eos"].get(s.trainer)
        details["trainer behaviour"] = evidence or f"{trainer_cls} in trl {s.release} never assigns the policy tokenizer's pad_token"
        if evidence:
            yield warn(words_pad.set_to_eos(s.trainer, trainer_cls, s.release, eos, eos_id), **details)
        else:
            yield fail(words_pad.never_set(trainer_cls, s.release), **details)
        return
    if pad_id is None or (rows is not None and pad_id >= rows):
        if ppo_style(s):
            raise Unavailable(f"{FULL}: pad id {pad_id} lies past the embedding rows, which PPO-style trainers may allow")
        yield fail(words_pad.outside_rows(pad, pad_id, rows), **details)
        return
    files = {"config.json": s.model_json.get("pad_token_id")}
    if gen is not None and ppo_style(s):  # GRPO and RLOO pass generate the tokenizer's pad id themselves
        files["generation_config.json"] = gen.get("pad_token_id")
    disagree = {n: v for n, v in files.items() if v is not None and v != pad_id}
    if disagree:
        yield warn(words_pad.files_disagree(pad, pad_id, disagree), **details)
    if s.trainer == "ppo":
        stop_id = s.cfg.raw.get("stop_token_id", eos_id)
        if pad_id == stop_id:
            yield warn(words_pad.ppo_stop(pad, pad_id), **details)
            return
    yield passed(words_pad.healthy(pad, pad_id, rows), **details)


# -- eos-termination ------------------------------------------------------------------------------------------

MARK = "TRLDOCTORMARK"


def turn_terminator(s) -> dict | None:
    """facts.chat.turn_terminator, read from files: the template rendered in Jinja2's sandbox (as transformers
    renders it), bounded (trl_doctor.static.template), the first special token after the assistant's content. None
    without a template."""
    from .template import NotRendered, render

    template, where = s.tok.chat_template
    if template is None:
        return None
    specials_named = {role: s.tok.token(role) for role in ("bos_token", "eos_token", "unk_token", "pad_token")}
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": MARK}]
    try:
        text = render(template, where, dict(messages=conversation, add_generation_prompt=False, **specials_named),
                      getattr(s.options, "user_code_timeout", None))
    except NotRendered as exc:  # a template that cannot render is the chat-template rule's finding
        return {"error": str(exc)}
    if MARK not in text:
        return {"error": "the template does not render the assistant's content"}
    after = text.split(MARK, 1)[1]
    hits = [(after.find(name), name) for name in s.tok.specials if name and name in after]
    if hits:
        _, name = min(hits, key=lambda h: (h[0], -len(h[1])))
        return {"token": name, "id": s.tok.specials[name], "text_after_content": after}
    return {"token": None, "id": None, "text_after_content": after}


def eos_termination(s) -> Iterable[Finding]:
    from ..facts.chat import is_conversational

    if ppo_style(s):
        raise Unavailable(f"{FULL}: a PPO-style trainer ends responses at its stop token, read from the trainer")
    tok = _tokenizer(s)
    gen = s.gen_json
    gen_eos = as_id_list((gen if gen is not None else s.model_json).get("eos_token_id"))
    eos, eos_id = tok.token("eos_token"), tok.id_of(tok.token("eos_token"))
    if s.dataset.unread and s.tok.chat_template[0] is not None:
        raise Unavailable(f"whether prompts go through the chat template depends on the dataset ({s.dataset.unread})")
    conversational = bool(s.dataset.rows) and is_conversational(s.dataset.rows[0])
    term = None
    if conversational:
        found = turn_terminator(s)
        if found and found.get("error"):
            yield warn(words_eos.unrendered(found["error"]), tokenizer=str(s.cfg.tokenizer.path))
            return
        if found and found.get("id") is not None:
            term = {"id": found["id"], "token": found["token"], "why": words_eos.TURN_END}
    if term is None:
        term = {"id": eos_id, "token": eos, "why": words_eos.eos_why(conversational)}
    stop_set = sorted(set(gen_eos) | ({eos_id} if eos_id is not None else set()))
    use_vllm = bool(s.cfg.raw.get("use_vllm"))
    details = {**words_eos.details(term, eos, eos_id, s.model_json, gen, [(tok.name_of(i), i) for i in stop_set],
                                   use_vllm),
               "termination probe": "not run (--static): the static reading decides"}
    if term["id"] is None:
        yield fail(words_eos.NO_EOS, **details)
        return
    if term["id"] in stop_set:
        yield passed(words_eos.in_stop_set(term, " (the completion mask is read from the trainer in the full check)"),
                     **details)
        return
    yield fail(words_eos.never_stops(term, use_vllm, words_eos.stop_ids_from(gen_eos, gen is not None), eos, eos_id),
               **details)


# -- context-length -------------------------------------------------------------------------------------------

LEARNED_POSITIONS = ("gpt2", "opt", "gpt_neo", "gptj", "bloom", "codegen", "biogpt")


def context_length(s) -> Iterable[Finding]:
    own, _ = F.config_fields(s.release, s.trainer)
    text = s.model_json.get("text_config") if isinstance(s.model_json.get("text_config"), dict) else s.model_json
    limit = text.get("max_position_embeddings") or text.get("n_positions")
    if not isinstance(limit, int):
        raise Unavailable("config.json names no max_position_embeddings")
    key = "response_length" if ppo_style(s) else "max_completion_length"
    completion = s.cfg.raw.get(key, own.get(key, {}).get("default"))
    prompt = s.cfg.raw.get("max_prompt_length", own.get("max_prompt_length", {}).get("default")) \
        if "max_prompt_length" in own else None
    learned = s.model_json.get("model_type") in LEARNED_POSITIONS
    details = {"max_position_embeddings": limit, key: completion, "max_prompt_length": prompt, "trl": s.release_words,
               "positions": "a learned table (an index past it crashes)" if learned else "rotary or relative"}
    if not isinstance(completion, int):
        raise Unavailable(f"`{key}` is not a number")
    if completion >= limit:
        words = (f"{key} {completion} alone is as long as the model's context ({limit} positions, config.json "
                 "max_position_embeddings): no prompt fits beside a full completion")
        if learned:
            yield fail(f"{words}; the model looks positions up in a learned table, so the first long completion stops "
                       "the job with \"index out of range in self\"", **details)
        else:
            yield warn(f"{words}: the model never saw the positions past {limit}, and vLLM refuses such a length",
                       **details)
        return
    if isinstance(prompt, int) and prompt + completion <= limit:
        yield passed(f"max_prompt_length {prompt} + {key} {completion} fit the model's {limit} positions", **details)
        return
    if isinstance(prompt, int):  # only a bound: whether prompts that long exist is the dataset's, tokenized
        raise Unavailable(f"{FULL}: max_prompt_length {prompt} + {key} {completion} could run past the model's "
                          f"{limit} positions; whether any prompt is that long needs the prompts tokenized")
    raise Unavailable(f"{FULL}: trl {s.release} does not truncate prompts, so the prompts' token lengths decide "
                      f"({key} {completion} leaves {limit - completion} of the model's {limit} positions for the prompt)")


# -- dataset-schema -------------------------------------------------------------------------------------------

def dataset_schema(s) -> Iterable[Finding]:
    from ..facts.chat import prompt_format

    if s.cfg.raw.get("dataset_streaming") or s.cfg.raw.get("datasets"):
        raise Unavailable(f"{FULL}: a stream or a dataset mixture is loaded by the datasets library")
    ds = s.dataset
    if ds.unread:
        raise Unavailable(ds.unread)
    columns = ds.columns or []
    details = {"dataset": str(ds.path), "columns": columns, "rows read": len(ds.rows)}
    if "prompt" not in columns:
        yield fail(no_prompt_column(columns, prompt_reader(s.trainer, ppo_style(s))), **details)
        return
    kinds = sorted({prompt_format(r.get("prompt")) for r in ds.rows})
    yield passed(f"columns {', '.join(columns)}: `prompt` is {', '.join(kinds)} in the first {len(ds.rows)} rows (every "
                 "row's format and the reward functions' columns are read in the full check)", **details)


# -- precision-and-attention -------------------------------------------------------------------------------------

def precision(s) -> Iterable[Finding]:
    from ..facts.launch import compute_capability, launch

    visible = list(launch(s).gpus)
    if not visible:
        raise Unavailable("no GPU here to check precision against: pass --target (e.g. --target 1xA10G)")
    own, _ = F.config_fields(s.release, s.trainer)
    raw = s.cfg.raw
    fp16 = raw.get("fp16", own.get("fp16", {}).get("default")) is True
    declared = own.get("bf16", {})
    bf16 = raw.get("bf16", declared.get("default"))
    words = "set in the config" if "bf16" in raw else f"{s.trainer.upper()}Config's default in trl {s.release}"
    if bf16 is None and "bf16" not in raw and s.trainer in ("grpo", "rloo") and F._key(s.release) >= (0, 19):
        bf16, words = not fp16, f"{s.trainer.upper()}Config's default in trl {s.release}: bf16 unless fp16"
    lowest = min(visible, key=compute_capability)
    name = words_precision.gpu_name(lowest)
    details = {"GPUs": words_precision.gpu_lines(visible), "bf16": f"{bool(bf16)} ({words})", "trl": s.release_words}
    below = compute_capability(lowest) < words_precision.BF16_MIN_CC
    found = False
    if bf16 is True and below:
        found = True
        origin = "" if raw.get("bf16") is True else f" ({words})"
        emulated = bf16_below_ampere()
        if emulated.runs:
            yield warn(words_precision.bf16_emulated(origin, lowest, emulated.why), **details)
        else:
            yield fail(words_precision.bf16_unsupported(origin, lowest), **details)
    if raw.get("tf32") is True and below:
        found = True
        yield fail(words_precision.tf32_unsupported(lowest), **details)
    ckpt = s.model_json.get("dtype") or s.model_json.get("torch_dtype")
    if raw.get("use_vllm") and ckpt == "bfloat16" and below:
        found = True
        colocate = str(raw.get("vllm_mode", own.get("vllm_mode", {}).get("default")) or "server") == "colocate"
        yield (fail if colocate else warn)(words_precision.vllm_bf16_unsupported(lowest, colocate), **details)
    if not found:
        mode = "bf16" if bf16 else "fp16" if fp16 else "fp32"
        yield passed(f"{mode} ({words}) suits {name} (compute capability {lowest['compute_capability']}); the attention "
                     "kernel and the load dtype are judged in the full check", **details)


JUDGES: dict[str, Callable] = {
    "pad-token": pad_token,
    "eos-termination": eos_termination,
    "trainer-config": trainer_config,
    "batch-geometry": batch_geometry,
    "context-length": context_length,
    "dataset-schema": dataset_schema,
    "precision-and-attention": precision,
}
