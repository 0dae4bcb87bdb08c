"""A config file's values as TRL's own parser makes them.

`trl <trainer> --config recipe.yaml` reads the YAML with PyYAML, sets each key as the default of the argument of
the same name in its `TrlParser` (over the dataclasses that release's script uses: its script arguments, the
trainer's config class, ModelConfig and, from trl 0.20, DatasetMixtureConfig), and argparse then converts every
string default with the argument's type. So `learning_rate: 2e-5` (a string to PyYAML) is the float 2e-05 to
TRL, `bf16: "true"` is True, and `num_generations: eight` stops the parser with "argument --num_generations:
invalid int value: 'eight'". `parse_as_trl` does the same with the installed release's parser.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Parsed:
    """What TRL's parser makes of a config's keys."""

    parser: str  # which parser: "trl/scripts/grpo.py make_parser()" or "TrlParser(ScriptArguments, GRPOConfig, ModelConfig)"
    keys: frozenset[str]  # every key the parser takes (its arguments' names)
    typed: dict[str, Any] = field(default_factory=dict)  # keys whose value the parser converts, to what it converts them
    errors: dict[str, str] = field(default_factory=dict)  # keys whose value it refuses, with its message


def trl_parser(trainer: str):
    """(the parser `trl <trainer> --config` uses in the installed TRL, its description), or (None, why)."""
    from trl_doctor.facts.trl.installed import config_class

    try:
        module = importlib.import_module(f"trl.scripts.{trainer}")
        parser = module.make_parser()
        return parser, f"trl/scripts/{trainer}.py make_parser()"
    except Exception:
        pass
    cls = config_class(trainer)
    if cls is None:
        return None, f"the installed TRL has no config class for {trainer}"
    try:
        import trl

        types = [c for c in (getattr(trl, "ScriptArguments", None), cls, getattr(trl, "ModelConfig", None)) if c]
        parser_cls: Any = getattr(trl, "TrlParser", None)
        if parser_cls is None:
            import transformers

            parser_cls = transformers.HfArgumentParser
        return parser_cls(tuple(types)), f"{parser_cls.__name__}({', '.join(t.__name__ for t in types)})"
    except Exception as exc:
        return None, f"cannot build TRL's parser: {type(exc).__name__}: {exc}"


def parse_as_trl(trainer: str, raw: dict[str, Any]) -> Parsed | None:
    """The keys of `raw` as the installed TRL's parser types them; None when it has no parser to ask."""
    parser, described = trl_parser(trainer)
    if parser is None:
        return None
    actions = {a.dest: a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))}
    typed: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for key, value in raw.items():
        action = actions.get(key)
        if action is None:
            continue
        if value is None:
            if key in NULL_BREAKS and not _takes_none(parser, key):
                errors[key] = f"`{key}: null`: the field takes no null (its default is {action.default!r}): {UNCHECKED}"
            continue
        if not isinstance(value, str):  # PyYAML already typed it, and argparse converts only strings
            problem = _unusable(key, value, action)
            if problem:
                errors[key] = f"`{key}: {_shown(value)}`: {problem}: {UNCHECKED}"
            continue
        try:
            converted = parser._get_value(action, value)
            parser._check_value(action, converted)
        except (argparse.ArgumentError, TypeError, ValueError) as exc:
            errors[key] = (f"`{key}: {value!r}`: TRL's parser refuses it ({_expected(action)}): {_text(exc)}: "
                           f"`trl {trainer} --config` stops before training starts")
            continue
        problem = _unusable(key, converted, action)
        if problem:
            errors[key] = f"`{key}: {value!r}`: {problem}: {UNCHECKED}"
        elif converted != value or type(converted) is not type(value):
            typed[key] = converted
    return Parsed(described, frozenset(actions), typed, errors)


UNCHECKED = "TRL's parser passes it on unchecked, and the trainer fails on it (or trains with it)"
MAX_COUNT = 2**31 - 1  # no batch, length, step or process count of a real run comes near this
SEED_KEYS = ("seed", "data_seed")
# keys whose null the trainer does arithmetic on at start-up (a field typed int may still take None where the code
# checks for it: trl 0.15's `max_prompt_length: int = 512` means "no truncation" when None)
NULL_BREAKS = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
               "num_generations", "learning_rate", "num_train_epochs", "max_steps", "num_iterations")


def _unusable(key: str, value: Any, action: argparse.Action) -> str | None:
    """Why a value PyYAML typed cannot be what a numeric argument of TRL's parser holds (None when it can): the
    parser passes a non-string default through unchecked, and the trainer then fails on it (or trains on NaN)."""
    import math

    kind = _scalar_kind(action) if action.nargs in (None, "?") else None  # "?": a bool flag's optional value
    if kind is None:
        return None
    if isinstance(value, (list, dict)):
        return f"expects a single {kind.__name__}, not a {type(value).__name__}"
    if kind is bool:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expects {kind.__name__}, not {'a bool' if isinstance(value, bool) else 'a ' + type(value).__name__}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"expects a finite {kind.__name__}, not {value}"
    if kind is int and isinstance(value, float) and not value.is_integer():
        return "expects int, not a fraction"
    if key not in SEED_KEYS and abs(value) > MAX_COUNT:
        return f"{_shown(value)} is past any real run (more than {MAX_COUNT:,})"
    return None


def _takes_none(parser, key: str) -> bool:
    """Whether the dataclass field behind `key` is Optional (or unknown: then the benefit of the doubt)."""
    import dataclasses
    import types
    import typing

    for cls in getattr(parser, "dataclass_types", ()) or ():
        for f in dataclasses.fields(cls):
            if f.name != key:
                continue
            hint = f.type
            if isinstance(hint, str):
                try:
                    hint = typing.get_type_hints(cls).get(key, hint)
                except Exception:
                    return True
            if hint is typing.Any or isinstance(hint, str):
                return True
            origin = typing.get_origin(hint)
            return (origin is typing.Union or origin is types.UnionType) and type(None) in typing.get_args(hint)
    return True


def _scalar_kind(action: argparse.Action) -> type | None:
    """int, float or bool when the argument converts to that scalar (its type may be wrapped, e.g. to accept
    "None"): asked by converting sample strings, as argparse would; None for anything else."""
    convert: Any = action.type  # a callable, as argparse calls it
    if convert in (int, float):
        return convert
    if convert is None or action.choices:
        return None
    try:
        one = convert("1")
    except Exception:
        return None
    if isinstance(one, bool):
        return bool
    if isinstance(one, float):
        return float
    if isinstance(one, int):
        try:
            return float if isinstance(convert("1.5"), float) else int
        except Exception:
            return int
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _expected(action: argparse.Action) -> str:
    if action.choices:
        return "one of " + ", ".join(map(str, action.choices))
    kind = getattr(action.type, "__name__", None) or str(action.type)
    return f"expects {'bool' if kind == 'string_to_bool' else kind}"


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())


