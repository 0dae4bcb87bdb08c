"""Model facts: where a model reference resolves (a local folder or the hub cache, never a download), how
many parameters a model holds, and the score head a reward or value model reaches its trainer with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trl_doctor.cache import fact
from trl_doctor.context.config import resolve_artifact
from trl_doctor.wording import load_error
from trl_doctor.context.twin import parameter_count

__all__ = ["parameter_count", "resolve_artifact"]


def score_rows(folder) -> int | None:
    """Rows of a sequence classifier's head (`score.weight`, `classifier.weight`) in the checkpoint's safetensors,
    read from the file headers only (no weights); None when there is none to read. A config may leave num_labels at
    its default of 2 over a 1-row head, which `num_labels=1` (TRL's example scripts) loads as it is."""
    import glob
    import os

    try:
        from safetensors import safe_open
    except ImportError:
        return None
    for file in sorted(glob.glob(os.path.join(str(folder), "*.safetensors"))):
        try:
            with safe_open(file, framework="pt") as f:
                for key in f.keys():
                    if key.endswith(("score.weight", "classifier.weight")):
                        return int(f.get_slice(key).get_shape()[0])
        except Exception:
            continue
    return None


SCRIPTS_LOAD = "AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)"  # TRL's scripts and trainers
SCRIPT_OBJECT = "the script's own object"  # a launch command's script passed the model itself


def score_of(model) -> str | None:
    """A model's `score` head as 'Linear(64 → 1)', or None when it has none (a causal LM, or a classifier whose
    head is called something else): PPO and GRPO call `.score` / `.logits[:, 0]` on reward and value models."""
    import torch

    score = getattr(model, "score", None)
    if not isinstance(score, torch.nn.Module):
        return None
    weight = getattr(score, "weight", None)
    if weight is not None and weight.dim() == 2:
        return f"{type(score).__name__}({weight.shape[1]} → {weight.shape[0]})"
    return type(score).__name__


@dataclass(frozen=True)
class ScoreHead:
    """The score head a reward or value model reaches the trainer with, and whether its checkpoint trained it."""

    checkpoint: str | None  # config.json's first architecture (None: it names none)
    classifier: bool  # that architecture is a *ForSequenceClassification
    loaded_as: str | None  # the class the trainer gets (None: it cannot be built, see error)
    by: str  # how: the script's own object, or TRL's scripts' `AutoModelForSequenceClassification(num_labels=1)`
    head: str | None  # the trainer's `score` head ('Linear(64 → 1)'); None when that class has none
    fresh: bool  # the head is newly initialised: the checkpoint holds no weights for it (a causal LM's folder)
    error: str | None = None  # why AutoModelForSequenceClassification cannot build it
    other_head: str | None = None  # the head the class has instead of `score` ('classifier'), when it has one


def score_head(mcfg, folder, live: tuple[str, str | None] | None = None, trust_remote_code: bool = False) -> ScoreHead:
    """What a reward or value model's score head is where the trainer uses it. `live` is (class, score head) of
    the object a launch command's script passed; without it the model is built on the meta device as TRL's scripts
    load one, `AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)`: a checkpoint that is no
    sequence classifier (a causal LM) gets a new, randomly initialised 1-row head there (transformers' "newly
    initialized: ['score.weight']"), and so does a classifier folder whose weights hold no head."""
    import copy
    import glob
    import os

    archs = list(getattr(mcfg, "architectures", None) or [])
    classifier = any(a.endswith("ForSequenceClassification") for a in archs)
    rows = score_rows(folder)
    has_weights = bool(glob.glob(os.path.join(str(folder), "*.safetensors")))
    untrained = not classifier or (has_weights and rows is None)
    checkpoint = archs[0] if archs else None
    if live is not None:
        cls, head = live
        return ScoreHead(checkpoint, classifier, cls, SCRIPT_OBJECT, head, head is not None and untrained)
    import torch
    from transformers import AutoModelForSequenceClassification

    cfg = mcfg
    labels = 1 if not classifier else rows  # a config that never had labels, or the rows the weights hold
    if labels is not None and labels != mcfg.num_labels:
        cfg = copy.deepcopy(mcfg)
        cfg.num_labels = labels
    try:
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(cfg, trust_remote_code=trust_remote_code)
    except Exception as exc:
        return ScoreHead(checkpoint, classifier, None, SCRIPTS_LOAD, None, False, load_error(exc, 400))
    head = score_of(model)
    other = next((name for name in ("classifier", "v_head", "head") if hasattr(model, name)), None) if head is None else None
    return ScoreHead(checkpoint, classifier, type(model).__name__, SCRIPTS_LOAD, head, head is not None and untrained,
                     other_head=other)


# -- a reward or value model's folder --------------------------------------------------------------------------

SCORER_TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json")  # where its pad and eos tokens are written


@dataclass(frozen=True)
class ScorerFolder:
    """A reward or value model's folder as the trainer reads it, without weights: transformers' config
    (AutoConfig), its labels, and its tokenizer's pad and eos tokens as its files say (no tokenizer loaded)."""

    path: Path
    config: Any  # the AutoConfig; None when it does not load (config_error says why)
    config_error: str | None
    architectures: list[str]  # as transformers reads them; config.json's own when AutoConfig fails
    num_labels: int | None  # likewise (a config that saves no id2label has transformers' default of 2 labels)
    id2label: dict[str, Any]
    pad_token: str | None  # tokenizer_config.json / special_tokens_map.json
    eos_token: str | None
    tokenizer_files: bool  # either of those files reads as JSON, or tokenizer.json is there


@fact
def scorer_folder(ctx, path: Path) -> ScorerFolder:
    """The reward or value model folder `path` (config.json and the tokenizer files), read once per check for
    every rule that judges it (reward-functions' reward model, value-model's reward and value models)."""
    from transformers import AutoConfig

    from trl_doctor.facts.inputs.text import read_json

    try:
        mcfg = AutoConfig.from_pretrained(str(path), trust_remote_code=ctx.options.trust_remote_code, local_files_only=True)
        error = None
    except Exception as exc:  # unreadable or remote code: what config.json says as a file
        mcfg, error = None, load_error(exc)
    n: int | None
    data: dict | None
    if mcfg is not None:
        archs = list(getattr(mcfg, "architectures", None) or [])
        labels = {str(k): v for k, v in (getattr(mcfg, "id2label", None) or {}).items()}
        n = int(mcfg.num_labels)
    else:
        data = read_json(path / "config.json") or {}
        archs = list(data.get("architectures") or [])
        labels = data.get("id2label") or {}
        n = len(labels) if labels else data.get("num_labels")
    pad = eos = None
    found = False
    for name in SCORER_TOKENIZER_FILES:
        data = read_json(path / name)
        if data is None:
            continue
        found = True
        pad = pad or _token_text(data.get("pad_token"))
        eos = eos or _token_text(data.get("eos_token"))
    found = found or (path / "tokenizer.json").is_file()
    return ScorerFolder(path, mcfg, error, archs, n, labels, pad, eos, found)


@fact
def scorer_head(ctx, path: Path, live: tuple[str, str | None] | None = None) -> ScoreHead | None:
    """The score head the trainer gets from the reward or value model at `path` (`live`: the script's own object,
    see `score_head`); None when its config does not load."""
    folder = scorer_folder(ctx, path)
    if folder.config is None:
        return None
    return score_head(folder.config, path, live, trust_remote_code=ctx.options.trust_remote_code)


@fact
def scorer_tokenizer(ctx, path: Path) -> tuple[Any, str | None]:
    """(the tokenizer of the reward or value model at `path`, loaded as the trainer loads it; None and why when it
    does not load)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=ctx.options.trust_remote_code,
                                             local_files_only=True), None
    except Exception as exc:
        return None, load_error(exc)


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


# -- the model's family and its code -------------------------------------------------------------------------

def config_json(ctx) -> dict:
    """The candidate's config.json as a plain dict (no transformers, no remote code); {} without one."""
    if ctx.kind == "static":
        return ctx.model_json
    return ctx.read_json(ctx.model_file("config.json")) or {}


def text_config_json(ctx) -> dict:
    """config.json's text part: its `text_config` for a vision-language model, else the file itself."""
    cfg = config_json(ctx)
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def generation_json(ctx) -> dict | None:
    """The candidate's generation_config.json as a plain dict, or None without one."""
    if ctx.kind == "static":
        return ctx.gen_json
    return ctx.read_json(ctx.model_file("generation_config.json"))


def model_types(ctx) -> tuple[str, ...]:
    """config.json's `model_type`, then its text_config's (a vision-language Gemma 3 is gemma3 over gemma3_text)."""
    cfg = config_json(ctx)
    found = [cfg.get("model_type")]
    if isinstance(cfg.get("text_config"), dict):
        found.append(cfg["text_config"].get("model_type"))
    return tuple(str(t) for t in found if t)


def remote_code(ctx) -> dict | None:
    """The model's own code, as config.json declares it (`auto_map`), read without running it: None when it has
    none; else {"auto_map", "model_type", "native" (the installed transformers ships this model_type, so a load
    without trust_remote_code takes transformers' own class instead of the model's code), "trusted_by" (the key of
    the trainer config that lets TRL run it, or None)}."""
    cfg = config_json(ctx)
    auto_map = cfg.get("auto_map")
    if not isinstance(auto_map, dict) or not auto_map:
        return None
    model_type = cfg.get("model_type")
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        native = model_type in CONFIG_MAPPING_NAMES
    except ImportError:
        native = False
    return {"auto_map": {str(k): str(v) for k, v in auto_map.items()}, "model_type": model_type, "native": native,
            "trusted_by": trusted_by(ctx)}


def trusted_by(ctx) -> str | None:
    """The trainer config's key that makes TRL load the model with trust_remote_code=True, or None.

    `model_init_kwargs.trust_remote_code` reaches from_pretrained in every release; the top-level
    `trust_remote_code` is the config class's own field where the installed TRL has one (GRPOConfig in 1.x puts it
    into model_init_kwargs), and TRL's ModelConfig's otherwise (the `trl grpo` script passes it to from_pretrained)."""
    from trl_doctor.facts.launch.settings import model_init_kwargs

    try:
        kwargs = model_init_kwargs(ctx)
    except Exception:  # a refused model_init_kwargs value: trainer-config reports it
        kwargs = {}
    if isinstance(kwargs, dict) and kwargs.get("trust_remote_code") is True:
        return "model_init_kwargs.trust_remote_code"
    if ctx.config.raw.get("trust_remote_code") is True:
        return "trust_remote_code"
    return None
