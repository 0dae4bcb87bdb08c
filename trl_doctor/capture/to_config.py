"""What the script built, turned into the check's config and live objects.

The rules read a `DoctorConfig` (the trainer, its keys, the model and tokenizer folders, reward function names)
and the context's artifacts. For a launch command the keys are the ones the script set on TRL's config object
(as TRL's parser typed them), plus the keys TRL's own scripts use for what the script passed as objects (the
model's folder, `reward_model_path`, `value_model_path`, the LoRA settings); the artifacts are the live objects
(the tokenizer with the script's added tokens and pad token, the dataset as the script prepared it, the model's
structure, the reward callables).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from trl_doctor.context.config import DoctorConfig, local_path, resolve_artifact
from trl_doctor.vocabulary import OTHER_TRAINER
from trl_doctor.context.context import Live
from trl_doctor.errors import InputError
from .run import Captured

_CONFIG_KEYWORDS = ("args", "config")  # TRL's config object: `args`, or `config` in old PPO/RLOO
_POLICY_KEYWORDS = ("model", "policy")
_REF_KEYWORDS = ("ref_model", "ref_policy")
_TOKENIZER_KEYWORDS = ("processing_class", "tokenizer")


def to_config(captured: Captured) -> tuple[DoctorConfig, Live]:
    rec = captured.recorder
    arguments = rec.arguments
    cwd = Path(captured.command.cwd)
    shown = captured.launched.name
    args = _first(arguments, _CONFIG_KEYWORDS)
    raw: dict[str, Any] = {}
    recipe = _recipe(captured.launched.args, cwd)
    recipe_keys = _recipe_keys(recipe)
    set_keys, relaxed = _config_keys(rec, args, set(recipe_keys) | _flags(captured.launched.args),
                                     captured.launched.world)
    raw.update(set_keys)

    model = _first(arguments, _POLICY_KEYWORDS)
    model_path = _model_path(model)
    if model_path is None:
        raise InputError(f"{shown}: the trainer got a model trl-doctor cannot place on disk ({type(model).__name__})")
    raw["model_name_or_path"] = local_path(model_path, cwd)
    if not isinstance(model, str):
        init = _init_kwargs(rec, model)
        if init and not raw.get("model_init_kwargs"):
            raw["model_init_kwargs"] = init
    elif arguments.get("quantization_config") is not None:  # TRL >= 1.x puts the trainer's into model_init_kwargs
        raw["model_init_kwargs"] = {**(raw.get("model_init_kwargs") or {}),
                                    **_quantization({"quantization_config": arguments["quantization_config"]})}
    tokenizer = _first(arguments, _TOKENIZER_KEYWORDS)
    tok_path = getattr(tokenizer, "name_or_path", None) if tokenizer is not None else None
    if tok_path and local_path(tok_path, cwd) != raw["model_name_or_path"]:
        raw["tokenizer_name_or_path"] = local_path(tok_path, cwd)

    aux_models: dict[str, tuple[str, str | None]] = {}
    rewards = _rewards(arguments.get("reward_funcs"), cwd, raw, aux_models)
    raw.update(_agent_parts(arguments))
    for key, names in (("reward_model_path", ("reward_model",)), ("value_model_path", ("value_model",)),
                       ("sft_model_path", _REF_KEYWORDS)):
        given = _first(arguments, names)
        given_path = _model_path(given)
        if given_path is not None:
            raw[key] = local_path(given_path, cwd)
            if key != "sft_model_path" and not isinstance(given, (str, os.PathLike)):
                aux_models[key] = _aux_model(given)
    raw.update(_peft_keys(arguments.get("peft_config"), model))
    peft_given = arguments.get("peft_config")
    if peft_given is not None and hasattr(peft_given, "peft_type"):  # the step gets the script's own config object
        from ..facts.rewards import register_live

        raw["peft_config"] = register_live(peft_given)
    if captured.launched.accelerate_config:
        raw["accelerate_config"] = captured.launched.accelerate_config

    where = rec.where
    path = recipe or Path(captured.launched.script or (where[0] if where else cwd / "script"))
    model_artifact = resolve_artifact(raw["model_name_or_path"], cwd, shown, "model", need="config.json")
    tok_artifact = model_artifact if "tokenizer_name_or_path" not in raw else \
        resolve_artifact(raw["tokenizer_name_or_path"], cwd, shown, "processing_class", need="tokenizer_config.json")
    fmt = "json" if path.suffix.lower() == ".json" else ("yaml" if recipe else "script")
    cfg = DoctorConfig(path, fmt, raw, rec.trainer_kind or OTHER_TRAINER, False, model_artifact, tok_artifact,
                       _added_tokens(tokenizer, tok_artifact.path), rewards)
    live = Live(
        command=captured.command.text, script=captured.launched.script, where=where, trainer_cls=rec.trainer_cls,
        args=args, tokenizer=tokenizer, model=None if isinstance(model, str) else model,
        dataset=arguments.get("train_dataset"), eval_dataset=arguments.get("eval_dataset"),
        data_collator=arguments.get("data_collator"), held_tokenizers=dict(rec.held_tokenizers), relaxed=relaxed,
        machine_relaxed=dict(rec.machine),
        recipe=str(recipe) if recipe else None,
        recipe_keys=recipe_keys, parser_types=rec.parser_types,
        processes=captured.launched.processes, world=captured.launched.world,
        processes_from=captured.launched.processes_from, machines=captured.launched.machines,
        machines_from=captured.launched.machines_from, notes=(*captured.launched.notes, *_unchecked(rec), *_bypassed(rec)),
        batch_note=rec.batch_notes.get(id(args)) if args is not None else None,
        ref_is_policy=not isinstance(model, str) and _first(arguments, _REF_KEYWORDS) is model,
        aux_models=aux_models,
        peft_config_given=arguments.get("peft_config") is not None,
        async_grpo=rec.async_grpo, bypassed=rec.bypassed, built=rec.built,
        model_keys=_model_keys(list(captured.launched.args), recipe,
                               {f.name for f in dataclasses.fields(args)} if dataclasses.is_dataclass(args) else set()),
    )
    return cfg, live


def _first(arguments: dict, names) -> Any:
    return next((arguments[n] for n in names if arguments.get(n) is not None), None)


def _config_keys(rec, args, explicit: set[str], world: int = 1) -> tuple[dict[str, Any], dict[str, tuple[Any, str]]]:
    """The keys the script set on TRL's config object: of the keywords its constructor got (TRL's parser passes
    every field), those that differ from the field's default or that the recipe sets; for a config class of the
    script's own, its fields as built. The keys relaxed for this machine are reported, not kept."""
    if args is None:
        return {}, {}
    relaxed = dict(rec.relaxed.get(id(args), {}))
    recorded = rec.config_kwargs.get(id(args))
    built = recorded is None or recorded[0] is not args
    given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(args) if f.init} if built else \
        dict(recorded[1])
    keys = {}
    for f in dataclasses.fields(args):
        if f.init and f.name in given and (f.name in explicit or _differs(given[f.name], f)):
            keys[f.name] = given[f.name]
    if built:
        keys = _not_derived(type(args), keys, world)
    if "use_cpu" in relaxed:
        keys.pop("use_cpu", None)
    return {k: _plain(v) for k, v in keys.items()}, relaxed


def _not_derived(cls: type, keys: dict[str, Any], world: int = 1) -> dict[str, Any]:
    """Of a built config's non-default fields, those its `__post_init__` did not derive from the others (TRL
    fills generation_batch_size, steps_per_generation, bf16...): a field is derived when the config rebuilt
    without it, at the world size the script built it at (capture/world.py), gets the same value."""
    if world > 1:
        from trl_doctor.facts.trl.geometry import probe_class

        cls = probe_class(cls, world)
    out = {}
    for key, value in keys.items():
        try:
            rebuilt = cls(**{k: v for k, v in keys.items() if k != key})
        except Exception:  # it cannot be left out
            out[key] = value
            continue
        if _plain(getattr(rebuilt, key, None)) != _plain(value):
            out[key] = value
    return out


def _differs(value: Any, f: dataclasses.Field) -> bool:
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return True
    try:
        return bool(_plain(value) != _plain(default))
    except Exception:  # an object without a usable ==
        return value is not default


def _plain(value: Any) -> Any:
    """Enum values as their strings (TRL's parser gives SchedulerType and friends), containers walked."""
    import enum

    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _model_path(model: Any) -> str | None:
    if model is None:
        return None
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    name = getattr(base, "name_or_path", None) or getattr(getattr(base, "config", None), "_name_or_path", None)
    return str(name) if name else None


def _init_kwargs(rec, model) -> dict[str, Any]:
    """The dtype, attention, device_map and quantization the script loaded the policy with, as `model_init_kwargs`
    says them (distributed-setup judges the device_map against the launch's processes, precision-and-attention the
    attention and quantization against the launch machine)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for load in rec.loads:
        if load.model is base:
            out = _quantization(load.kwargs)
            for key in ("dtype", "torch_dtype", "attn_implementation", "device_map"):
                if load.kwargs.get(key) is not None:
                    value = load.kwargs[key]
                    if key == "device_map" and isinstance(value, dict):
                        out[key] = {str(k): v if isinstance(v, (int, str)) else str(v) for k, v in value.items()}
                        continue
                    out[key] = str(value).replace("torch.", "") if not isinstance(value, (str, int)) else value
            return out
    return {}


def _quantization(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`quantization_config` (an object or a dict) as the plain keys that say what it needs, and the bare
    `load_in_4bit` / `load_in_8bit` keywords."""
    out: dict[str, Any] = {k: True for k in ("load_in_4bit", "load_in_8bit") if kwargs.get(k) is True}
    quant = kwargs.get("quantization_config")
    if quant is None:
        return out
    if not isinstance(quant, dict):
        try:
            quant = quant.to_dict()
        except Exception:  # an object of the script's own
            quant = {"quant_method": type(quant).__name__}
    method = quant.get("quant_method")
    kept = {k: quant[k] for k in ("load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type") if quant.get(k) is not None}
    out["quantization_config"] = {"quant_method": str(getattr(method, "value", method)), **kept}
    return out


def _aux_model(model: Any) -> tuple[str, str | None]:
    """(class, score head) of a reward or value model the script passed as an object."""
    from ..facts.inputs.models import score_of

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return type(base).__name__, score_of(base)


def _rewards(value: Any, cwd: Path, raw: dict, aux_models: dict) -> list[str]:
    """Reward functions as names the facts layer resolves (live callables registered under theirs); a reward
    model (a path or a model) becomes `reward_model_name_or_path`, as in TRL's GRPO script."""
    from ..facts.rewards import register_live

    names = []
    for item in value if isinstance(value, (list, tuple)) else ([value] if value is not None else []):
        if isinstance(item, str):
            if Path(cwd, item).is_dir() or Path(item).is_dir():
                raw["reward_model_name_or_path"] = local_path(item, cwd)
            else:
                names.append(item)
        elif hasattr(item, "config") and hasattr(item, "forward"):
            path = _model_path(item)
            if path:
                raw["reward_model_name_or_path"] = local_path(path, cwd)
                aux_models["reward_model_name_or_path"] = _aux_model(item)
        elif callable(item):
            names.append(register_live(item))
    if names:
        raw["reward_funcs"] = list(names)
    return names


def _agent_parts(arguments: dict) -> dict[str, Any]:
    """The trainer's tools, environment factory and rollout function as the script passed them (GRPOTrainer's
    `tools`, `environment_factory`, `rollout_func`), each live callable under the name the facts layer resolves, so
    that the smoke step builds the trainer with them (TRL checks the chat template for tool calling, probes each
    environment's `reset`)."""
    from ..facts.rewards import register_live

    out: dict[str, Any] = {}
    tools = arguments.get("tools")
    if isinstance(tools, (list, tuple)) and tools and all(callable(t) for t in tools):
        out["tools"] = [register_live(t) for t in tools]
    factory = arguments.get("environment_factory")
    if isinstance(factory, dict) and factory and all(callable(f) for f in factory.values()):
        out["environment_factory"] = {str(k): register_live(f) for k, f in factory.items()}
    elif callable(factory):
        out["environment_factory"] = register_live(factory)
    if callable(arguments.get("rollout_func")):
        out["rollout_func"] = register_live(arguments["rollout_func"])
    return out


_LORA_KINDS = ("LORA",)  # PEFT kinds TRL's lora_* keys describe (ModelConfig builds a LoraConfig from them)


def _peft_keys(peft_config: Any, model: Any) -> dict[str, Any]:
    """A PEFT config (given, or already applied to the model) as TRL's `use_peft` / `lora_*` keys, with its kind
    (`peft_type`: LORA, PROMPT_TUNING, ...): the keys describe a LoRA; another kind has only its kind and task."""
    holder: Any
    for holder in (model, getattr(model, "pretrained_model", None)):  # a value-head model wraps the PEFT one
        if peft_config is None and hasattr(holder, "peft_config") and isinstance(holder.peft_config, dict):
            peft_config = next(iter(holder.peft_config.values()), None)
    if peft_config is None:
        return {}
    kind = getattr(peft_config, "peft_type", None)
    kind = str(getattr(kind, "value", kind)) if kind is not None else None
    out: dict[str, Any] = {"use_peft": True}
    if kind:
        out["peft_type"] = kind
    if kind and kind not in _LORA_KINDS:
        task = getattr(peft_config, "task_type", None)
        if task is not None:
            out["lora_task_type"] = str(getattr(task, "value", task))
        return out
    if getattr(peft_config, "use_dora", False):
        out["use_dora"] = True
    for key, attr in (("lora_r", "r"), ("lora_alpha", "lora_alpha"), ("lora_dropout", "lora_dropout"),
                      ("lora_target_modules", "target_modules"), ("lora_modules_to_save", "modules_to_save"),
                      ("lora_task_type", "task_type"), ("lora_rank_pattern", "rank_pattern")):
        value = getattr(peft_config, attr, None)
        if value is not None and not (key == "lora_rank_pattern" and not value):  # a pattern only where one is set
            out[key] = sorted(value) if isinstance(value, (set, frozenset)) else _plain(value)
    return out


def _added_tokens(tokenizer: Any, folder: Path) -> list[str]:
    """Tokens the script added to the tokenizer that its folder does not have."""
    if tokenizer is None or not hasattr(tokenizer, "get_added_vocab"):
        return []
    from transformers import AutoTokenizer

    try:
        disk = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception:
        return []
    known = set(disk.get_vocab())
    return [t for t in tokenizer.get_added_vocab() if t not in known]


def _recipe(args: list[str], cwd: Path) -> Path | None:
    """The config file the script was given (`--config FILE`, TRL's parser's convention)."""
    for i, arg in enumerate(args):
        value = args[i + 1] if arg == "--config" and i + 1 < len(args) else (
            arg.split("=", 1)[1] if arg.startswith("--config=") else None)
        if value and Path(local_path(value, cwd)).is_file():
            return Path(local_path(value, cwd))
    return None


def _flags(args: list[str]) -> set[str]:
    """The `--key` names on the script's command line."""
    return {a[2:].split("=", 1)[0].replace("-", "_") for a in args if a.startswith("--")}


# TRL's ModelConfig keys that decide how the policy loads; they reach it only if the script passes them on
MODEL_LOAD_KEYS = ("attn_implementation", "dtype", "torch_dtype", "load_in_4bit", "load_in_8bit")


def _model_keys(args: list[str], recipe: Path | None, config_fields: set[str]) -> dict[str, tuple[Any, str]]:
    """The model-loading keys the launch sets for TRL's ModelConfig (not fields of the trainer's config): {key:
    (value, where)}, the command line over the recipe, as TRL's parser takes them."""
    found: dict[str, tuple[Any, str] | None] = {}
    if recipe is not None:
        from trl_doctor.context.config import load_raw

        try:
            data = load_raw(recipe)
        except InputError:
            data = {}
        for key in MODEL_LOAD_KEYS:
            if data.get(key) not in (None, False, "auto"):
                found[key] = (data[key], recipe.name)
    for i, arg in enumerate(args):
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        name = name.replace("-", "_")
        if name not in MODEL_LOAD_KEYS:
            continue
        if not eq:
            nxt = args[i + 1] if i + 1 < len(args) else None
            value = nxt if nxt is not None and not nxt.startswith("--") else "true"
        found[name] = (value, "the command line") if value not in ("None", "false", "False", "auto") else found.get(name)
    return {k: v for k, v in found.items() if v is not None and k not in config_fields}


def _recipe_keys(recipe: Path | None) -> tuple[str, ...]:
    if recipe is None:
        return ()
    from trl_doctor.context.config import load_raw

    try:
        return tuple(load_raw(recipe))
    except InputError:
        return ()


def from_trainer(trainer: Any) -> tuple[DoctorConfig, Live]:
    """The check's config and live objects from a trainer that is already built (`trl_doctor.check(trainer)`,
    `DoctorCallback`): the same reading as a captured construction, from the trainer's own attributes."""
    from ..facts.trl.async_grpo import is_async_grpo
    from .hooks import trainer_classes

    kind = next((k for cls, k in trainer_classes().items() if isinstance(trainer, cls)), None)
    if kind is None and is_async_grpo(type(trainer)):
        return _from_async_grpo(trainer)
    if kind is None:
        raise ValueError(f"{type(trainer).__name__} is not a TRL GRPO, RLOO, PPO or AsyncGRPO trainer (nor a subclass "
                         "of one)")
    policy = getattr(trainer, "policy_model", None) or getattr(trainer, "model", None)  # PPO wraps the policy
    arguments = {
        "model": policy, "args": trainer.args, "processing_class": getattr(trainer, "processing_class", None),
        "train_dataset": getattr(trainer, "train_dataset", None), "eval_dataset": getattr(trainer, "eval_dataset", None),
        "reward_funcs": getattr(trainer, "reward_funcs", None),
        "ref_model": getattr(trainer, "ref_model", None), "reward_model": getattr(trainer, "reward_model", None),
        "value_model": getattr(trainer, "value_model", None),
    }
    return _from_built(trainer, kind, arguments)


def _from_async_grpo(trainer: Any) -> tuple[DoctorConfig, Live]:
    """A built AsyncGRPOTrainer: its rewards, tools, environment factory and dataset are what its rollout worker
    holds for its spawned child (`rollout_worker._loop_kwargs`, trl 1.16), or what the trainer kept; a weight transfer
    or rollout worker that is not TRL's own was given by the script."""
    from ..facts.trl.async_grpo import Built
    from ..vocabulary import ASYNC_GRPO
    from .async_grpo import spawn_pickling

    worker = getattr(trainer, "rollout_worker", None)
    held = getattr(worker, "_loop_kwargs", None) or {}
    arguments = {
        "model": getattr(trainer, "model", None), "args": trainer.args,
        "processing_class": getattr(trainer, "processing_class", None),
        "train_dataset": held.get("dataset", getattr(trainer, "train_dataset", None)),
        "reward_funcs": held.get("reward_funcs", getattr(trainer, "reward_funcs", None)),
        "tools": held.get("tools"), "environment_factory": held.get("environment_factory"),
    }
    arguments = {k: v for k, v in arguments.items() if v is not None}
    own_worker = type(worker).__name__ == "AsyncRolloutWorker"
    transfer = getattr(trainer, "weight_transfer", None)
    own_transfer = transfer is None or type(transfer).__name__ == "WeightTransferClient"
    built = Built(tuple(spawn_pickling(arguments)) if own_worker else (), None, not own_transfer, not own_worker, None)
    return _from_built(trainer, ASYNC_GRPO, arguments, built)


def _from_built(trainer: Any, kind: str, arguments: dict, async_grpo=None) -> tuple[DoctorConfig, Live]:
    """The config and live objects of a built trainer of `kind` from what it was given (`arguments`), as the capture
    records a construction: the launch is this process's own command line."""
    import sys

    from .command import LaunchCommand
    from .hooks import Recorder
    from .run import Launched

    main = sys.modules.get("__main__")
    script = str(Path(getattr(main, "__file__", None) or sys.argv[0] or "script").resolve())
    cwd = os.getcwd()
    command = LaunchCommand(("python", script, *sys.argv[1:]), "python", cwd, script=script,
                            script_args=tuple(sys.argv[1:]))
    recorder = Recorder(trainer_cls=type(trainer), trainer_kind=kind, arguments=arguments)
    if async_grpo is not None:
        recorder.async_grpo = async_grpo
    cfg, live = to_config(Captured(command, Launched(script, None, list(sys.argv[1:])), recorder))
    return cfg, dataclasses.replace(live, command=f"{type(trainer).__name__} in {command.text}")


def _bypassed(rec) -> tuple[str, ...]:
    """What the report says of a subclass of a checked trainer whose own __init__ skipped its parent's."""
    if rec.bypassed is None or rec.trainer_cls is None:
        return ()
    cls = f"{rec.trainer_cls.__module__}.{rec.trainer_cls.__qualname__}"
    judged = ("its construction ran to its end and the script was stopped at train(): the rules judge the trainer as "
              "it was built (the reward functions, datasets and tokenizer it holds)" if rec.built == "train" else
              "the rules judge the config and arguments the subclass gave")
    return (f"{cls} subclasses TRL's {rec.bypassed} but its __init__ replaces {rec.bypassed}.__init__ (it calls "
            f"transformers' Trainer.__init__ itself), so TRL's construction checks (batch geometry, the reward "
            f"functions and their tokenizers, the reference model) did not run; {judged}, as the installed TRL's own "
            "construction would",)


def _unchecked(rec) -> tuple[str, ...]:
    """What the report says of a trainer that is not one the doctor checks (no kind: transformers' constructor
    stopped it)."""
    if rec.trainer_kind is not None or rec.trainer_cls is None:
        return ()
    chain = " <- ".join(f"{c.__module__}.{c.__qualname__}" for c in rec.trainer_cls.__mro__ if c is not object)
    return (f"{rec.trainer_cls.__qualname__} ({chain}) is not a trainer trl-doctor checks: the rules judge GRPOTrainer, "
            "RLOOTrainer and PPOTrainer (and their subclasses) as the installed TRL builds them; the script was "
            "stopped where it constructed this one, before any training, and only what any trainer shares was judged "
            "(pad-token: the collator's padding; peft-setup: the LoRA target names; save-outputs)",)

