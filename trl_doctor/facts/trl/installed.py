"""What the installed TRL provides and does: its trainer and config classes, the source text of its trainers,
and the readings of that source the rules need.

Rules decide version-dependent questions by reading what the installed release actually does (its
source), not only from a table of versions. `trainer_source` and `trl_root` are the one way in to that source;
every regex over it lives below, each reader with a docstring saying what it reads and returning evidence
(file:line and the code) that a rule quotes. Verdicts and their wording stay in the rules. The vLLM hand-over
(`facts.vllm.handover`), the reward call (`facts.rewards`) and the batch arithmetic (`facts.trl.geometry`) have readers
of their own, built on the same two functions.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from trl_doctor.facts.inputs.text import line_of as _line, line_text as _line_text

# Where each trainer has lived across TRL releases, newest first.
_LOCATIONS = {
    "grpo": [("trl", "GRPOTrainer", "GRPOConfig")],
    "rloo": [("trl", "RLOOTrainer", "RLOOConfig")],
    "ppo": [("trl.experimental.ppo", "PPOTrainer", "PPOConfig"), ("trl", "PPOTrainer", "PPOConfig")],
    "async_grpo": [("trl.experimental.async_grpo", "AsyncGRPOTrainer", "AsyncGRPOConfig")],  # trl >= 1.10
}
_SOURCE_FILES = {
    "grpo": ["trainer/grpo_trainer.py"],
    "rloo": ["trainer/rloo_trainer.py"],
    "ppo": ["experimental/ppo/ppo_trainer.py", "trainer/ppo_trainer.py"],
    "async_grpo": ["experimental/async_grpo/async_grpo_trainer.py"],
}


def _lookup(trainer: str, index: int):
    for module_name, *names in _LOCATIONS[trainer]:
        try:
            with _without_import_side_effects():
                module = importlib.import_module(module_name)
                return getattr(module, names[index])
        except (ImportError, AttributeError):
            continue
    return None


# -- what importing TRL changes in transformers ----------------------------------------------------------------
# trl 0.17 and 0.18's grpo_config.py, with transformers <= 4.50.3, append "model_init_kwargs" to transformers'
# module-level `training_args._VALID_DICT_FIELDS` when imported, and every TrainingArguments.__post_init__ then
# reads that attribute: a later RLOOConfig(...) dies with "'RLOOConfig' object has no attribute
# 'model_init_kwargs'". A script that never imports GRPO never sees it; the doctor imports GRPO's classes for its own
# use (the capture's hooks, the fork server's preload), so it puts the list back as it was and remembers what TRL
# added, for the config classes that have those fields (`dict_fields_for`).
_REMOVED_DICT_FIELDS: list[str] = []


class _without_import_side_effects:
    """Around the doctor's own import of TRL's classes: transformers' `_VALID_DICT_FIELDS` is left as it was."""

    def __enter__(self):
        self.fields = _dict_fields()
        self.before = list(self.fields) if self.fields is not None else None

    def __exit__(self, *exc):
        if self.fields is None:
            return
        added = [f for f in self.fields if f not in self.before]
        if added:
            _REMOVED_DICT_FIELDS.extend(f for f in added if f not in _REMOVED_DICT_FIELDS)
            self.fields[:] = self.before


def _dict_fields() -> list | None:
    """transformers' module-level list of TrainingArguments fields read as JSON dicts (releases that keep it on the
    class instead have nothing a TRL import can change); None without transformers."""
    try:
        from transformers import training_args
    except ImportError:
        return None
    fields = getattr(training_args, "_VALID_DICT_FIELDS", None)
    return fields if isinstance(fields, list) else None


class dict_fields_for:
    """While `cls` (a TRL config class the script builds) runs its __post_init__: the fields TRL's import added to
    transformers' list and the doctor took out are back, where `cls` has them, as they are in the user's job."""

    def __init__(self, cls: type):
        self.wanted = [f for f in _REMOVED_DICT_FIELDS if f in getattr(cls, "__dataclass_fields__", {})]

    def __enter__(self):
        self.fields = _dict_fields() if self.wanted else None
        self.added = [f for f in self.wanted if self.fields is not None and f not in self.fields]
        if self.fields is not None:
            self.fields.extend(self.added)

    def __exit__(self, *exc):
        for name in self.added:
            if name in self.fields:
                self.fields.remove(name)


def trainer_class(trainer: str):
    return _lookup(trainer, 0)


def config_class(trainer: str):
    return _lookup(trainer, 1)


def field_default(cls, key: str, missing=None):
    """The default of dataclass `cls`'s field `key` (its default_factory called), or `missing`."""
    for f in dataclasses.fields(cls):
        if f.name == key:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return missing


def script_fields() -> set[str]:
    """Fields of TRL's ScriptArguments and ModelConfig: keys `trl <trainer> --config` accepts."""
    import trl

    names: set[str] = set()
    for cls_name in ("ScriptArguments", "ModelConfig"):
        cls = getattr(trl, cls_name, None)
        if cls is not None and dataclasses.is_dataclass(cls):
            names |= {f.name for f in dataclasses.fields(cls)}
    return names


def trl_root() -> Path | None:
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def trainer_source(trainer: str) -> tuple[str, str] | None:
    """(relative path, text) of the installed trainer's module, read without importing TRL."""
    root = trl_root()
    if root is None:
        return None
    for rel in _SOURCE_FILES[trainer]:
        path = root / rel
        if path.is_file():
            return f"trl/{rel}", path.read_text(encoding="utf-8")
    return None


def trainer_tree(trainer: str):
    """(relative path, text, parsed module) of the installed trainer's source, or None (no TRL, or unparsable)."""
    found = trainer_source(trainer)
    if found is None:
        return None
    try:
        return (*found, _parsed(found[1]))
    except SyntaxError:
        return None


@functools.lru_cache(maxsize=4)
def _parsed(text: str):
    """The module `text` parses to, once per text: batch-geometry and generation-settings both read GRPOTrainer's
    3,000-line source, and parsing it is a tenth of a second. Keyed by the text itself, so a source read from
    elsewhere (another release's, in a test) is parsed afresh; the readers only walk the tree, never change it."""
    import ast

    return ast.parse(text)


# -- readings of the installed trainers' source ------------------------------------------------------------

TRAINER_CLASS = {"grpo": "GRPOTrainer", "rloo": "RLOOTrainer", "ppo": "PPOTrainer"}

# `x.pad_token = x.eos_token` for the policy's tokenizer (reward tokenizers are handled separately by TRL)
_POLICY_PAD_RE = re.compile(r"^\s*([\w.]+)\.pad_token\s*=\s*\1\.eos_token\b", re.M)


def trainer_sets_pad_to_eos(trainer: str) -> tuple[bool | None, str]:
    """Whether the installed TRL trainer fills a missing pad token with eos, and the evidence (file:line)."""
    found = trainer_source(trainer)
    if found is None:
        return None, f"trl has no {TRAINER_CLASS[trainer]} source installed"
    rel, text = found
    for m in _POLICY_PAD_RE.finditer(text):
        if "reward" in m.group(1):
            continue
        line = text.count("\n", 0, m.start()) + 1
        return True, f"{rel}:{line}: `{m.group(0).strip()}`"
    return False, f"{rel} never assigns the policy tokenizer's pad_token"


def ppo_style(trainer: str) -> bool:
    """Whether the installed trainer is PPO-style: PPOTrainer, or the RLOOTrainer before trl 0.22 (its source takes no
    `reward_funcs`), which takes model objects, a tokenized `input_ids` dataset and ends responses at the config's
    `stop_token` / `stop_token_id` rather than at generation's eos. Read from the source, no import."""
    if trainer == "ppo":
        return True
    found = trainer_source(trainer) if trainer == "rloo" else None
    return found is not None and "reward_funcs" not in found[1]


_PAD_TO_ZERO = re.compile(r"torch\.masked_fill\(\s*(query_responses|queries)\s*,\s*~attention_mask\s*,\s*0\s*\)")


def pad_ids_zeroed(trainer: str) -> str | None:
    """Where the installed PPO-style trainer's helpers replace pad ids with 0 before a forward or generate
    (`torch.masked_fill(query_responses, ~attention_mask, 0)` in trl/trainer/utils.py, trl/experimental/ppo/...),
    as "file:line: `code`": the pad id itself never reaches an embedding. None when no such code is found."""
    if not ppo_style(trainer):
        return None
    for rel in ("trainer/utils.py", "experimental/ppo/ppo_trainer.py", "experimental/utils.py", "trainer/ppo_trainer.py"):
        text = module_text(rel)
        m = _PAD_TO_ZERO.search(text) if text else None
        if m is not None:
            assert text is not None  # searched
            return f"trl/{rel}:{_line(text, m.start())}: `{m.group(0)}`"
    return None


def trainer_mentions(trainer: str, text: str) -> bool:
    """Whether the installed trainer's source contains `text` (False without TRL)."""
    found = trainer_source(trainer)
    return found is not None and text in found[1]


def module_text(rel: str) -> str | None:
    """The text of an installed TRL module by its path under trl/ (`trainer/utils.py`), or None."""
    root = trl_root()
    path = root / rel if root is not None else None
    return path.read_text(encoding="utf-8") if path is not None and path.is_file() else None


def generation_without_kv_cache(trainer: str) -> tuple[bool | None, str]:
    """Whether the installed trainer generates (in the trainer, without vLLM) with gradient checkpointing still on,
    which makes transformers drop the KV cache in training mode (every new token recomputes the whole prefix), and
    the evidence. Newer TRL turns checkpointing off around generation (`gradient_checkpointing_disable()` in
    `unwrap_model_for_generation`, trl PR#3891)."""
    found = trainer_source(trainer)
    if found is None:
        return None, f"trl has no {TRAINER_CLASS[trainer]} source installed"
    rel, _ = found
    root = trl_root()
    utils = root / "models" / "utils.py" if root else None
    for name in ("unwrap_model_for_generation", "_unwrap_model_for_generation"):  # the private one from trl 1.x
        body, line = _function(utils, name) if utils else (None, None)
        if body is not None and "gradient_checkpointing_disable" in body:
            return False, f"trl/models/utils.py:{line}: {name} turns gradient checkpointing off to generate"
    if not trainer_mentions(trainer, "unwrap_model_for_generation"):
        return None, f"{rel} does not generate through unwrap_model_for_generation"
    return True, "trl/models/utils.py: unwrap_model_for_generation leaves gradient checkpointing on while the trainer generates"


# -- loading the policy ---------------------------------------------------------------------------------------

def create_model_default_dtype() -> str | None:
    """The dtype TRL's create_model_from_path loads with when no dtype is given ("float32" in TRL 1.x:
    `model_init_kwargs.get("dtype", "float32")` in trl/trainer/utils.py), or None when it has no such default."""
    utils = module_text("trainer/utils.py")
    if utils and re.search(r"""get\(\s*["']dtype["']\s*,\s*["']float32["']\s*\)""", utils):
        return "float32"
    return None


def dtype_key(trainer: str) -> str:
    """The model_init_kwargs key the installed TRL reads the load dtype from: `dtype` (1.x) or `torch_dtype` (0.x),
    read from the trainer and trl/trainer/utils.py (`dtype` when neither says)."""
    texts = []
    found = trainer_source(trainer)
    if found:
        texts.append(found[1])
    utils = module_text("trainer/utils.py")
    if utils is not None:
        texts.append(utils)
    text = "\n".join(texts)
    if re.search(r"""\.get\(\s*["']dtype["']""", text):
        return "dtype"
    if re.search(r"""\.get\(\s*["']torch_dtype["']""", text):
        return "torch_dtype"
    return "dtype"


def post_init_sets_bf16(cls) -> bool:
    """Whether a TRL __post_init__ in the config class's MRO turns bf16=None into `not fp16` (TRL >= 0.19)."""
    import inspect

    for klass in cls.__mro__:
        fn = vars(klass).get("__post_init__")
        if fn is None or not klass.__module__.startswith("trl"):
            continue
        try:
            if re.search(r"self\.bf16\s*=\s*not\b", inspect.getsource(fn)):
                return True
        except (OSError, TypeError):
            continue
    return False


# -- how log-probs are taken ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LogitsReading:
    """How the installed trainer scores completions, read from its source."""

    fused: bool  # TRL 1.x's fused, tiled LM head (`fused_lm_head=True`): no logits tensor
    tile: tuple[int, int]  # (tokens, vocabulary columns) of one fused-head tile
    keep_kwarg: str | None  # the keyword it passes to keep the completion's logits only (logits_to_keep)
    source: str | None  # the trainer's file, relative ("trl/trainer/grpo_trainer.py")


def logits_reading(trainer: str) -> LogitsReading:
    """How the installed GRPO/RLOO trainer gets log-probs: a fused, tiled LM head (TRL 1.x: `fused_lm_head=True`,
    tile sizes from trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE and trl/trainer/utils.py
    _CHUNKED_LOGPROB_CHUNK_SIZE), or the keyword it passes to keep the completion's logits only
    (`num_logits_to_keep` / `logits_to_keep`, trl#2770), or neither."""
    found = trainer_source(trainer) if trainer in ("grpo", "rloo") else None
    src = found[1] if found else ""
    rel = found[0] if found else None
    tile = [4096, 32768]
    if re.search(r"fused_lm_head\s*=\s*True", src):
        for i, (helper, name) in enumerate((("kernels/chunked_logprob.py", "TOKEN_CHUNK_SIZE"),
                                            ("trainer/utils.py", "_CHUNKED_LOGPROB_CHUNK_SIZE"))):
            text = module_text(helper)
            m = re.search(rf"^{name}\s*=\s*(\d+)", text, re.M) if text is not None else None
            if m:
                tile[i] = int(m.group(1))
        return LogitsReading(True, (tile[0], tile[1]), None, rel)
    kwarg = None
    if re.search(r"\bnum_logits_to_keep\s*=", src):
        kwarg = "num_logits_to_keep"
    elif re.search(r"""\blogits_to_keep\s*=\s*logits_to_keep|\[["']logits_to_keep["']\]\s*=""", src):
        kwarg = "logits_to_keep"
    return LogitsReading(False, (tile[0], tile[1]), kwarg, rel)


# -- prompts and vLLM ---------------------------------------------------------------------------------------

# trl#3644 (fixed in 0.19.1): truncated prompts decoded with skip_special_tokens=True before they go to vLLM
_STRIP_DECODE = re.compile(r"batch_decode\(\s*prompt_ids\s*,\s*skip_special_tokens\s*=\s*True")


def strips_truncated_prompts(trainer: str) -> str | None:
    """Where the installed trainer decodes truncated prompt ids with skip_special_tokens=True before sending
    them to vLLM (trl#3644), as "file:line: `code`"; None when it does not."""
    found = trainer_source(trainer)
    if found is None:
        return None
    rel, text = found
    m = _STRIP_DECODE.search(text)
    return None if m is None else f"{rel}:{_line(text, m.start())}: `{m.group(0)})`"


def vllm_code_mentions(trainer: str, name: str) -> bool:
    """Whether the installed trainer's vLLM code (its own source and trl/generation/vllm_generation.py) names
    `name`, a config field such as vllm_max_model_length: the field then reaches vLLM."""
    found = trainer_source(trainer)
    generation = module_text("generation/vllm_generation.py")
    return name in (found[1] if found else "") + (generation or "")


def vllm_code_int(trainer: str, name: str) -> int | None:
    """The integer the installed trainer's vLLM code passes for keyword `name` (`max_num_batched_tokens=4096` in its
    colocated engine's LLM(...) call), or None where it passes none as a literal."""
    found = trainer_source(trainer)
    text = (found[1] if found else "") + (module_text("generation/vllm_generation.py") or "")
    m = re.search(rf"\b{re.escape(name)}\s*=\s*(\d+)\b", text)
    return int(m.group(1)) if m else None


# the policy tokenizer's call on plain-text prompts: `self.processing_class(text=prompts ...)` (1.x),
# `self.processing_class(text=prompts_text, ..., add_special_tokens=False)` (0.16-0.24), positional in 0.14-0.15
_PLAIN_CALL = re.compile(r"self\.processing_class\(\s*(?:text=)?prompts(?:_text)?\b")
_NO_SPECIALS = re.compile(r"""add_special_tokens["']?\s*[=:]\s*False""")


@dataclass(frozen=True)
class PromptTokenization:
    """How the installed trainer turns a dataset prompt into token ids, read from its source."""

    maybe_apply: bool  # chat prompts go through maybe_apply_chat_template (the generation prompt by the last role)
    plain_special_tokens: bool  # plain-text prompts are tokenized with special tokens (a BOS prepended)
    evidence: str  # "trl/trainer/grpo_trainer.py:1234: `self.processing_class(text=prompts, ...)`"
    vllm_gets_text: bool  # vLLM gets the rendered text and tokenizes it again (up to 0.24, trl#3853)
    takes_template_kwargs: bool  # the trainer hands the config's chat_template_kwargs to the template


def prompt_tokenization(trainer: str) -> PromptTokenization:
    """How the installed trainer renders and tokenizes prompts: PPO (and RLOO before 0.22) take pre-tokenized
    input_ids, which TRL's example scripts make with the tokenizer's defaults; GRPO-style trainers render chat
    prompts with the template and tokenize plain ones in the call `_PLAIN_CALL` finds."""
    found = trainer_source(trainer)
    rel, text = found if found is not None else (None, "")
    maybe_apply = "maybe_apply_chat_template(" in text
    special = True
    old_api = ppo_style(trainer)
    if found is None or old_api:
        # examples/scripts/ppo/ppo.py: `tokenizer(element["prompt"], padding=False)`
        evidence = ("TRL's example script tokenizes `prompt` with the tokenizer's defaults "
                    "(examples/scripts/ppo/ppo.py), special tokens included")
    else:
        m = _PLAIN_CALL.search(text)
        if m is None:
            evidence = f"{rel}: no plain-prompt tokenizer call found; assumed the tokenizer's defaults"
        else:
            opened = text.index("(", m.start()) + 1
            args = _call_args(text, opened)
            # 0.25 passes the options as a dict built just before the call (`**processor_kwargs`)
            before = text[max(0, m.start() - 1500):m.start()]
            special = not (bool(_NO_SPECIALS.search(args)) or ("**" in args and bool(_NO_SPECIALS.search(before))))
            call = " ".join(text[m.start():opened + len(args) + 1].split())
            evidence = f"{rel}:{_line(text, m.start())}: `{call if len(call) < 160 else call[:157] + '...'}`"
    # up to 0.24 the rendered text itself went to vLLM, which tokenizes text with add_special_tokens=True (trl#3853)
    return PromptTokenization(maybe_apply, special, evidence, maybe_apply and not old_api,
                              "chat_template_kwargs" in text)


def _call_args(text: str, start: int) -> str:
    """The argument text of the call whose name ends at `start` (just after the opening parenthesis)."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1]


# -- PEFT -------------------------------------------------------------------------------------------------------

PEFT_HELPER_MODULES = ("trainer/utils.py", "models/utils.py")  # where TRL keeps create_model_from_path, prepare_peft_model
_CALL_GRADS = re.compile(r"\.enable_input_require_grads\(\)")


def model_loader(trainer: str) -> tuple[str, bool, str]:
    """(how the installed trainer loads model_name_or_path, whether it reads AutoConfig first, evidence): TRL's
    create_model_from_path (trl/trainer/utils.py or trl/models/utils.py), AutoConfig then the architecture it
    names (0.21-0.25), AutoModelForCausalLM.from_pretrained, or TRL's example script for PPO-style trainers."""
    found = trainer_source(trainer)
    script = ("AutoModelForCausalLM.from_pretrained (TRL's example script, examples/scripts/ppo/ppo.py)", False,
              "PPO-style trainers take model instances: TRL's example script loads them with "
              "AutoModelForCausalLM.from_pretrained")
    if found is None or ppo_style(trainer):
        return script
    rel, text = found
    m = re.search(r"\bcreate_model_from_path\(", text)
    root = trl_root()
    if m is not None and root is not None:
        for helper in PEFT_HELPER_MODULES:
            body, line = _function(root / helper, "create_model_from_path")
            if body is not None:
                reads = "AutoConfig.from_pretrained(" in body
                return ("TRL's create_model_from_path", reads,
                        f"{rel}:{_line(text, m.start())} calls create_model_from_path (trl/{helper}:{line}), which "
                        + ("reads AutoConfig.from_pretrained(model_id) first" if reads else "does not read AutoConfig first"))
    m = re.search(r"AutoConfig\.from_pretrained\(model", text)
    if m is not None:  # trl 0.21-0.25: the architecture is read from config.json inside the trainer
        return ("AutoConfig.from_pretrained and the architecture it names", True,
                f"{rel}:{_line(text, m.start())}: `{_line_text(text, m.start())}` before loading the model")
    m = re.search(r"AutoModelForCausalLM\.from_pretrained\(", text)
    if m is not None:
        return ("AutoModelForCausalLM.from_pretrained", False,
                f"{rel}:{_line(text, m.start())}: AutoModelForCausalLM.from_pretrained (transformers attaches an adapter "
                "folder's adapter to its base)")
    return ("the trainer's model loader", False, f"{rel}: no model loading call recognised")


def enables_input_grads(trainer: str) -> tuple[bool, str]:
    """Whether the installed trainer (or a TRL helper it calls, in trl/trainer/utils.py or trl/models/utils.py, through
    other helpers) calls enable_input_require_grads(), with where."""
    found = trainer_source(trainer)
    if found is None:
        return False, f"trl has no {TRAINER_CLASS[trainer]} source"
    rel, text = found
    m = _CALL_GRADS.search(text)
    if m is not None:
        return True, f"{rel}:{_line(text, m.start())}: `{_line_text(text, m.start())}` (under `{_guard(text, m.start())}`)"
    root = trl_root()
    callers: dict[str, str] = {}  # helper function -> where it (or what it calls) enables input gradients
    bodies: dict[str, tuple[str, str]] = {}
    for helper in PEFT_HELPER_MODULES:
        path = root / helper if root is not None else None
        if path is None or not path.is_file():
            continue
        for name, body, line in _functions(path.read_text(encoding="utf-8")):
            bodies[name] = (body, f"trl/{helper}:{line}")
    for name, (body, where) in bodies.items():
        if _CALL_GRADS.search(body):
            callers[name] = where
    changed = True
    while changed:  # helpers calling helpers (prepare_peft_model -> enable_gradient_checkpointing)
        changed = False
        for name, (body, where) in bodies.items():
            called = [c for c in callers if re.search(rf"\b{c}\(", body)]
            if name not in callers and called:
                callers[name] = f"{where} via {called[0]}"
                changed = True
    for name, where in callers.items():
        m = re.search(rf"(?<!def )\b{name}\(", text)
        if m is not None:
            return True, f"{rel}:{_line(text, m.start())} calls {name} ({where}), which calls enable_input_require_grads()"
    return False, f"{rel} (and trl/{', trl/'.join(PEFT_HELPER_MODULES)}) never call enable_input_require_grads() for it"


def trainer_takes_peft(trainer: str) -> bool | None:
    """Whether the installed trainer's __init__ takes a peft_config, read from its source (no import)."""
    found = trainer_source(trainer)
    if found is None:
        return None
    text = found[1]
    start = text.find(f"class {TRAINER_CLASS[trainer]}(")
    init = re.compile(r"def __init__\((.*?)\)\s*(?:->\s*None\s*)?:", re.S).search(text, max(start, 0))
    return None if init is None else "peft_config" in init.group(1)


def _functions(text: str):
    """(name, body, line) of every top-level function of a module's source."""
    starts = [m for m in re.finditer(r"^def (\w+)\(", text, re.M)]
    for m in starts:
        end = re.compile(r"^[^\s)#]", re.M).search(text, m.end())  # the next top-level statement
        stop = end.start() if end else len(text)
        yield m.group(1), text[m.start():stop], _line(text, m.start())


def _function(path: Path, name: str) -> tuple[str | None, int | None]:
    if not path.is_file():
        return None, None
    for fname, body, line in _functions(path.read_text(encoding="utf-8")):
        if fname == name:
            return body, line
    return None, None


def _guard(text: str, pos: int) -> str:
    """The nearest enclosing `if` line above `pos`."""
    start = text.rfind("\n", 0, pos) + 1
    indent = len(text[start:pos]) - len(text[start:pos].lstrip())
    for prev in reversed(text[:start].splitlines()):
        stripped = prev.strip()
        if stripped and not stripped.startswith("#") and len(prev) - len(prev.lstrip()) < indent:
            return " ".join(stripped.split())[:160]
    return "?"


# -- PPO ----------------------------------------------------------------------------------------------------

# the dropout loop over the four models, with or without the `if module is not None` guard (0.13+)
_DROPOUT_LOOP = re.compile(
    r"for module in \[[^\]]*value_model[^\]]*\]:\s*\n\s*(if module is not None:\s*\n\s*)?disable_dropout_in_model\(module\)"
)
_WRAPPER = re.compile(r"getattr\(value_model,\s*value_model\.base_model_prefix\)")


def ppo_without_value_model() -> tuple[str, str | None] | None:
    """What the installed PPOTrainer trips on when value_model is None, read from its source: ("modules", where)
    when its dropout loop calls disable_dropout_in_model on every model unguarded (before trl 0.13), else
    ("base_model_prefix", where or None), its `getattr(value_model, value_model.base_model_prefix)`; None without
    a PPOTrainer source."""
    found = trainer_source("ppo")
    if found is None:
        return None
    rel, text = found
    m = _DROPOUT_LOOP.search(text)
    if m is not None and m.group(1) is None:
        return "modules", f"{rel}:{_line(text, m.end())}: `{_line_text(text, m.end())}`"
    w = _WRAPPER.search(text)
    return "base_model_prefix", (f"{rel}:{_line(text, w.start())}: `{_line_text(text, w.start())}`" if w is not None else None)


_TRAINED = re.compile(r"self\.model\s*=\s*PolicyAndValueWrapper\(\s*self\.policy_model,\s*self\.value_model\s*\)")


def ppo_trains_value_model() -> str | None:
    """Where the installed PPOTrainer makes the value model part of the model it optimises (`self.model =
    PolicyAndValueWrapper(self.policy_model, self.value_model)`, the optimizer's parameters), as "file:line: code";
    the reward model stays outside it, for inference only. None when the source says neither."""
    found = trainer_source("ppo")
    if found is None:
        return None
    rel, text = found
    m = _TRAINED.search(text)
    return f"{rel}:{_line(text, m.start())}: `{_line_text(text, m.start())}`" if m is not None else None


# -- datasets -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamSupport:
    """How the installed trainer takes a streamed dataset (an IterableDataset), read from its source."""

    kind: str  # "repeats" (repeat_iterable_dataset, trl >= 1.9), "refuses" (NotImplementedError), "len" (takes
    #            len(train_dataset) at start-up) or "none" (no support: neither refuses nor repeats it)
    evidence: str  # where, as "file:line: code" or "file ..."
    refusal: str = ""  # the text of TRL's NotImplementedError, for "refuses"


def stream_support(trainer: str) -> StreamSupport | None:
    """How the installed trainer handles a streamed dataset; None without its source."""
    found = trainer_source(trainer)
    if found is None:
        return None
    rel, text = found
    if "repeat_iterable_dataset" in text:
        return StreamSupport("repeats", f"{rel} repeats a streamed dataset's prompts (repeat_iterable_dataset)")
    m = re.search(r"Iterable datasets are not yet supported[^\"]*", text)
    if m is not None:
        return StreamSupport("refuses", f"{rel}:{_line(text, m.start())}: NotImplementedError('{m.group(0)}')",
                             m.group(0).strip())
    m = re.search(r"len\(train_dataset\)", text)
    if m is not None:
        return StreamSupport("len", f"{rel}:{_line(text, m.start())}: `{m.group(0)}`")
    return StreamSupport("none", f"{rel} neither refuses nor repeats an IterableDataset")


def liger_loss_without_aux_loss(trainer: str) -> str | None:
    """Where the installed trainer, asked for Liger kernels (`use_liger_kernel`), computes its loss with a fused Liger
    loss that adds no Mixture-of-Experts load-balancing loss, while its own loss adds one (`aux_loss_enabled`:
    router_aux_loss_coef x aux_loss): trl 1.9-1.13 GRPOTrainer.compute_loss sends `use_liger_kernel` to
    `compute_liger_loss`, which never reads an aux loss (trl#7009; trl 1.14 computes the aux loss on its full-logits
    path). "trl/<file>:<line>" of that call in compute_loss, or None (no such path, or one that adds it)."""
    import ast

    found = trainer_tree(trainer)
    if found is None or trainer not in TRAINER_CLASS:
        return None
    rel, text, tree = found
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == TRAINER_CLASS[trainer]), None)
    methods = {n.name: n for n in (cls.body if cls is not None else ()) if isinstance(n, ast.FunctionDef)}
    liger, compute = methods.get("compute_liger_loss"), methods.get("compute_loss")
    if liger is None or compute is None or "aux_loss_enabled" not in text:
        return None
    if "aux_loss" in (ast.get_source_segment(text, liger) or ""):
        return None
    call = next((n for n in ast.walk(compute) if isinstance(n, ast.Attribute) and n.attr == "compute_liger_loss"), None)
    return f"{rel}:{call.lineno}" if call is not None else None
