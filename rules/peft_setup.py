"""TD016 peft-setup: LoRA starts from a base, trains new tokens' rows, and gets gradients.

What it does
    Without weights: an adapter as the model, `lora_modules_to_save` for new tokens' rows, input
    gradients, `lora_target_modules` against the model's modules (for any trainer's LoraConfig).

Why is this bad?
    - an adapter folder as the model: trl 0.26-1.16 stop ("Unrecognized model in ... Should have a
      `model_type` key in its config.json"; 0.21-0.25 read `AutoConfig` first); trl 0.14-0.19 (and
      PPO's script) load its base and `get_peft_model` resets it ("You are trying to modify a model
      with PEFT for a second time": the SFT is lost), or without `use_peft` nothing trains ("element
      0 of tensors does not require grad and does not have a grad_fn");
    - new tokens' rows stay as initialised outside `lora_modules_to_save`; LoRA keys without
      `use_peft`: the full model trains;
    - reentrant checkpointing (transformers 4.x) needs input gradients: "None of the inputs have
      requires_grad=True", then the grad_fn error (trl#3089, trl#3150); GRPO enables them from trl
      0.16 (transformers#42489), transformers 5.x always: trl 0.14-0.15 + transformers 4.x fails
      (reproduced with peft 0.14.0); on by default from 0.23 (BaseConfig from 0.29);
    - `lora_target_modules: ["q_proj,", "v_proj"]` (a recipe's `"q_proj", "v_proj"`): only v_proj
      adapted, silently ("Target modules ... not found in the base model" when none match); a
      one-item list is a regex: `[q_proj]` matches nothing (peft 0.21.2, trl 1.16.0).

Example
    lora_target_modules: ["q_proj,", "v_proj"]   # use_peft: true
    -> fail: lora_target_modules ['q_proj,', 'v_proj']...: `q_proj,` matches no module ...

Fix safety
    Safe: embedding and head into `lora_modules_to_save`; the target list without stray commas;
    `gradient_checkpointing_kwargs: {use_reentrant: false}` except under DeepSpeed (ZeRO-3 needs
    reentrant: upgrade TRL). Adapter folders and keys without `use_peft`: manual.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trl_doctor import ALL_TRAINERS, ASYNC_GRPO, Edit, fail, Fix, InputError, passed, rule, skip, Unavailable, warn

from trl_doctor.facts.launch.settings import checkpointing_kwargs, config_value
from trl_doctor.facts.inputs.text import line_of as _line, read_json as _read_json
from trl_doctor.facts.inputs.tokens import embedding_rows
from trl_doctor.facts.trl.installed import (TRAINER_CLASS, enables_input_grads, model_loader, trainer_mentions,
                                  trainer_takes_peft)

PEFT_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_target_parameters",
             "lora_modules_to_save", "lora_task_type", "use_rslora", "use_dora")


# a group holding a quantifier, itself quantified: `(.*)*x`, `(a+)+`: catastrophic backtracking in Python's re
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[*+}](?:[^()\\]|\\.)*\)[*+{]")
_UNCHECKED = "not checked: "  # a part of the LoRA setup the model could not be built to judge


@rule(
    id="TD016",
    slug="peft-setup",
    title="LoRA starts from a base model, trains new tokens' rows and gets gradients through checkpointed layers",
    trainers=ALL_TRAINERS,
    fixable="sometimes",
    static_skip="it builds the adapter on the meta-device model",
)
def check(ctx):
    if ctx.trainer not in TRAINER_CLASS:
        yield from _other_trainer(ctx)
        return
    cfg = ctx.config
    raw = cfg.raw
    trl_version = ctx.version("trl")
    cls = TRAINER_CLASS[ctx.trainer]
    asked = config_value(ctx, "use_peft", False)
    use_peft = asked is True or str(asked).lower() == "true"
    details: dict[str, Any] = {"trl": trl_version, "use_peft": use_peft}
    adapter = cfg.model.path / "adapter_config.json"
    if adapter.is_file():
        message, its_details = _adapter_as_model(ctx, adapter, use_peft, cls)
        details.update(its_details)
        yield fail(message, **details)
        return
    twice = _peft_model_and_config(ctx, cls)
    if twice is not None:
        message, its_details = twice
        details.update(its_details)
        yield fail(message, **details)
        return
    set_keys = [k for k in PEFT_KEYS if k in raw]
    if not use_peft:
        if set_keys:
            yield warn(f"{', '.join(set_keys)} {'is' if len(set_keys) == 1 else 'are'} set but `use_peft` is not: "
                       f"`trl {ctx.trainer}` builds a PEFT config only with use_peft (get_peft_config returns None "
                       "without it), so the whole model trains, with its full gradients and optimizer states; set "
                       "`use_peft: true` for LoRA, or remove the lora keys", **details)
        else:
            yield skip("`use_peft` is not set: the full model trains, there is no LoRA setup to check")
        return
    details["lora keys"] = {k: raw[k] for k in set_keys}  # as the file writes them
    if ctx.version("peft") is None:
        yield fail(f"`use_peft: true` but peft is not installed: `trl {ctx.trainer}` stops at once ('You need to have "
                   "PEFT library installed'); `pip install peft`", **details)
        return
    takes = trainer_takes_peft(ctx.trainer)
    on_model = ctx.live is not None and not ctx.live.peft_config_given  # the script wrapped its model itself
    if takes is False and not on_model:
        which = " (the PPO-style RLOOTrainer of trl < 0.22)" if ctx.trainer == "rloo" else ""
        pin = "; pin trl>=0.22 for LoRA with RLOO" if ctx.trainer == "rloo" else ""
        yield warn(f"trl {trl_version}'s {cls} takes no peft_config{which}: use_peft and the lora keys are ignored "
                   f"and the whole model trains{pin}", **details)
        return

    found = []
    for part in (_target_modules, _new_token_rows, _checkpointing):
        verdict, its_details = part(ctx)  # (fail / warn, message, fix) or None
        details.update(its_details)
        if verdict:
            found.append(verdict)
    unchecked = [f"{what} {details[what][len(_UNCHECKED):]}" for what in ("target modules", "new tokens")
                 if str(details.get(what, "")).startswith(_UNCHECKED)]
    adapter = _adapter_kind(raw)
    if not found and unchecked:  # a LoRA target that matches nothing stops get_peft_model: not a pass unread
        yield skip(f"{adapter} on the base model {cfg.model.ref} not judged: " + "; ".join(unchecked), **details)
        return
    if not found:
        parts = [details.get("target modules"), details.get("new tokens"), details.get("gradient checkpointing")]
        yield passed(f"{adapter} on the base model {cfg.model.ref}: " + "; ".join(str(p) for p in parts if p), **details)
        return
    for make, message, fix in found:
        yield make(message, fix, **details)


def _other_trainer(ctx):
    """A trainer the doctor does not otherwise check (DPO, SFT, KTO, ...) that the script gave a LoraConfig: its target
    names reach PEFT the same way for every trainer, so they are judged; the rest (new tokens' rows, checkpointing
    and input gradients, how the trainer loads the model) depends on the trainer and is said to be unjudged."""
    cls = getattr(ctx.live, "trainer_cls", None)
    name = cls.__qualname__ if cls is not None else "the script's trainer"
    which = f"{name} is a trainer peft-setup does not model" if ctx.trainer == ASYNC_GRPO else \
        f"{name} is not a trainer trl-doctor checks"
    if config_value(ctx, "use_peft", False) is not True:
        yield skip(f"not checked: {which} (peft-setup judges the LoRA target names of any trainer, and the script gave "
                   "this one no peft_config)")
        return
    verdict, details = _target_modules(ctx)
    rest = (f"{which}: only the LoRA target names are judged for it, as PEFT matches them for any trainer (new tokens' "
            "rows and gradient checkpointing are not)")
    details["judged"] = rest
    if verdict:
        make, message, fix = verdict
        yield make(message, fix, **details)
        return
    targets = str(details.get("target modules") or "PEFT's default targets for the architecture")
    if targets.startswith(_UNCHECKED):
        yield skip(f"not checked: {rest}, and the target names could not be read: {targets[len(_UNCHECKED):]}",
                   **details)
        return
    yield passed(f"LoRA target modules: {targets}; {rest}", **details)


# -- a PEFT adapter given as the model -------------------------------------------------------------------------------

def _adapter_as_model(ctx, adapter: Path, use_peft: bool, cls: str) -> tuple[str, dict[str, Any]]:
    """(the fail's message, the details: the adapter and how the trainer loads the model path)."""
    cfg = ctx.config
    info = _read_json(adapter) or {}
    base = info.get("base_model_name_or_path")
    targets = info.get("target_modules")
    targets = ", ".join(sorted(targets)) if isinstance(targets, list) else targets
    kind = f"{info.get('peft_type', 'PEFT')} r={info.get('r')} on {targets}" if info.get("r") else info.get("peft_type", "PEFT")
    details: dict[str, Any] = {"adapter_config.json": str(adapter), "adapter": kind, "adapter base model": base,
                           "config.json in the folder": (cfg.model.path / "config.json").is_file()}
    loader, reads_config, evidence = model_loader(ctx.trainer)
    details["model loading"] = evidence
    ref = cfg.model.ref
    merged = f"{ref.rstrip('/')}-merged"
    merge = (f"merge it into its base first: `AutoPeftModelForCausalLM.from_pretrained('{ref}').merge_and_unload()"
             f".save_pretrained('{merged}')` (and save the tokenizer there), then set model_name_or_path: {merged}"
             + (" and keep use_peft for a fresh adapter on top" if use_peft else " (with use_peft for LoRA on top)"))
    head = f"model_name_or_path {ref} is a PEFT adapter ({kind} over {base}), not a model"
    if reads_config and not (cfg.model.path / "config.json").is_file():
        return (f"{head}: trl {ctx.version('trl')}'s {cls} loads a model path with {loader}, whose "
                "AutoConfig.from_pretrained stops at once ('Unrecognized model in ... Should have a `model_type` "
                f"key in its config.json'); {merge}"), details
    if use_peft:
        return (f"{head}: {loader} loads {base} with this adapter attached, then {cls} wraps it with "
                "get_peft_model(model, peft_config), which builds a fresh 'default' adapter in place of the loaded "
                "one (PEFT warns 'modify a model with PEFT for a second time'; the loaded lora_B weights are reset "
                f"to zero): the adapter's training is silently discarded; {merge}"), details
    return (f"{head}: {loader} loads {base} with this adapter attached and frozen, and nothing else is trainable: "
            "the first backward fails with 'element 0 of tensors does not require grad and does not have a "
            f"grad_fn'; {merge}"), details


# -- a PeftModel and a peft_config ----------------------------------------------------------------------------------

_BOTH_REFUSED = "You passed a `PeftModel` instance together with a `peft_config`"  # trl >= 0.27 (trl#4713)


def _peft_model_and_config(ctx, cls: str) -> tuple[str, dict[str, Any]] | None:
    """(the fail's message, details) when the script wrapped the model with PEFT itself *and* passed a peft_config,
    which the installed trainer refuses at construction; None otherwise (or where this TRL accepts it)."""
    live = ctx.live
    if live is None or not getattr(live, "peft_config_given", False) or live.model is None:
        return None
    try:
        from peft import PeftModel
    except ImportError:
        return None
    if not isinstance(live.model, PeftModel) or not trainer_mentions(ctx.trainer, _BOTH_REFUSED):
        return None
    where = f" ({live.where[0]}:{live.where[1]})" if live.where else ""
    adapters = ", ".join(live.model.peft_config)
    return (f"the script wraps the model with PEFT itself ({type(live.model).__name__}, adapter {adapters}) and also "
            f"passes peft_config to {cls}{where}: trl {ctx.version('trl')} stops at construction ('{_BOTH_REFUSED} "
            "to the trainer'); pass the base model with peft_config (and drop the get_peft_model call), or the "
            "PeftModel without peft_config"), {"model given": type(live.model).__name__, "peft_config given": True}


# -- target modules --------------------------------------------------------------------------------------------------

def _adapter_kind(raw) -> str:
    """The adapter the script's PEFT config builds, in words: LoRA (the lora_* keys' kind), DoRA, or PEFT's own name
    for another kind (a PromptTuningConfig: 'a PROMPT_TUNING adapter')."""
    kind = raw.get("peft_type")
    if kind in (None, "LORA"):
        return "DoRA" if raw.get("use_dora") else "LoRA"
    return f"a {kind} adapter"


def _target_modules(ctx) -> tuple[tuple | None, dict[str, Any]]:
    """LoRA's `target_modules`, as TRL hands them to PEFT, against the meta-device model's module names, matched as
    PEFT's check_target_module_exists matches them: a list item is a module's full name or its last components
    (name ending with "." + item); a string is one regular expression the full name must match entirely
    (`re.fullmatch`); "all-linear" is every Linear layer but the LM head."""
    details: dict[str, Any] = {}
    import re as regex

    raw = ctx.config.raw
    if "lora_target_modules" not in raw or raw["lora_target_modules"] is None:  # not written in the file
        return None, details  # PEFT picks its own default targets for the architecture
    targets, given = _effective_targets(ctx)
    try:
        model = ctx.meta_model
    except (InputError, Unavailable, ImportError, OSError, ValueError) as exc:
        details["target modules"] = f"{_UNCHECKED}{exc}"
        return None, details
    names = [n for n in (_own_name(n) for n, _ in model.named_modules() if n) if n]
    linear = _linear_leaf_names(model)
    details["lora_target_modules (as PEFT gets them)"] = targets
    if isinstance(targets, str) and targets.lower() == "all-linear":
        details["target modules"] = f"all-linear: {', '.join(linear)}"
        return None, details
    if isinstance(targets, str) and _NESTED_QUANTIFIER.search(targets):
        return (warn, f"lora_target_modules {targets!r}{given} nests quantifiers (a group repeated by *, + or {{}} that "
                      "repeats inside): PEFT matches it against every module name with Python's re, which can take "
                      "exponential time; not matched here. Write a list of names, e.g. "
                      f"`lora_target_modules: [{', '.join(linear[:2])}]`", None), details
    if isinstance(targets, str):
        try:
            hits = [n for n in names if regex.fullmatch(targets, n)]
        except regex.error as exc:
            return (fail, f"lora_target_modules {targets!r}{given} is not a valid regular expression ({exc}), which PEFT "
                          f"reads a string as: get_peft_model stops; the model's Linear layers are named "
                          f"{', '.join(linear)}: write a list, e.g. `lora_target_modules: [{', '.join(linear[:2])}]`", None), details
        if hits:
            details["target modules"] = f"{targets!r} (a regular expression) matches {len(hits)} modules, e.g. {hits[0]}"
            return None, details
        return (fail, _no_regex_match(targets, given, linear, names), None), details
    items = [str(t) for t in targets]
    missing = [t for t in items if not any(n == t or n.endswith("." + t) for n in names)]
    matched = [t for t in items if t not in missing]
    if not missing:
        details["target modules"] = f"{', '.join(items)} match modules of {type(model).__name__}"
        return None, details
    return (fail, _no_list_match(ctx, items, missing, matched, given, linear, type(model).__name__), _comma_fix(ctx, items)), details


def _effective_targets(ctx) -> tuple[Any, str]:
    """(the target_modules PEFT gets, where they come from in words). A launch command's are those of the LoraConfig
    the script built; a config file's go through TRL's ModelConfig, which turns a one-item list into a string."""
    value = ctx.config.raw["lora_target_modules"]  # the file's value: what TRL's ModelConfig makes of it follows
    if ctx.live is not None:
        return value, " (the script's LoraConfig)"
    effective = model_config_value("lora_target_modules", value)
    if isinstance(value, list) and isinstance(effective, str):
        return effective, (f" (TRL's ModelConfig turns the one-item list {value} from {ctx.config.path.name} into this "
                           "string)")
    return effective, f" (from {ctx.config.path.name})"


def _no_regex_match(pattern: str, given: str, linear: list[str], names: list[str]) -> str:
    example = next((n for n in names if n.endswith("." + pattern)), None) if pattern in linear else None
    other = next((n for n in linear if n != pattern), pattern)
    how = (f"; it names a layer, but the expression must match the whole name ({example}): write "
           f"`--lora_target_modules '.*\\.{pattern}'` (in a config file `lora_target_modules: '.*\\.{pattern}'`), or "
           f"list more than one module (`--lora_target_modules {pattern} {other}`)") if example else ""
    comma = f"; {_comma_hint([p.strip() for p in pattern.split(',') if p.strip()])}" if "," in pattern else ""
    return (f"lora_target_modules {pattern!r}{given} matches no module: PEFT reads a string as one regular expression "
            f"that a module's full name must match entirely, and get_peft_model stops with 'Target modules {pattern} not "
            f"found in the base model'; the model's Linear layers are named {', '.join(linear)}{how}{comma}")


def _no_list_match(ctx, items, missing, matched, given, linear, model_cls) -> str:
    peft = ctx.version("peft")
    shown = ", ".join(f"`{m}`" for m in missing)
    if matched:
        effect = (f"PEFT {peft} adapts only {', '.join(matched)} and says nothing about "
                  f"{'it' if len(missing) == 1 else 'them'}")
    else:
        effect = f"get_peft_model stops with 'Target modules {set(missing)} not found in the base model'"
    commas = [m for m in missing if m.rstrip().endswith(",") or m.lstrip().startswith(",")]
    hint = ""
    if commas:
        which = ", ".join(f"`{m}`" for m in commas)
        hint = (f"; {which} {'has a' if len(commas) == 1 else 'have'} trailing comma{'s' if len(commas) > 1 else ''}: "
                f"{_comma_hint([i.strip(', ') for i in items if i.strip(', ')])}")
    return (f"lora_target_modules {items}{given}: {shown} {'matches' if len(missing) == 1 else 'match'} no module of "
            f"{model_cls}, so {effect}; its Linear layers are named {', '.join(linear)}{hint}")


def _comma_hint(names: list[str]) -> str:
    return (f"on a command line write `--lora_target_modules {' '.join(names)}` (spaces, no commas), in a config file "
            f"`lora_target_modules: [{', '.join(names)}]`")


def _comma_fix(ctx, items: list[str]):
    """The list without its stray commas, for a config file (a launch command's values come from its command line)."""
    cleaned = [i.strip(", ") for i in items if i.strip(", ")]
    if ctx.live is not None or cleaned == items or ctx.config.path is None:
        return None
    return Fix(f"set lora_target_modules: {cleaned} in {ctx.config.path.name}",
               (Edit(str(ctx.config.path), set=(("lora_target_modules", cleaned),)),))


def _linear_leaf_names(model) -> list[str]:
    """The distinct last name components of the model's Linear (and GPT-2 Conv1D) layers but its LM head, in order."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out: dict[str, None] = {}
    for name, module in model.named_modules():
        name = _own_name(name)
        if module is head or not name:
            continue
        if isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D":
            out[name.rsplit(".", 1)[-1]] = None
    return list(out)


def _own_name(name: str) -> str | None:
    """A module's name in the model as the script built it, when the model came already wrapped by PEFT (a trainer
    that applies peft_config before transformers' constructor, as SFTTrainer does; a script's get_peft_model): the
    wrapped layer (`q_proj.base_layer`) is `q_proj`, PEFT's own parts (`lora_A.default`, `base_model.model.`) are not
    the model's (None)."""
    parts = name.split(".")
    if parts[:2] == ["base_model", "model"]:
        parts = parts[2:]
    if any(p.startswith("lora_") for p in parts):
        return None
    if parts and parts[-1] == "base_layer":
        parts = parts[:-1]
    return ".".join(parts) or None


# -- rows of new tokens ----------------------------------------------------------------------------------------------

def _new_token_rows(ctx) -> tuple[tuple | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    cfg = ctx.config
    raw = cfg.raw
    added = list(cfg.added_tokens)
    try:
        tok = ctx.tokenizer
        rows = embedding_rows(ctx)
    except (InputError, Unavailable) as exc:
        details["new tokens"] = f"{_UNCHECKED}{exc}"
        return None, details
    vocab = _disk_vocab(ctx)
    new = [t for t in added if t not in vocab]
    size = len(tok)
    grown = rows is not None and size > rows
    if not new and not grown:
        details["new tokens"] = (f"no new tokens (the tokenizer's {size} tokens fit the {rows} embedding rows"
                                 + (f" and {', '.join(added)} are in its vocabulary" if added else "") + ")")
        return None, details
    emb, head, facts = _embedding_names(ctx)
    saved = _names(raw.get("lora_modules_to_save"))  # as the file writes them: the fix adds to this list
    targets = _names(raw.get("lora_target_modules"))
    # PEFT matches modules_to_save (and listed target_modules) by the end of the module's full name
    full = {emb: facts.get("input embedding") or emb, head: facts.get("LM head") or head}
    covered = {name: any(full[name].endswith(n) for n in saved + targets) for name in (emb, head) if name}
    ids = {t: tok.convert_tokens_to_ids(t) for t in new}
    what = (", ".join(f"{t!r} (id {i})" for t, i in ids.items()) + " new to the tokenizer's vocabulary") if new else ""
    if grown:
        what += ("; " if what else "") + f"the tokenizer has {size} tokens for {rows} embedding rows (the script must resize)"
    details["new tokens"] = what
    details["embedding modules"] = facts
    missing = [name for name, ok in covered.items() if not ok]
    if not missing:
        details["new tokens"] = f"{what}: trained through lora_modules_to_save / lora_target_modules {sorted(saved + targets)}"
        return None, details
    want = list(dict.fromkeys(saved + missing))
    tied = " (tied: PEFT trains separate copies of the two)" if facts.get("tied") else ""
    fix = Fix(f"set lora_modules_to_save: {want} in {cfg.path.name}", (Edit(str(cfg.path), set=(("lora_modules_to_save", want),)),))
    return (warn, (
        f"{what}, but LoRA freezes the input embedding `{emb}` and the LM head `{head}`: "
        f"{'neither is' if len(missing) == 2 else '`' + missing[0] + '` is not'} in lora_modules_to_save"
        f"{' ' + str(saved) if saved else ''}, so the new tokens' rows stay as initialised and the policy cannot learn "
        f"to read or emit them; add {' and '.join(missing)} to lora_modules_to_save (the fix writes {want}: full "
        f"trainable copies, {facts.get('parameters', '?')} parameters{tied})"), fix), details


def _disk_vocab(ctx) -> set[str]:
    """The tokens of the tokenizer as saved (before `added_tokens`), read from tokenizer.json when it is there."""
    data = _read_json(ctx.tokenizer_file("tokenizer.json"))
    if data is not None:
        model_vocab = (data.get("model") or {}).get("vocab")
        tokens = set(model_vocab) if isinstance(model_vocab, dict) else \
            {v[0] for v in model_vocab or [] if isinstance(v, list) and v}
        tokens |= {t.get("content") for t in data.get("added_tokens") or [] if isinstance(t, dict)}
        if tokens:
            return tokens
    return set(ctx.disk_tokenizer_copy().get_vocab())


def _embedding_names(ctx) -> tuple[str | None, str | None, dict]:
    """The last name component of the input embedding and the LM head (what PEFT matches), from the meta model."""
    model = ctx.meta_model
    emb_module, head_module = model.get_input_embeddings(), model.get_output_embeddings()
    names = {id(m): n for n, m in model.named_modules()}
    emb = names.get(id(emb_module), "embed_tokens").rsplit(".", 1)[-1]
    head = names.get(id(head_module), "lm_head").rsplit(".", 1)[-1] if head_module is not None else None
    text = ctx.model_config.get_text_config() if hasattr(ctx.model_config, "get_text_config") else ctx.model_config
    tied = bool(getattr(text, "tie_word_embeddings", False) or getattr(ctx.model_config, "tie_word_embeddings", False))
    count = emb_module.weight.numel() + (head_module.weight.numel() if head_module is not None else 0)
    return emb, head, {"input embedding": names.get(id(emb_module)), "LM head": names.get(id(head_module)),
                       "tied": tied, "parameters": f"{count:,}"}


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()] if value != "all-linear" else []
    return [str(v) for v in value] if isinstance(value, list) else []


# -- gradient checkpointing ------------------------------------------------------------------------------------------

def _checkpointing(ctx) -> tuple[tuple | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    if not config_value(ctx, "gradient_checkpointing", False):
        details["gradient checkpointing"] = "gradient checkpointing off"
        return None, details
    kwargs = checkpointing_kwargs(ctx)
    tf_enables, tf_evidence, tf_default = _transformers_input_grads()
    trl_enables, trl_evidence = enables_input_grads(ctx.trainer)
    reentrant = kwargs.get("use_reentrant", tf_default)
    where = ("gradient_checkpointing_kwargs" if "use_reentrant" in kwargs else
             f"transformers {ctx.version('transformers')}'s default")
    details["gradient checkpointing"] = f"gradient checkpointing on, use_reentrant={reentrant} ({where})"
    details["input gradients (TRL)"] = trl_evidence
    details["input gradients (transformers)"] = tf_evidence
    if trl_enables:
        details["gradient checkpointing"] += f"; trl {ctx.version('trl')} enables input gradients for PEFT"
        return None, details
    if tf_enables:
        details["gradient checkpointing"] += f"; transformers {ctx.version('transformers')} enables input gradients"
        return None, details
    if reentrant is False:
        details["gradient checkpointing"] += ": non-reentrant, so no input gradients are needed"
        return None, details
    fix = None
    action = "set gradient_checkpointing_kwargs: {use_reentrant: false}"
    if ctx.config.raw.get("deepspeed"):  # as the file asks (the built config holds the doctor's stand-in)
        action = ("upgrade to trl>=0.16, which enables input gradients itself (this config uses DeepSpeed, where PEFT + "
                  "ZeRO-3 needs reentrant checkpointing, so use_reentrant: false is not written)")
    else:
        fix = Fix(f"set gradient_checkpointing_kwargs: {{use_reentrant: false}} in {ctx.config.path.name}",
                  (Edit(str(ctx.config.path), set=(("gradient_checkpointing_kwargs", {**kwargs, "use_reentrant": False}),)),))
    return (fail, (
         f"gradient checkpointing is on with use_reentrant={reentrant} ({where}) and LoRA freezes the embedding, but "
         f"nothing enables input gradients: trl {ctx.version('trl')}'s {TRAINER_CLASS[ctx.trainer]} never calls "
         f"enable_input_require_grads() and transformers {ctx.version('transformers')} does so only for adapters it "
         "loaded itself; the first backward fails with 'element 0 of tensors does not require grad and does not have a "
         f"grad_fn' (trl#3089); {action}"), fix), details


def _transformers_input_grads() -> tuple[bool, str, bool]:
    """(transformers enables input gradients for every text model when checkpointing starts, evidence, its default
    use_reentrant), read from transformers/modeling_utils.py."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    path = Path(list(spec.submodule_search_locations)[0]) / "modeling_utils.py" if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        return False, "transformers' modeling_utils.py not found", True
    text = path.read_text(encoding="utf-8")
    default = re.search(r"""\{\s*["']use_reentrant["']\s*:\s*(True|False)\s*\}""", text)
    reentrant_default = default is None or default.group(1) == "True"
    for m in re.finditer(r"\n    def (\w*checkpointing_enable)\(", text):
        end = text.find("\n    def ", m.end())
        body = text[m.start():end if end > 0 else None]
        if "enable_input_require_grads()" not in body:
            continue
        line = _line(text, m.start() + 1)
        if re.search(r"""main_input_name\s*==\s*["']input_ids["']""", body):
            return True, (f"transformers/modeling_utils.py:{line}: {m.group(1)} calls enable_input_require_grads() for "
                          "models whose main input is input_ids"), reentrant_default
        return False, (f"transformers/modeling_utils.py:{line}: {m.group(1)} calls enable_input_require_grads() only "
                       "when `_hf_peft_config_loaded` (adapters transformers loaded itself)"), reentrant_default
    return False, "transformers/modeling_utils.py: gradient_checkpointing_enable never calls enable_input_require_grads()", \
        reentrant_default


def model_config_value(key: str, value: Any) -> Any:
    """`value` of ModelConfig's field `key` as TRL's own ModelConfig leaves it after its __post_init__ (from a
    config file, the parser hands a list on as it is). trl 0.x-1.x turn a one-item `lora_target_modules` into that
    item, a string, which PEFT then reads as a regular expression over full module names. Asked of the installed
    ModelConfig rather than copied; the value unchanged where it has no such field or refuses the value."""
    import dataclasses

    try:
        import trl

        cls = getattr(trl, "ModelConfig", None)
        if cls is None or key not in {f.name for f in dataclasses.fields(cls) if f.init}:
            return value
        return getattr(cls(**{key: value}), key)
    except Exception:
        return value
