"""TD002 vllm-tokenizer-drift: vLLM loads the trainer's tokenizer and sees the config's stop settings.

What it does
    Loads the tokenizer vLLM will (the model folder; a server's `--model` assumed, and said) and
    compares it with the trainer's: tokens, ids, eos, chat template; stop strings encoded by one and
    decoded by the other, stop ids in both. TRL's code says whether `generation_kwargs` reach vLLM
    and prompts go as ids, text or messages. Ids past the embedding rows: also without `use_vllm`.
    Drift TRL does not act on: a warn.

Why is this bad?
    TRL does not hand its tokenizer to vLLM (colocate builds `LLM(model=model.name_or_path)`, a
    server runs its `--model`), so tokens a script adds are unknown there. Stop strings naming them
    never fire (vLLM matches its own detokenized text, special tokens dropped while
    `skip_special_tokens`): completions run to `max_completion_length`. Prompts vLLM tokenizes split
    them (or "Token id N is out of vocabulary"). Ids past `vocab_size` break vLLM and the forward
    ("index out of range in self"); a script's in-memory resize stops the first weight sync on
    `loaded_weight.shape[output_dim] == self.org_vocab_size` (trl#3112). TRL 0.14-0.18 used fixed
    SamplingParams; from 0.19 `generation_kwargs` reach vLLM (RLOO from 0.23); text prompts before
    1.0 (messages too in 0.25-0.29), token ids from 1.0 to 1.16. vLLM 0.31.0 loads `AutoTokenizer`
    from the model path and rejects ids past its vocabulary.

Example
    added_tokens: ["<search>", "</search>"]   # use_vllm; generation_kwargs: {stop: ["</search>"]}
    -> fail: stop string '</search>' never fires: ... vLLM's tokenizer (...) decodes as '' (...)

Fix safety
    Safe: the trainer's tokenizer into the folder vLLM loads (once a fresh load matches); for a
    special-token stop string, `skip_special_tokens: false` and `include_stop_str_in_output`. Manual
    where no file helps, and for the hub cache. Unsafe: `resize_token_embeddings` for new ids
    (seeded rows from the old ones' statistics), rewriting model.safetensors (up to 256 MiB).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl_doctor import (DELETE, Edit, Fix, InputError, Location, Unavailable, edited, fail, manual, passed, rule, skip,
                        warn)

from trl_doctor.facts.inputs.tokens import as_id_list, embedding_rows
from trl_doctor.facts.launch.settings import as_mapping, config_value
from trl_doctor.facts.trl.installed import TRAINER_CLASS
from trl_doctor.facts.vllm.handover import installed_config_field, installed_trl_vllm_path, load_as_vllm

RESIZE_LIMIT = 256 * 2**20  # bytes of model.safetensors the unsafe fix loads and rewrites
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt")
NOISE_KEYS = ("is_local", "local_files_only")  # load-time arguments transformers 5 leaks into tokenizer_config.json
STOP_KEYS = ("stop", "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens")
_MISSING = object()


@rule(
    id="TD002",
    slug="vllm-tokenizer-drift",
    title="vLLM loads the same tokenizer the trainer holds and sees the stop settings",
    trainers=("grpo", "rloo"),
    needs=("tokenizer", "model_config"),
    fixable="sometimes",
    static_skip="it loads the tokenizer and vLLM's view of it",
)
def check(ctx):
    tok = ctx.tokenizer
    rows = embedding_rows(ctx)
    beyond = _ids_beyond(tok, rows)
    details = _common_details(ctx, tok, rows, beyond)
    if not _truthy(config_value(ctx, "use_vllm", False)):
        if not beyond:
            yield skip("use_vllm is not set: generation runs in the trainer with its own tokenizer, nothing for vLLM "
                       "to drift from")
            return
        yield fail(*_beyond_without_vllm(ctx, tok, rows, beyond), **details)
        return
    path = installed_trl_vllm_path(ctx.trainer)
    no_vllm = _no_vllm_generation(ctx, path)
    if no_vllm:
        yield skip(no_vllm)
        return
    mode, fwd, setup = _vllm_setup(ctx, path)
    details.update(setup)
    loaded = load_as_vllm(ctx.config.model.path, ctx.options.trust_remote_code)
    details["vLLM tokenizer loaded with"] = loaded.loader
    stop = _stop_settings(ctx.config.raw)
    if stop.gen:
        details["generation_kwargs"] = stop.gen
    found = _Verdicts()
    if beyond:
        found.add("fail", _beyond_message(ctx, beyond, rows, "; vLLM rejects a prompt holding them ('Token id N is out "
                                          "of vocabulary') and the model can never sample them"))
    details.update(_resized_in_memory(ctx, rows, mode, found))
    forwarded, forwarding = _forwarding(ctx, mode, fwd, stop, found)
    details.update(forwarding)
    drift = None
    if loaded.tokenizer is None:
        found.add("fail", f"vLLM cannot load a tokenizer from {ctx.config.model.path} ({loaded.error}): "
                          f"{'LLM(...)' if mode == 'colocate' else '`trl vllm-serve`'} fails at start-up")
        details["vLLM loader error"] = loaded.error
    else:
        drift = compare(tok, loaded.tokenizer)
        details.update(_tokenizer_drift(ctx, tok, loaded.tokenizer, drift, path, stop, forwarded, found))
        details.update(_stop_resolution(ctx, tok, loaded.tokenizer, rows, stop, forwarded, found))
    if not found.findings:
        yield passed(_matches(ctx, tok, rows, drift, stop), **details)
        return
    # one Fix for the whole rule (fold would mark a safe part unsafe if it were merged with the resize)
    needs_tokenizer = loaded.tokenizer is None or (drift is not None and drift.any())
    fix, note = _the_fix(ctx, tok, rows, beyond, needs_tokenizer, stop, found)
    if note:
        details["fix note"] = note
    for status, message, its_fix, where in _findings(ctx, found, fix):
        yield (fail if status == "fail" else warn)(message, its_fix, where, **details)


# -- the steps of the check --------------------------------------------------------------------------------

@dataclass
class _Verdicts:
    """What the check found, and what a fix must (or cannot) do about it."""

    findings: list[tuple[str, str, str | None]] = field(default_factory=list)  # (status, message, config key)
    unfixable: list[str] = field(default_factory=list)  # what no file change can repair: then only steps by hand
    config_pairs: dict[str, Any] = field(default_factory=dict)  # generation_kwargs the fix sets

    def add(self, status: str, message: str, key: str | None = None) -> None:
        """A finding; `key` is the config key it is about, when it is about one."""
        self.findings.append((status, message, key))


@dataclass(frozen=True)
class _Stops:
    """The stop settings of the config's generation_kwargs."""

    gen: dict  # generation_kwargs as a mapping
    strings: list  # `stop`
    ids: list[int]  # `stop_token_ids`
    skip_special: bool  # skip_special_tokens (vLLM's default true)


def _stop_settings(raw: dict) -> _Stops:
    gen = _generation_kwargs(raw)
    return _Stops(gen, _as_list(gen.get("stop")), [i for i in _as_list(gen.get("stop_token_ids")) if isinstance(i, int)],
                  gen.get("skip_special_tokens", True) is not False)


def _common_details(ctx, tok, rows, beyond) -> dict[str, Any]:
    details: dict[str, Any] = {
        "trainer tokenizer": str(ctx.config.tokenizer.path),
        "added_tokens": list(ctx.config.added_tokens),
        "trainer tokenizer size": len(tok),
        "vocab_size (embedding rows)": rows,
        "trl": ctx.version("trl") or "not installed",
    }
    if beyond:
        details["ids past the embedding rows"] = {t: i for t, i in beyond}
    return details


def _beyond_message(ctx, beyond, rows, effect: str) -> str:
    return (f"{_listed(beyond)} {'is' if len(beyond) == 1 else 'are'} past the model's {rows} embedding rows "
            f"({ctx.config.model.path / 'config.json'} vocab_size): resize_token_embeddings was not done{effect}")


def _beyond_without_vllm(ctx, tok, rows, beyond) -> tuple[str, Fix | None]:
    """Without use_vllm only ids past the embedding rows matter: they break the trainer's own forward too (the
    message and the fix of that fail)."""
    fix, why = _resize_fix(ctx, tok, rows, write_tokenizer=False)
    if fix is None and why:
        fix = manual(why)
    return (_beyond_message(ctx, beyond, rows, ", so a prompt holding them fails the forward pass with 'index out of "
                                               "range in self' and the model can never sample them (with or without vLLM)"),
            fix)


def _no_vllm_generation(ctx, path) -> str | None:
    """Why there is nothing to check with use_vllm on this TRL (the skip's message), or None."""
    trainer_cls = TRAINER_CLASS[ctx.trainer]
    if path is None:
        return f"trl is not installed, so what {trainer_cls} sends to vLLM cannot be read"
    if path.colocate.forwards is None and path.server.forwards is None:
        return (f"{trainer_cls} in trl {ctx.version('trl') or 'not installed'} has no vLLM generation "
                f"({', '.join(path.files)}): use_vllm has no effect")
    return None


def _vllm_setup(ctx, path) -> tuple[str, Any, dict[str, Any]]:
    """(the vLLM mode the job runs, its generation_kwargs forwarding, the details: the mode, where vLLM loads from,
    how prompts reach it)."""
    trl_version = ctx.version("trl") or "not installed"
    model_dir = ctx.config.model.path
    details: dict[str, Any] = {}
    mode, mode_source = vllm_mode_in_words(ctx)
    if (path.colocate if mode == "colocate" else path.server).forwards is None:
        other = "server" if mode == "colocate" else "colocate"
        mode, mode_source = other, f"trl {trl_version} has no {mode} mode (the config's vllm_mode is TD009's to report), so {other}"
    details["vllm_mode"] = f"{mode} ({mode_source})"
    details["vLLM loads from"] = str(model_dir) + (
        f" (colocate: LLM(model={path.llm_model_arg or 'model.name_or_path'}, ...) with no tokenizer argument)"
        if mode == "colocate" else
        " (server: assumed to be the path given to `trl vllm-serve --model`; check the server's command line)"
    )
    if mode == "colocate" and path.llm_tokenizer_arg:
        details["vLLM loads from"] = (f"{model_dir} (the installed trl passes LLM(tokenizer={path.llm_tokenizer_arg}), "
                                      "which the doctor does not evaluate: the model folder is checked)")
    details["prompts reach vLLM as"] = sorted(path.prompts) or ["unknown"]
    details["trl source read"] = path.files
    return mode, path.colocate if mode == "colocate" else path.server, details


def _resized_in_memory(ctx, rows, mode: str, found: _Verdicts) -> dict[str, Any]:
    """A launch command's script grew (or shrank) the embeddings in memory while vLLM starts from the folder's
    config.json (docs/coverage.md: B7): the synced embedding and LM head do not fit vLLM's vocabulary partition (the
    details: the vocab_size vLLM loads)."""
    if ctx.live is None or ctx.live.model is None or rows is None:
        return {}
    on_disk = vocab_size_on_disk(ctx.config.model.path)
    if on_disk is None or on_disk == rows:
        return {}
    where = f" ({ctx.live.where[0]}:{ctx.live.where[1]})" if ctx.live.where else ""
    engine = "LLM(model=...)" if mode == "colocate" else "`trl vllm-serve --model ...`"
    found.add("fail", f"the script's model has {rows} embedding rows{where} but vLLM starts from "
                      f"{ctx.config.model.path}, whose config.json says vocab_size {on_disk} ({engine}): the first "
                      "weight sync stops with 'AssertionError: assert loaded_weight.shape[output_dim] == "
                      "self.org_vocab_size' (trl#3112); save the resized model and its tokenizer "
                      "(model.save_pretrained(DIR), tokenizer.save_pretrained(DIR)) and train, and serve, from DIR")
    found.unfixable.append("the resized model lives in the script's memory: only the script can save it")
    return {"vocab_size vLLM loads (config.json)": on_disk}


def _forwarding(ctx, mode: str, fwd, stop: _Stops, found: _Verdicts) -> tuple[bool, dict[str, Any]]:
    """(whether generation_kwargs reaches vLLM's SamplingParams in this mode, the details: the evidence); a finding
    when the config relies on it and it does not."""
    trl_version = ctx.version("trl") or "not installed"
    relied = [k for k in STOP_KEYS if k in stop.gen]
    field_exists = installed_config_field(ctx.trainer, "generation_kwargs")[0]
    details = {f"generation_kwargs -> vLLM ({mode})": fwd.evidence}
    forwarded = bool(fwd.forwards) and field_exists is not False
    if relied and not forwarded:
        reason = (
            f"{TRAINER_CLASS[ctx.trainer].replace('Trainer', 'Config')} in trl {trl_version} has no generation_kwargs field"
            if field_exists is False else
            f"trl {trl_version} builds vLLM's sampling parameters without generation_kwargs in {mode} mode ({fwd.evidence[0]})"
        )
        found.add("fail", (f"generation_kwargs {', '.join(relied)} never reach vLLM: {reason}; "
                           f"so {_describe_stops(stop.strings, stop.ids)} cannot stop a completion (trl 0.19 and later "
                           "forward them)"), "generation_kwargs")
        found.unfixable.append(f"upgrade trl to a release that forwards generation_kwargs to vLLM (0.19 or later; "
                               f"installed: {trl_version})")
    return forwarded, details


def _tokenizer_drift(ctx, tok, vtok, drift: Drift, path, stop: _Stops, forwarded: bool,
                     found: _Verdicts) -> dict[str, Any]:
    """What the differences between the trainer's tokenizer and vLLM's break, given how prompts reach vLLM (the
    details: the differences, the prompts holding missing tokens)."""
    trl_version = ctx.version("trl") or "not installed"
    model_dir = ctx.config.model.path
    details = drift.as_details()
    text_prompts = bool(path.prompts & {"text", "messages"})
    if drift.missing_in_vllm:
        miss = ", ".join(f"{t!r} (id {i})" for t, i in drift.missing_in_vllm.items())
        in_prompts = _tokens_in_prompts(ctx, tok, list(drift.missing_in_vllm)) if text_prompts else None
        if in_prompts:
            details["prompts holding them"] = in_prompts
            found.add("fail", (
                f"vLLM's tokenizer ({model_dir}) lacks {miss}, and trl {trl_version} sends prompts as "
                f"{'/'.join(sorted(path.prompts & {'text', 'messages'}))} that vLLM tokenizes itself: {in_prompts[0]}"))
        else:
            found.add("warn", (
                f"vLLM's tokenizer ({model_dir}) lacks {miss} that the trainer's tokenizer has: the text vLLM produces "
                f"for {'that id' if len(drift.missing_in_vllm) == 1 else 'those ids'} is "
                f"{_texts(drift.vllm_text)}" + ("" if text_prompts else
                    f"; trl {trl_version} sends and reads token ids, so only vLLM's own text and stop strings are affected")))
    if drift.id_diff:
        listed = ", ".join(f"{t!r} is id {a} for the trainer but {b} for vLLM" for t, (a, b) in drift.id_diff.items())
        found.add("fail" if text_prompts else "warn", f"the same token has another id: {listed}")
    if drift.missing_in_trainer:
        listed = ", ".join(f"{t!r} (id {i})" for t, i in drift.missing_in_trainer.items())
        found.add("warn", f"vLLM's tokenizer ({model_dir}) has {listed} that the trainer's tokenizer lacks")
    eos_problem = _eos_problem(ctx, tok, vtok, stop.ids if forwarded else [])
    if eos_problem:
        found.add("warn", eos_problem)
    if drift.template_differs:
        if "messages" in path.prompts:
            found.add("fail", (f"vLLM's chat template ({model_dir}) differs from the trainer's, and trl {trl_version} "
                               "lets vLLM render chat prompts with its own template"))
        else:
            details["chat template"] = (
                f"differs, harmless with trl {trl_version}: it renders prompts with the trainer's template itself")
    return details


def _stop_resolution(ctx, tok, vtok, rows, stop: _Stops, forwarded: bool, found: _Verdicts) -> dict[str, Any]:
    """Every stop string encoded by the trainer's tokenizer and decoded by vLLM's, every stop id resolved in both
    (the details: what each resolves to)."""
    resolved = {}
    for s in stop.strings:
        if isinstance(s, str):
            resolved[s] = _stop_string(ctx, tok, vtok, s, stop, forwarded, found)
    for i in stop.ids:
        t_tok = _id_to_token(tok, i)
        resolved[f"stop_token_ids {i}"] = {"trainer token": t_tok, "vLLM token": _id_to_token(vtok, i)}
        if rows is not None and i >= rows:
            found.add("fail", f"stop_token_ids {i} is past the {rows} embedding rows: the model never samples it",
                      "generation_kwargs")
            found.unfixable.append(f"remove stop_token_ids {i} from generation_kwargs or name an id below {rows}")
        elif t_tok is None:
            found.add("warn", f"stop_token_ids {i} is no token of the trainer's tokenizer ({len(tok)} tokens)",
                      "generation_kwargs")
            found.unfixable.append(f"check stop_token_ids {i}: the trainer's tokenizer has no token with that id")
    return {"stop settings resolved": resolved} if resolved else {}


def _stop_string(ctx, tok, vtok, s: str, stop: _Stops, forwarded: bool, found: _Verdicts) -> dict:
    """Whether vLLM's text can ever contain stop string `s` (what it resolves to, for the details)."""
    ids = tok.encode(s, add_special_tokens=False)
    seen = _decode(vtok, ids, stop.skip_special)
    seen_raw = _decode(vtok, ids, False)
    out = {"trainer ids": ids, "vLLM text for them": seen}
    if s in seen:
        return out
    if s in seen_raw and stop.skip_special:
        found.add("fail", (
            f"stop string {s!r} (id {ids[0] if len(ids) == 1 else ids}) never fires: it is a special token and vLLM "
            "leaves special tokens out of the text it matches stop strings on (skip_special_tokens defaults to true)"),
            "generation_kwargs")
        if forwarded:
            found.config_pairs.update(skip_special_tokens=False, include_stop_str_in_output=True)
        return out
    special = any(i in tok.added_tokens_decoder and tok.added_tokens_decoder[i].special for i in ids)
    also = (" (and as a special token it would be left out of that text even once vLLM knows it: "
            "skip_special_tokens defaults to true)") if special and stop.skip_special else ""
    found.add("fail", (
        f"stop string {s!r} never fires: the trainer's tokenizer writes it as ids {ids}, which vLLM's tokenizer "
        f"({ctx.config.model.path}) decodes as {seen!r}{also}; completions run to max_completion_length"), "generation_kwargs")
    if forwarded and special and stop.skip_special:
        found.config_pairs.update(skip_special_tokens=False, include_stop_str_in_output=True)
    return out


def _the_fix(ctx, tok, rows, beyond, needs_tokenizer: bool, stop: _Stops, found: _Verdicts) -> tuple[Fix | None, str | None]:
    """(the files to change, or the steps by hand when something no file change repairs is left; a note on what the
    fix leaves out, for the details)."""
    if found.unfixable:
        steps = list(found.unfixable)
        if needs_tokenizer:
            steps.append(f"save the trainer's tokenizer into the model folder, where vLLM loads it: {_copy_first(ctx.config)}"
                         if ctx.config.model.in_cache else
                         f"save the trainer's tokenizer into {ctx.config.model.path}, where vLLM loads it")
        return manual("; ".join(steps)), None
    fix, note = _plan_fix(ctx, tok, rows, beyond, needs_tokenizer, found.config_pairs, stop.gen)
    if fix is None:
        return (manual(note) if note else None), None
    return fix, note


def _findings(ctx, found: _Verdicts, fix: Fix | None) -> list[tuple[str, str, Fix | None, Any]]:
    """(status, message, fix, location) of each finding, fails first; the first carries the fix."""
    order = {"fail": 0, "warn": 1}
    return [(status, message, fix if n == 0 else None, _config_key(ctx, key) if key else None)
            for n, (status, message, key) in enumerate(sorted(found.findings, key=lambda f: order[f[0]]))]


def _config_key(ctx, key: str) -> Location:
    """The config key a finding points at: the config file and the key; the engine fills in the key's line and column
    where the file writes it (trl_doctor.context.locations.locate), and a key the file does not set has none."""
    return Location(str(ctx.config.path), key)


def _matches(ctx, tok, rows, drift: Drift | None, stop: _Stops) -> str:
    """The pass's message: what was compared, and the differences the installed TRL does not act on."""
    model_dir = ctx.config.model.path
    checked = f"{len(tok)} tokens, eos {tok.eos_token!r}"
    if stop.strings or stop.ids:
        checked += f", {_describe_stops(stop.strings, stop.ids)}"
    within = f"every id is within the {rows} embedding rows" if rows is not None else "config.json names no vocab_size"
    if drift is not None and drift.any():
        what = [name for name, on in (("chat template", drift.template_differs), ("eos", drift.eos_differs)) if on]
        return (f"vLLM's tokenizer ({model_dir}) differs from the trainer's only in its {' and '.join(what)}, which "
                f"trl {ctx.version('trl') or 'not installed'} does not act on here (see details): {checked}; {within}")
    return f"vLLM's tokenizer ({model_dir}) matches the trainer's: {checked}; {within}"


# -- comparison ------------------------------------------------------------------------------------------

@dataclass
class Drift:
    missing_in_vllm: dict[str, int] = field(default_factory=dict)  # token -> trainer id
    missing_in_trainer: dict[str, int] = field(default_factory=dict)  # token -> vLLM id
    id_diff: dict[str, tuple[int, int]] = field(default_factory=dict)  # token -> (trainer id, vLLM id)
    vllm_text: dict[int, str] = field(default_factory=dict)  # trainer id -> what vLLM's tokenizer decodes it to
    eos: tuple = ()  # ((trainer eos, id), (vLLM eos, id))
    template_differs: bool = False

    @property
    def eos_differs(self) -> bool:
        return bool(self.eos) and self.eos[0] != self.eos[1]

    def any(self) -> bool:
        return bool(self.missing_in_vllm or self.missing_in_trainer or self.id_diff or self.eos_differs or self.template_differs)

    def as_details(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.missing_in_vllm:
            out["missing in vLLM's tokenizer (token: trainer id)"] = self.missing_in_vllm
            out["vLLM's text for those ids"] = {str(i): t for i, t in self.vllm_text.items()}
        if self.missing_in_trainer:
            out["missing in the trainer's tokenizer (token: vLLM id)"] = self.missing_in_trainer
        if self.id_diff:
            out["different ids (token: [trainer, vLLM])"] = {t: list(p) for t, p in self.id_diff.items()}
        out["eos (trainer, vLLM)"] = [f"{t!r} (id {i})" for t, i in self.eos]
        out["chat template"] = "differs" if self.template_differs else "same"
        return out


def _specials(tok) -> dict[str, int]:
    """Added and special tokens with their ids."""
    out = {}
    decoder = getattr(tok, "added_tokens_decoder", None) or {}
    for i, added in decoder.items():
        out[str(getattr(added, "content", added))] = int(i)
    for t in getattr(tok, "all_special_tokens", None) or []:
        if t not in out:
            i = tok.convert_tokens_to_ids(t)
            if isinstance(i, int):
                out[t] = i
    return out


def compare(trainer_tok, vllm_tok) -> Drift:
    d = Drift()
    t_vocab, v_vocab = trainer_tok.get_vocab(), vllm_tok.get_vocab()
    t_special, v_special = _specials(trainer_tok), _specials(vllm_tok)
    for t, i in sorted(t_special.items(), key=lambda kv: kv[1]):
        if t not in v_vocab:
            d.missing_in_vllm[t] = i
            d.vllm_text[i] = _decode(vllm_tok, [i], False)
        elif v_vocab[t] != i:
            d.id_diff[t] = (i, v_vocab[t])
    for t, i in sorted(v_special.items(), key=lambda kv: kv[1]):
        if t not in t_vocab:
            d.missing_in_trainer[t] = i
        elif t_vocab[t] != i and t not in d.id_diff:
            d.id_diff[t] = (t_vocab[t], i)
    d.eos = ((trainer_tok.eos_token, trainer_tok.eos_token_id), (vllm_tok.eos_token, vllm_tok.eos_token_id))
    d.template_differs = (getattr(trainer_tok, "chat_template", None) or None) != (getattr(vllm_tok, "chat_template", None) or None)
    return d


def _eos_problem(ctx, tok, vtok, stop_ids: list[int]) -> str | None:
    """vLLM stops at its tokenizer's eos, generation_config.json's eos ids and the stop ids it is given; the
    trainer ends a completion at its tokenizer's eos (and, in TRL 1.x, generation_config.json's)."""
    gen = ctx.read_json(ctx.model_file("generation_config.json")) or {}
    gen_eos = set(as_id_list(gen.get("eos_token_id")))
    t_eos, v_eos = tok.eos_token_id, vtok.eos_token_id
    if t_eos == v_eos:
        return None
    vllm_stops = ({v_eos} | gen_eos | set(stop_ids)) - {None}
    if t_eos is not None and t_eos not in vllm_stops:
        return (f"vLLM does not stop at the trainer's eos {tok.eos_token!r} (id {t_eos}): its tokenizer's eos is "
                f"{vtok.eos_token!r} (id {v_eos}) and generation_config.json lists {sorted(gen_eos)}, so completions run "
                "past the end the trainer masks at")
    if v_eos is not None and v_eos not in ({t_eos} | gen_eos):
        return (f"vLLM stops at its tokenizer's eos {vtok.eos_token!r} (id {v_eos}), which the trainer does not treat as an "
                f"end (its eos is {tok.eos_token!r}, id {t_eos}): those completions count as truncated")
    return None


def _decode(tok, ids, skip_special: bool) -> str:
    try:
        return tok.decode(ids, skip_special_tokens=skip_special)
    except Exception:  # ids a tokenizer does not know: some backends raise instead of skipping
        return ""


def _id_to_token(tok, i: int) -> str | None:
    try:
        t = tok.convert_ids_to_tokens(i)
    except Exception:
        return None
    return t if isinstance(t, str) else None


def _ids_beyond(tok, rows: int | None) -> list[tuple[str, int]]:
    """Tokens whose id is past the embedding rows, leaving out the pad token (TD001 pad-token reports it)."""
    if rows is None:
        return []
    pad = tok.pad_token_id
    return sorted(((t, i) for t, i in tok.get_vocab().items() if i >= rows and i != pad), key=lambda ti: ti[1])


def _tokens_in_prompts(ctx, tok, tokens: list[str], limit: int = 2000) -> list[str] | None:
    """Where the missing tokens appear in text vLLM tokenizes itself: the trainer's chat template, the dataset's prompts."""
    found = []
    template = getattr(tok, "chat_template", None) or ""
    for t in tokens:
        if t in template:
            found.append(f"the chat template writes {t!r}, which vLLM's tokenizer splits into pieces")
    try:
        ds = ctx.dataset
    except (Unavailable, InputError):
        return found or None
    column = "prompt" if "prompt" in getattr(ds, "column_names", []) else None
    if column is None:
        return found or None
    for n, row in enumerate(ds.select(range(min(limit, len(ds))))[column]):
        text = row if isinstance(row, str) else " ".join(str(m.get("content", "")) for m in row if isinstance(m, dict))
        for t in tokens:
            if t in text:
                found.append(f"dataset row {n} holds {t!r}, which vLLM's tokenizer splits into pieces")
                return found
    return found or None


# -- config ------------------------------------------------------------------------------------------------

def _truthy(value) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1", "yes")) or value == 1


def _generation_kwargs(raw: dict) -> dict:
    return as_mapping(raw.get("generation_kwargs"))  # the file's value: the fix rewrites this key


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _listed(pairs: list[tuple[str, int]], most: int = 6) -> str:
    shown = ", ".join(f"{t!r} (id {i})" for t, i in pairs[:most])
    return shown + (f" and {len(pairs) - most} more" if len(pairs) > most else "")


def _texts(texts: dict[int, str]) -> str:
    return ", ".join(f"{t!r} for {i}" for i, t in texts.items())


def _describe_stops(stops: list, ids: list) -> str:
    parts = []
    if stops:
        parts.append("stop " + ", ".join(repr(s) for s in stops))
    if ids:
        parts.append("stop_token_ids " + ", ".join(str(i) for i in ids))
    return " and ".join(parts) or "the stop settings"


# -- fixes -------------------------------------------------------------------------------------------------

def _plan_fix(ctx, tok, rows, beyond, needs_tokenizer, config_pairs, gen) -> tuple[Fix | None, str | None]:
    cfg = ctx.config
    notes = []
    edits: list[Edit] = []
    what = []
    if beyond:
        return _resize_fix(ctx, tok, rows, write_tokenizer=True)
    if needs_tokenizer:
        if cfg.model.in_cache:
            notes.append(f"save the trainer's tokenizer into the model folder, where vLLM loads it: {_copy_first(cfg)}")
        else:
            tok_edits, problem = _tokenizer_edits(ctx, tok, cfg.model.path)
            if problem:
                notes.append(problem)
            elif tok_edits:
                edits += tok_edits
                what.append(f"save the trainer's tokenizer ({len(tok)} tokens) into {cfg.model.path}, where vLLM loads it")
    if config_pairs:
        new = dict(gen)
        new.update(config_pairs)
        edits.append(Edit(str(cfg.path), set=(("generation_kwargs", new),)))
        what.append("set " + ", ".join(f"{k}: {json.dumps(v)}" for k, v in config_pairs.items())
                    + f" in generation_kwargs of {cfg.path.name}, so stop strings naming special tokens can match vLLM's text")
    if not edits:
        return None, "; ".join(notes) or None
    return Fix("; ".join(what), tuple(edits)), "; ".join(notes) or None


def _tokenizer_edits(ctx, tok, target: Path) -> tuple[list[Edit], str | None]:
    """The files tokenizer.save_pretrained writes, as edits of `target`, checked by loading the result as vLLM would."""
    out = ctx.workdir / "td002-tokenizer"
    if out.exists():
        shutil.rmtree(out)
    tok.save_pretrained(str(out))
    edits = []
    for f in sorted(out.iterdir()):
        dest = target / f.name
        new = f.read_bytes()
        if f.name in ("tokenizer_config.json", "special_tokens_map.json") and dest.is_file():
            try:
                old_doc = json.loads(dest.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                old_doc = None
            if isinstance(old_doc, dict):
                new_doc = {k: v for k, v in json.loads(new).items() if k not in NOISE_KEYS}
                pairs = [(k, v) for k, v in new_doc.items() if old_doc.get(k, _MISSING) != v]
                pairs += [(k, DELETE) for k in old_doc if k not in new_doc and k not in NOISE_KEYS]
                if pairs:
                    edits.append(Edit(str(dest), set=tuple(pairs)))
                continue
        if f.name == "tokenizer_config.json":
            doc = {k: v for k, v in json.loads(new).items() if k not in NOISE_KEYS}
            new = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        if not dest.is_file() or dest.read_bytes() != new:
            edits.append(Edit(str(dest), content=new))
    problem = _verify(ctx, tok, target, edits)
    return edits, problem


def _verify(ctx, tok, target: Path, edits: list[Edit]) -> str | None:
    """Apply the edits to a copy of the folder's small files and load it as vLLM would: it must match."""
    trial = ctx.workdir / "td002-trial"
    if trial.exists():
        shutil.rmtree(trial)
    trial.mkdir()
    for f in target.iterdir():
        if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and ".trl-doctor.bak" not in f.name:
            shutil.copy2(f, trial / f.name)
    by_file: dict[str, list[Edit]] = {}
    for e in edits:
        by_file.setdefault(Path(e.path).name, []).append(e)
    for name, file_edits in by_file.items():  # as --fix would write them
        dest = trial / name
        dest.write_bytes(edited(dest, dest.read_bytes() if dest.is_file() else None, file_edits))
    loaded = load_as_vllm(trial, ctx.options.trust_remote_code)
    if loaded.tokenizer is None:
        return f"saving the trainer's tokenizer into {target} would still not load ({loaded.error}); save it by hand"
    d = compare(tok, loaded.tokenizer)
    if d.any():
        left = {k: v for k, v in d.as_details().items() if k not in ("eos (trainer, vLLM)",) and v != "same"}
        return (f"saving the trainer's tokenizer into {target} would not make vLLM load the same tokenizer "
                f"(other tokenizer files there win: {left}); replace the folder's tokenizer files by hand")
    return None


def _copy_first(cfg) -> str:
    """The steps that take the model out of the Hugging Face cache so that --fix can write to it."""
    return (f"{cfg.model.path} is in the Hugging Face cache, which --fix never rewrites: copy the snapshot to a folder of "
            f"your own (`cp -rL {cfg.model.path} <dest>`), point `model_name_or_path` at it and rerun --fix")


def _resize_fix(ctx, tok, rows, write_tokenizer: bool) -> tuple[Fix | None, str | None]:
    """The unsafe fix: resize the embeddings to cover every id and rewrite the weights (and the tokenizer)."""
    cfg = ctx.config
    need = max(len(tok), max(tok.get_vocab().values()) + 1)
    by_hand = (f"model.resize_token_embeddings({need}) on the model loaded from {cfg.model.path}, then save_pretrained "
              "the model and the trainer's tokenizer into one folder and train (and serve vLLM) from it")
    if cfg.model.in_cache:
        return None, f"{_copy_first(cfg)}; or by hand: {by_hand}"
    weights = cfg.model.path / "model.safetensors"
    if not weights.is_file():
        return None, f"only single-file model.safetensors checkpoints are resized automatically: {by_hand}"
    size = weights.stat().st_size
    if not ctx.options.unsafe_fixes:
        # only described: loading and rewriting the weights is done when --unsafe-fixes asks for it
        what = (f"resize the embeddings of {cfg.model.path} from {rows} to {need} rows (rewrites model.safetensors and "
                "config.json vocab_size" + (", and saves the trainer's tokenizer there" if write_tokenizer else "") + ")")
        return Fix(what, (), unsafe=True), None
    if size > RESIZE_LIMIT:
        return None, f"model.safetensors is {size / 2**30:.1f} GiB, more than the doctor loads to resize: {by_hand}"
    try:
        import torch
        from transformers import AutoModelForCausalLM

        load = {"local_files_only": True, "trust_remote_code": ctx.options.trust_remote_code}
        try:
            model = AutoModelForCausalLM.from_pretrained(str(cfg.model.path), dtype="auto", **load)
        except TypeError:  # transformers before 4.56 calls it torch_dtype
            model = AutoModelForCausalLM.from_pretrained(str(cfg.model.path), torch_dtype="auto", **load)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model.resize_token_embeddings(need)
        out = ctx.workdir / "td002-resized"
        if out.exists():
            shutil.rmtree(out)
        model.save_pretrained(str(out), safe_serialization=True)
    except Exception as exc:
        return None, f"resizing failed here ({type(exc).__name__}: {exc}): {by_hand}"
    if sorted(p.name for p in out.glob("*.safetensors")) != ["model.safetensors"]:
        return None, f"the resized model does not save as one model.safetensors: {by_hand}"
    old_cfg = json.loads((cfg.model.path / "config.json").read_text(encoding="utf-8"))
    new_cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    pairs = tuple((k, v) for k, v in new_cfg.items() if k != "transformers_version" and old_cfg.get(k, _MISSING) != v)
    edits = [Edit(str(weights), content=(out / "model.safetensors").read_bytes())]
    if pairs:
        edits.append(Edit(str(cfg.model.path / "config.json"), set=pairs))
    what = f"resize the embeddings of {cfg.model.path} from {rows} to {need} rows (rewrites model.safetensors and config.json vocab_size)"
    if write_tokenizer:
        tok_edits, problem = _tokenizer_edits(ctx, tok, cfg.model.path)
        if problem:
            return None, problem
        edits += tok_edits
        what += " and save the trainer's tokenizer there, where vLLM loads it"
    return Fix(what, tuple(edits), unsafe=True), None


def vocab_size_on_disk(folder) -> int | None:
    """`vocab_size` in the config.json of `folder` (its text config's for a multimodal model), as a loader that
    starts from the folder (vLLM) sees it; None when the file or the number is not there."""
    import json
    from pathlib import Path

    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    size = text.get("vocab_size", data.get("vocab_size"))
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def vllm_mode_in_words(ctx) -> tuple[str, str]:
    """(the vLLM mode the job runs in, what says so in words) for a report: the config's `vllm_mode` as the trainer
    sees it ("set in the config"), else the installed TRL's default with the file and line that set it, else the one
    mode the installed TRL's vLLM code has ("server" for 0.16-0.17, "colocate": vLLM inside the trainer, for
    0.14-0.15). Unlike `vllm_placement`, it never names "device" and never fails on another key's value."""

    if isinstance(ctx.config.raw.get("vllm_mode"), str):
        seen = config_value(ctx, "vllm_mode", None)
        if isinstance(seen, str):
            return seen, "set in the config"
    exists, default, where = installed_config_field(ctx.trainer, "vllm_mode")
    if exists and isinstance(default, str):
        return default, f"the default in trl {ctx.version('trl')}, {where}"
    path = installed_trl_vllm_path(ctx.trainer)
    if path is None or path.colocate.forwards is None:
        return "server", "the only vLLM mode of the installed trl"
    return "colocate", "the only vLLM mode of the installed trl (vLLM inside the trainer)"
