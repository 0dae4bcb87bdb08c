"""Rule metadata, the `rule` decorator, and discovery of built-in and third-party rules.

Built-in rules are the modules of `trl_doctor.rules` (the repository's top-level `rules/` folder);
third-party rules come from the `trl_doctor.rules` entry-point group, whose entries name either a module
(every Rule in it is taken) or a single Rule object. Discovery is deterministic (sorted by id) and loud:
a plugin that fails to import, or an id used twice, is an error naming the package.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from trl_doctor.interface import KINDS
from trl_doctor.types import Finding

from trl_doctor.vocabulary import OPT_IN_TRAINERS, OTHER_TRAINER as OTHER, TRAINERS
NEEDS = (
    "tokenizer",
    "model_config",
    "generation_config",
    "trainer_config",
    "meta_model",
    "twin",
    "dataset",
    "trainer_run",  # reads the check's one trainer run: runs after the static rules, in the trainer-run group
)
ENTRY_POINT_GROUP = "trl_doctor.rules"
_ID_RE = re.compile(r"^[A-Z]{2,5}\d{3,4}$")
_SLUG_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class RegistryError(Exception):
    """A rule plugin could not be loaded or declares something invalid."""


@dataclass(frozen=True)
class Rule:
    id: str
    slug: str
    title: str
    severity: str
    trainers: tuple[str, ...]
    # the rule's one judgment, run in each context it declares (a rule is its declaration: two Rules of the same
    # declaration are equal whether their judgment is the function or trl_doctor.rule_index's deferred call of it)
    check: Callable[..., Iterable[Finding]] = field(compare=False)
    explanation: str
    needs: tuple[str, ...] = ()  # what the full check loads before the judgment runs
    fixable: str = "never"  # "always", "sometimes" or "never", as ruff's FIX_AVAILABILITY
    # called before any check runs (start slow work early)
    prepare: Callable[..., None] | None = field(default=None, compare=False)
    # where the judgment runs (trl_doctor.interface.KINDS): `full` and `static` (the preflight check with and without
    # the ML stack) or `watch` (a job's logged metrics). In a declared context a fact the context cannot answer makes
    # the rule `skip` with the fact's reason; a preflight rule not declared for `static` says why in `static_skip`
    # ("it trains one step"), shown after "needs the full check: ".
    contexts: tuple[str, ...] = ("full",)
    static_skip: str | None = None
    source: str = "built-in"  # the distribution that provided it
    module: str = field(default="", compare=False)

    @property
    def has_fix(self) -> bool:
        return self.fixable != "never"

    @property
    def preflight(self) -> bool:
        """Whether the rule judges a setup before launch (`check`), not a job's logged metrics (`watch`)."""
        return "full" in self.contexts

    @property
    def group(self) -> str:
        """`static` rules read files, configs and the installed packages; `trainer run` rules read the one
        trainer run of the check, so they run (and are listed) after the static ones."""
        return "trainer run" if "trainer_run" in self.needs else "static"


def rule(
    *,
    id: str,
    slug: str,
    title: str,
    severity: str = "fail",
    trainers: Iterable[str] = TRAINERS,
    needs: Iterable[str] = (),
    fixable: str = "never",
    prepare: Callable[..., None] | None = None,
    contexts: Iterable[str] = ("full",),
    static_skip: str | None = None,
    watch_only: bool = False,
) -> Callable[[Callable[..., Iterable[Finding]]], Rule]:
    """Turn a judgment (a generator of Findings over a context) into a Rule. The explanation is the docstring of the
    rule's module. `contexts` says where the one judgment runs (trl_doctor.interface.KINDS): `("full",)` (the
    default), `("full", "static")` when files alone can decide part of it (the facts it asks answer under
    `--static`, or say Unavailable and the rule skips with their reason), `("watch",)` for a judgment of a job's
    logged metrics (`trl-doctor watch`, DoctorCallback(watch=True)); `watch_only=True` is the same as
    `contexts=("watch",)`. `static_skip` says why a preflight rule not declared for `static` needs the full check."""

    def wrap(check: Callable[..., Iterable[Finding]]) -> Rule:
        module = sys.modules.get(check.__module__)
        explanation = (getattr(module, "__doc__", None) or check.__doc__ or "").strip()
        r = Rule(
            id=id,
            slug=slug,
            title=title,
            severity=severity,
            trainers=tuple(trainers),
            check=check,
            explanation=explanation,
            needs=tuple(needs),
            fixable=fixable,
            prepare=prepare,
            contexts=("watch",) if watch_only else tuple(contexts),
            static_skip=static_skip,
            module=check.__module__,
        )
        _validate(r)
        return r

    return wrap


def _validate(r: Rule) -> None:
    where = r.module or r.slug
    if not _ID_RE.match(r.id):
        raise RegistryError(f"{where}: rule id {r.id!r} must look like TD001")
    if not _SLUG_RE.match(r.slug):
        raise RegistryError(f"{where}: rule slug {r.slug!r} must be kebab-case")
    if r.severity not in ("fail", "warn"):
        raise RegistryError(f"{where}: severity must be 'fail' or 'warn', not {r.severity!r}")
    known = (*TRAINERS, OTHER, *OPT_IN_TRAINERS)
    bad = [t for t in r.trainers if t not in known]
    if bad or not r.trainers:
        raise RegistryError(f"{where}: trainers must be among {known}, got {r.trainers}")
    bad = [n for n in r.needs if n not in NEEDS]
    if bad:
        raise RegistryError(f"{where}: unknown needs {bad}; known: {NEEDS}")
    if r.fixable not in ("always", "sometimes", "never"):
        raise RegistryError(f"{where}: fixable must be always, sometimes or never")
    bad = [k for k in r.contexts if k not in KINDS]
    if bad or not r.contexts or len(set(r.contexts)) != len(r.contexts):
        raise RegistryError(f"{where}: contexts must be distinct names among {KINDS}, got {r.contexts}")
    if "watch" in r.contexts and len(r.contexts) > 1:
        raise RegistryError(f"{where}: a judgment of logged metrics (`watch`) is a rule of its own, not a preflight "
                            f"rule's: contexts {r.contexts}")
    if "static" in r.contexts and "full" not in r.contexts:
        raise RegistryError(f"{where}: a rule judged under --static is judged by the full check too: add `full`")
    if not r.preflight and (r.static_skip is not None or r.needs or r.prepare is not None):
        raise RegistryError(f"{where}: a rule of the watch has no static_skip, needs or prepare")
    if "static" in r.contexts and r.static_skip is not None:
        raise RegistryError(f"{where}: a rule judged under --static (contexts) has no static_skip")


def _rules_in_module(module) -> Iterator[Rule]:
    for value in vars(module).values():
        if isinstance(value, Rule) and value.module == module.__name__:
            yield value


def builtin_rules(where: str | None = None, lazy: bool = False) -> list[Rule]:
    """The built-in rules. `where="watch"`: only the modules whose source declares a watch judgment
    (`contexts=("watch",)` or `watch_only=`, read as text first), so that the watch does not import the preflight rules and the facts they
    need (0.6 s of a 1 s budget); a module it leaves out has no watch judgment. `lazy`: the declarations of
    trl_doctor/data/rule_index.json where its module is unchanged, each module imported at its rule's first call
    (trl_doctor.rule_index: only for a process that runs no user code)."""
    from trl_doctor import rules as package

    index = None
    if lazy:
        from trl_doctor.rule_index import Reader

        index = Reader()
    found: list[Rule] = []
    for name in builtin_modules():
        if where == "watch" and not _declares_watch(package.__path__, name):
            continue
        declared = _indexed(index, package.__path__, name) if index is not None else None
        if declared is None:
            declared = list(_rules_in_module(importlib.import_module(f"{package.__name__}.{name}")))
        found.extend(declared)
    return found


def builtin_modules() -> list[str]:
    """The names of the rule modules of `trl_doctor.rules` (those starting with _ are shared helpers and child-process
    entry points, not rules)."""
    from trl_doctor import rules as package

    return sorted(i.name for i in pkgutil.iter_modules(package.__path__) if not i.name.startswith("_"))


def _indexed(index, paths, name: str) -> list[Rule] | None:
    """The Rules module `name` declares, read from trl_doctor.rule_index's index, or None (read it by importing)."""
    from trl_doctor.rule_index import Deferred

    source = _source(paths, name)
    declared = index.declared(source, name) if source is not None else None
    if declared is None:
        return None
    out = []
    for data in declared:
        module, rule_id, prepare = data["module"], data["id"], data.pop("prepare")
        check = Deferred(functools.partial(_judgment, module, rule_id, "check"), f"the judgment of {rule_id}")
        hook = Deferred(functools.partial(_judgment, module, rule_id, "prepare"), f"the prepare of {rule_id}")
        out.append(Rule(check=check, prepare=hook if prepare else None, **data))
    return out


def _source(paths, name: str) -> Path | None:
    """The source file of rule module `name` in the package's `paths`, or None (not a plain source file)."""
    return next((Path(folder, f"{name}.py") for folder in paths if Path(folder, f"{name}.py").is_file()), None)


def _judgment(module: str, rule_id: str, attr: str) -> Callable:
    """`attr` (check or prepare) of rule `rule_id`, imported from `module` as the index said."""
    found = [r for r in _rules_in_module(importlib.import_module(module)) if r.id == rule_id]
    if not found:
        raise RegistryError(f"{module} no longer declares {rule_id}: python tools/rule_index.py")
    return getattr(found[0], attr)


def index_data() -> dict:
    """trl_doctor/data/rule_index.json as the built-in rules say it now (tools/rule_index.py writes it)."""
    from trl_doctor import rules as package
    from trl_doctor.rule_index import build

    modules = {}
    for name in builtin_modules():
        source = _source(package.__path__, name)
        if source is None:
            raise RegistryError(f"{package.__name__}.{name}: not a source file, so not indexed")
        module = importlib.import_module(f"{package.__name__}.{name}")
        modules[name] = (source.read_bytes(), list(_rules_in_module(module)))
    return build(modules)


_WATCH_HOOK = re.compile(r"\bwatch_only\s*=|\bcontexts\s*=\s*[(\[]\s*[\"']watch")


def _declares_watch(paths, name: str) -> bool:
    source = _source(paths, name)
    try:
        return source is None or bool(_WATCH_HOOK.search(source.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return True  # not readable as a plain source file: import it and see


def _any_plugin() -> bool:
    """Whether any installed distribution declares the rules' entry point group: its entry_points.txt read as text
    (importlib.metadata parses every distribution's: 70 ms of a 0.3 s `--static` with a few hundred installed)."""
    import os
    import sys

    marker = f"[{ENTRY_POINT_GROUP}]".encode()
    for folder in sys.path:
        if os.path.isfile(folder):  # a zipped egg or wheel on the path: importlib.metadata reads it
            return True
        try:
            entries = list(os.scandir(folder or "."))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".dist-info", ".egg-info")):
                path = os.path.join(entry.path, "entry_points.txt")
            elif entry.name.endswith(".egg"):
                path = os.path.join(entry.path, "EGG-INFO", "entry_points.txt")
            else:
                continue
            try:
                with open(path, "rb") as f:
                    if marker in f.read():
                        return True
            except OSError:
                continue
    return False


def plugin_rules() -> list[Rule]:
    found: list[Rule] = []
    if not _any_plugin():
        return found
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(getattr(ep, "dist", None), "name", None) or ep.value
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must name itself, not crash with a bare traceback
            raise RegistryError(f"rule plugin {ep.name!r} from {dist} failed to load: {type(exc).__name__}: {exc}") from exc
        rules = [obj] if isinstance(obj, Rule) else list(_rules_in_module(obj)) if hasattr(obj, "__name__") else []
        if not rules:
            raise RegistryError(f"rule plugin {ep.name!r} from {dist} provides no Rule")
        found.extend(_with_source(r, dist) for r in rules)
    return found


def _with_source(r: Rule, dist: str) -> Rule:
    from dataclasses import replace

    return replace(r, source=dist)


def all_rules(where: str | None = None, lazy: bool = False) -> list[Rule]:
    """Every rule, the plugins' included; `where="watch"` leaves out built-in modules without a watch judgment;
    `lazy`: built-in rules read from their index where it holds (builtin_rules)."""
    rules = builtin_rules(where, lazy) + plugin_rules()
    seen: dict[str, Rule] = {}
    for r in rules:
        for key in (r.id, r.slug):
            if key in seen:
                raise RegistryError(f"rule {key!r} is declared twice: by {seen[key].module} and by {r.module}")
            seen[key] = r
    return sorted(rules, key=lambda r: r.id)


def select_rules(rules: list[Rule], select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[Rule]:
    """Filter by ids or slugs; an unknown name is an error (a typo must not silently select nothing)."""
    index = {}
    for r in rules:
        index[r.id.upper()] = r
        index[r.slug] = r
    def resolve(names: Iterable[str]) -> set[str]:
        out = set()
        for name in names:
            key = name.strip()
            hit = index.get(key.upper()) or index.get(key.lower())
            if hit is None:
                raise RegistryError(f"unknown rule {key!r}; `trl-doctor rules` lists them")
            out.add(hit.id)
        return out
    chosen = resolve(select)
    dropped = resolve(ignore)
    return [r for r in rules if (not chosen or r.id in chosen) and r.id not in dropped]


def run_order(rules: Iterable[Rule]) -> list[Rule]:
    """The order rules run and are listed in: the static group, then the trainer-run group, each by id."""
    return sorted(rules, key=lambda r: (r.group != "static", r.id))


def find_rule(rules: list[Rule], name: str) -> Rule:
    return select_rules(rules, [name])[0]
