"""What each TRL release's config classes declare, shipped as data, for the rules' static judgments (`check
--static` reads no installed TRL): trl_doctor/data/trl_fields.json (generated from the released wheels by
tools/gen_trl_fields.py, with `ast`), the reading of dataclass source both share, and what TRL's parser refuses.

Which release static judges against: `--trl-version`, else the installed TRL's version from its metadata (never
imported), else the newest in the data; a release between two in the data is judged as the newest one at or before
it of the same minor (else the nearest before it), and the report says which.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

OUT = Path(__file__).resolve().parents[2] / "data" / "trl_fields.json"
TRAINER_CONFIG = {"grpo": "GRPOConfig", "rloo": "RLOOConfig", "ppo": "PPOConfig"}
SCRIPT_CLASSES = ("ScriptArguments", "ModelConfig", "DatasetMixtureConfig")


# -- reading dataclasses from source (the generator; TrainingArguments at check time) ------------------------------

def classes_in(trees: dict[str, ast.Module]) -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """Every top-level class of the modules, by name: [(module path, node)], the one declaring most fields first."""
    out: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for name, tree in sorted(trees.items()):
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append((name, node))
    for found in out.values():
        found.sort(key=lambda item: -sum(isinstance(s, ast.AnnAssign) for s in item[1].body))
    return out


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def fields_of(name: str, index: dict, seen: frozenset = frozenset()) -> tuple[dict[str, dict], str | None]:
    """({field: {"type", "default" | "default_expr" | "factory" | "required"}}, the first base outside `index`)
    of dataclass `name`, its bases' fields first (a redeclared field takes the subclass's annotation and default)."""
    node = index[name][0][1]
    fields: dict[str, dict] = {}
    outside = None
    for base in node.bases:
        base_name = _base_name(base)
        if base_name in index and base_name not in seen:
            inherited, out = fields_of(base_name, index, seen | {name})
            fields.update(inherited)
            outside = outside or out
        elif base_name and base_name not in ("object", "Generic"):
            outside = outside or base_name
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            kind = ast.unparse(stmt.annotation)
            if "ClassVar" in kind:
                continue
            fields[stmt.target.id] = {"type": kind, **_default(stmt.value)}
    return fields, outside


def _literal(node: ast.expr) -> dict:
    try:
        value = ast.literal_eval(node)
        json.dumps(value)
        return {"default": value}
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return {"default_expr": ast.unparse(node)}


def _default(value: ast.expr | None) -> dict:
    if value is None:
        return {"required": True}
    if isinstance(value, ast.Call) and _base_name(value.func) == "field":
        kw = {k.arg: k.value for k in value.keywords}
        extra = {"init": False} if isinstance(kw.get("init"), ast.Constant) and cast(ast.Constant, kw["init"]).value is False else {}
        if "default" in kw:
            return {**_literal(kw["default"]), **extra}
        if "default_factory" in kw:
            return {"factory": ast.unparse(kw["default_factory"]), **extra}
        return {"required": True, **extra}
    return _literal(value)


# -- the shipped data ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def data() -> dict:
    return json.loads(OUT.read_text(encoding="utf-8"))


def release_key(version: str) -> tuple:
    """A release as a tuple of numbers, for comparing releases (`release_key(r) >= (0, 19)`)."""
    from packaging.version import Version

    return Version(version).release


def installed_trl() -> str | None:
    """The installed TRL's version from its metadata (no import), or None."""
    import importlib.metadata

    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


def judged_release(asked: str | None) -> tuple[str, str]:
    """(the release in the data judged against, why that one)."""
    releases = sorted(data()["releases"], key=release_key)
    wanted, source = (asked, "--trl-version") if asked else (installed_trl(), "the installed trl")
    if not wanted:
        return releases[-1], "no trl installed here: the newest release trl-doctor knows"
    try:
        key = release_key(wanted)
    except Exception:
        from trl_doctor.errors import InputError

        raise InputError(f"--trl-version {wanted!r} is not a version (e.g. 0.17.0)") from None
    if wanted in data()["releases"]:
        return wanted, source
    before = [r for r in releases if release_key(r) <= key]
    same_minor = [r for r in before if release_key(r)[:2] == key[:2]]
    pick = (same_minor or before or releases[:1])[-1]
    return pick, f"{source} is {wanted}; judged as {pick}, the nearest release trl-doctor knows"


def release(version: str) -> dict:
    return data()["releases"][version]


@lru_cache(maxsize=1)
def training_arguments() -> tuple[dict[str, dict], str]:
    """(transformers' TrainingArguments fields, where they were read): the installed transformers' source (found,
    not imported) when there is one, else the snapshot in the data."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec("transformers")
        folder = Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None
        source = folder / "training_args.py" if folder else None
        if source is not None and source.is_file():
            tree = ast.parse(source.read_text(encoding="utf-8"))
            fields, _ = fields_of("TrainingArguments", classes_in({"training_args.py": tree}))
            return fields, f"transformers {importlib.metadata.version('transformers')} (installed)"
    except (ImportError, ValueError, SyntaxError, KeyError, importlib.metadata.PackageNotFoundError, OSError):
        pass
    snap = data()["TrainingArguments"]
    return snap["fields"], f"transformers {snap['transformers']} (trl-doctor's snapshot; none installed here)"


def config_fields(version: str, trainer: str) -> tuple[dict[str, dict], str | None]:
    """(every field of the trainer's config class in `version`, TrainingArguments' included; the class name or None
    when that release has none)."""
    configs = release(version)["configs"]
    name = TRAINER_CONFIG[trainer]
    if name not in configs:
        return {}, None
    entry = configs[name]
    fields = dict(training_arguments()[0]) if entry["base"] == "TrainingArguments" else {}
    fields.update(entry["fields"])
    return fields, name


def script_fields(version: str, trainer: str) -> dict[str, dict]:
    """The fields `trl <trainer> --config` takes besides the config class: ScriptArguments, ModelConfig,
    DatasetMixtureConfig and the trainer script's own dataclasses."""
    configs = release(version)["configs"]
    out: dict[str, dict] = {}
    for name in SCRIPT_CLASSES:
        out.update(configs.get(name, {}).get("fields", {}))
    out.update(release(version).get("script_fields", {}).get(trainer, {}))
    return out


def default(field: dict) -> Any:
    return field.get("default")


def known_keys(version: str, trainer: str, own: dict[str, dict]) -> set[str]:
    """Every key `trl <trainer> --config` takes in `version` (`own`: its config class's fields, of which those that
    take a value; the script's classes), and the keys trl-doctor's own config reads."""
    from trl_doctor.context.config import DOCTOR_KEYS, SCRIPT_EXTRA_KEYS

    init = {k for k, f in own.items() if f.get("init", True)}
    return init | set(script_fields(version, trainer)) | set(DOCTOR_KEYS) | set(SCRIPT_EXTRA_KEYS)


def ppo_style(version: str, trainer: str) -> bool:
    """facts.trl.installed.ppo_style for a release in the data: PPO, and RLOO before trl 0.22 (responses end at the
    config's stop token)."""
    return trainer == "ppo" or (trainer == "rloo" and release_key(version) < (0, 22))


# -- what TRL's parser refuses ----------------------------------------------------------------------------------

_BOOL = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def type_error(key: str, value: Any, kind: str) -> str | None:
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
