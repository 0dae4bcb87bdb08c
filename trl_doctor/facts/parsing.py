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
    from .trl import config_class

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
        parser_cls = getattr(trl, "TrlParser", None)
        if parser_cls is None:
            from transformers import HfArgumentParser as parser_cls
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
        if action is None or not isinstance(value, str):
            continue  # PyYAML already typed it, and argparse converts only strings
        try:
            converted = parser._get_value(action, value)
            parser._check_value(action, converted)
        except (argparse.ArgumentError, TypeError, ValueError) as exc:
            errors[key] = f"`{key}: {value!r}`: TRL's parser refuses it ({_expected(action)}): {_text(exc)}"
            continue
        if converted != value or type(converted) is not type(value):
            typed[key] = converted
    return Parsed(described, frozenset(actions), typed, errors)


def _expected(action: argparse.Action) -> str:
    if action.choices:
        return "one of " + ", ".join(map(str, action.choices))
    kind = getattr(action.type, "__name__", None) or str(action.type)
    return f"expects {'bool' if kind == 'string_to_bool' else kind}"


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())
