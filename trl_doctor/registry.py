"""Rule metadata, the `rule` decorator, and discovery of built-in and third-party rules.

Built-in rules are the modules of `trl_doctor.rules` (the repository's top-level `rules/` folder);
third-party rules come from the `trl_doctor.rules` entry-point group, whose entries name either a module
(every Rule in it is taken) or a single Rule object. Discovery is deterministic (sorted by id) and loud:
a plugin that fails to import, or an id used twice, is an error naming the package.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from trl_doctor.types import Finding

from trl_doctor.vocabulary import OTHER_TRAINER as OTHER, TRAINERS
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
    check: Callable[..., Iterable[Finding]] | None  # the full check's judgment; None for a rule of the watch alone
    explanation: str
    needs: tuple[str, ...] = ()
    fixable: str = "never"  # "always", "sometimes" or "never", as ruff's FIX_AVAILABILITY
    prepare: Callable[..., None] | None = None  # called before any check runs (start slow work early)
    # the judgment `check --static` makes from files alone (trl_doctor.interface: the `static` context), or None;
    # without one, `static_skip` says why files cannot decide ("it trains one step"), shown after "needs the full
    # check: "
    static: Callable[..., Iterable[Finding]] | None = None
    static_skip: str | None = None
    # the judgment on a job's logged metrics (trl_doctor.interface: the `watch` context), or None
    watch: Callable[..., Iterable[Finding]] | None = None
    source: str = "built-in"  # the distribution that provided it
    module: str = field(default="", compare=False)

    @property
    def has_fix(self) -> bool:
        return self.fixable != "never"

    @property
    def contexts(self) -> tuple[str, ...]:
        """Where the rule judges: `full` and `static` (the preflight check, with or without the ML stack; a rule
        without a static judgment says there why it needs the full check), `watch` (a job's logged metrics)."""
        return (("full", "static") if self.check is not None else ()) + (("watch",) if self.watch is not None else ())

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
    static: Callable[..., Iterable[Finding]] | None = None,
    static_skip: str | None = None,
    watch: Callable[..., Iterable[Finding]] | None = None,
    watch_only: bool = False,
) -> Callable[[Callable[..., Iterable[Finding]]], Rule]:
    """Turn a check function (the full check's judgment) into a Rule. The explanation is the docstring of the rule's
    module. `static` is the rule's judgment under `check --static` (a generator of the static context, as `check`
    is of the full one); `static_skip` says why the rule has none; `watch` its judgment on a job's logged metrics.
    With `watch_only=True` the decorated function is the watch judgment, and the rule has no preflight judgment (a
    rule of the watch family: `trl-doctor watch`, DoctorCallback(watch=True))."""

    def wrap(check: Callable[..., Iterable[Finding]]) -> Rule:
        nonlocal watch
        if watch_only:
            check, watch = None, check
        fn = check or watch
        module = sys.modules.get(fn.__module__)
        explanation = (getattr(module, "__doc__", None) or fn.__doc__ or "").strip()
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
            static=static,
            static_skip=static_skip,
            watch=watch,
            module=fn.__module__,
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
    bad = [t for t in r.trainers if t not in (*TRAINERS, OTHER)]
    if bad or not r.trainers:
        raise RegistryError(f"{where}: trainers must be among {(*TRAINERS, OTHER)}, got {r.trainers}")
    bad = [n for n in r.needs if n not in NEEDS]
    if bad:
        raise RegistryError(f"{where}: unknown needs {bad}; known: {NEEDS}")
    if r.fixable not in ("always", "sometimes", "never"):
        raise RegistryError(f"{where}: fixable must be always, sometimes or never")
    if r.check is None and (r.static is not None or r.static_skip is not None or r.needs or r.prepare is not None):
        raise RegistryError(f"{where}: a rule of the watch alone has no static judgment, needs or prepare")
    if r.static is not None and r.static_skip is not None:
        raise RegistryError(f"{where}: a rule has a static judgment or says why it has none (static_skip), not both")


def _rules_in_module(module) -> Iterator[Rule]:
    for value in vars(module).values():
        if isinstance(value, Rule) and value.module == module.__name__:
            yield value


def builtin_rules(where: str | None = None) -> list[Rule]:
    """The built-in rules. `where="watch"`: only the modules whose source declares a watch judgment (`watch=` or
    `watch_only=`, read as text first), so that the watch does not import the preflight rules and the facts they
    need (0.6 s of a 1 s budget); a module it leaves out has no watch judgment."""
    from trl_doctor import rules as package

    found: list[Rule] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue  # shared helpers and child-process entry points, not rules
        if where == "watch" and not _declares_watch(package.__path__, info.name):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found.extend(_rules_in_module(module))
    return found


_WATCH_HOOK = re.compile(r"\bwatch(?:_only)?\s*=")


def _declares_watch(paths, name: str) -> bool:
    for folder in paths:
        try:
            return bool(_WATCH_HOOK.search(Path(folder, f"{name}.py").read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    return True  # not a plain source file: import it and see


def plugin_rules() -> list[Rule]:
    from importlib.metadata import entry_points

    found: list[Rule] = []
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


def all_rules(where: str | None = None) -> list[Rule]:
    """Every rule, the plugins' included; `where="watch"` leaves out built-in modules without a watch judgment."""
    rules = builtin_rules(where) + plugin_rules()
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
