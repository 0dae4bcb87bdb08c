"""What the installed TRL checks about the batch sizes, read from its own code with Python's `ast`.

`installed_reading(trainer, cls)` collects the geometry statements of the config class's `__post_init__` chain
(its `inspect` source) and of the trainer's `__init__` (its source file, not imported): the statements that read
or write a batch knob (per-device and eval batch, gradient accumulation, generation batch, steps per generation,
num_generations(_eval), processes, mini-batches, rloo_k). `geometry_reading(ctx)` is that reading for the
check's trainer, once per check. An `Evaluator` runs a reading on concrete values with `world_size` /
`accelerator.num_processes` set to a process count and records every `raise`, failed `assert` and inexact
`exact_div` with TRL's own message and code line. `probe_class` is the installed config class answering a given
`world_size`, to build it as a cross-check. Verdicts and fixes are the batch-geometry rule's.
"""

from __future__ import annotations

import ast
import builtins
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from trl_doctor.cache import fact
from trl_doctor.facts.trl.installed import TRAINER_CLASS, config_class, trainer_tree, trl_root

# Names (attributes or locals) of TRL's batch arithmetic: statements that read or write one are evaluated.
GEOMETRY = frozenset({
    "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
    "generation_batch_size", "steps_per_generation", "num_generations", "num_generations_eval", "num_processes",
    "world_size", "num_mini_batches", "local_batch_size", "batch_size", "micro_batch_size", "mini_batch_size",
    "local_mini_batch_size", "local_dataloader_batch_size", "rloo_k", "local_rollout_forward_batch_size",
    "global_batch_size", "effective_batch_size", "global_eval_batch_size",
})
# The knobs a fix may change: (key, tier, direction). Lower tiers change less of what the job does: gradient
# GRPO and RLOO with auto_find_batch_size (transformers halves the per-device batch after an out-of-memory error):
# what the job meets where the installed config class does not refuse it (before PR#6411)
AUTO_FIND_BATCH_SIZE = (
    "auto_find_batch_size halves per_device_train_batch_size after an out-of-memory error, and the generation "
    "batch then holds partial groups of num_generations: the retry dies with \"RuntimeError: shape '[-1, N]' "
    "is invalid for input of size M\" (trl#3842); set auto_find_batch_size: false and size the batch by hand")
SAFE_BUILTINS = {name: getattr(builtins, name) for name in (
    "int", "float", "str", "bool", "len", "range", "max", "min", "abs", "round", "sum", "list", "tuple", "set",
    "isinstance", "any", "all", "ValueError", "TypeError")}



@dataclass(frozen=True)
class Problem:
    site: str  # "trl/trainer/grpo_config.py:1131"
    message: str  # TRL's own message, with this config's numbers
    kind: str = "trainer"  # "config" (the config class raises it), "trainer" (the trainer's __init__), "loop"


@dataclass(frozen=True)
class Unit:
    kind: str  # "config" (the config class's __post_init__) or "trainer" (the trainer's __init__)
    where: str  # "trl/trainer/grpo_config.py:1048"
    body: tuple  # the function's statements, keeping only those that touch the geometry
    file: str  # relative path for sites
    offset: int  # line number of the function's first line minus 1
    supers: tuple = ()  # for a config unit: the parent __post_init__ units, called by super().__post_init__()


@dataclass(frozen=True)
class Reading:
    units: tuple  # the top-level units, config first


@fact
def geometry_reading(ctx) -> Reading | None:
    """The judged TRL's geometry statements for the check's trainer: the installed TRL's source (full check), the
    release's statements shipped as data (--static); None when it has no config class for the trainer."""
    if ctx.kind == "static":
        from trl_doctor.facts.trl import fields as trl_fields

        stored = trl_fields.release(ctx.release)["geometry"].get(ctx.trainer)
        return None if stored is None else stored_reading(stored)
    cls = config_class(ctx.trainer)
    return None if cls is None else installed_reading(ctx.trainer, cls)


def config_base(ctx) -> dict:
    """The judged config class's defaults overlaid with the config's keys (config_values), from the installed class
    (full check) or the release's fields as data (--static)."""
    if ctx.kind == "static":
        from trl_doctor.facts.trl import fields as trl_fields

        own, _ = trl_fields.config_fields(ctx.release, ctx.trainer)
        return values_over({k: f.get("default") for k, f in own.items()}, ctx.config.raw)
    return config_values(config_class(ctx.trainer), ctx.config.raw)


def installed_reading(trainer: str, cls) -> Reading:
    """The geometry statements of the installed TRL for `trainer` and its config class `cls`."""
    units = []
    chain = _config_units(cls)
    if chain:
        units.append(chain)
    unit = _trainer_unit(trainer)
    if unit is not None:
        units.append(unit)
    return Reading(tuple(units))


def stored_reading(stored: dict) -> Reading:
    """The Reading of one release's config and trainer, from the statements tools/gen_trl_fields.py stored for it
    (trl_doctor/data/trl_fields.json): what installed_reading reads from the installed source, for --static."""
    def body(unit: dict) -> tuple:
        out = []
        for line, text in unit["statements"]:
            out.extend(ast.parse("\n" * (line - 1) + text).body)
        return tuple(out)

    units, chain = [], None
    for unit in reversed(stored["config"]):  # innermost parent first
        chain = Unit("config", f"{unit['file']}:{unit['line']}", body(unit), unit["file"], 0, (chain,) if chain else ())
    if chain is not None:
        units.append(chain)
    if stored.get("trainer"):
        t = stored["trainer"]
        units.append(Unit("trainer", f"{t['file']}:{t['line']}", body(t), t["file"], 0))
    return Reading(tuple(units))


def _rel(path: str) -> str:
    root = trl_root()
    try:
        return "trl/" + Path(path).resolve().relative_to(root.resolve()).as_posix() if root else Path(path).name
    except ValueError:
        return Path(path).name


def _config_units(cls) -> Unit | None:
    """The `__post_init__` of the TRL classes in the config class's MRO, each with its parent for super()."""
    import inspect

    found: list[tuple[ast.FunctionDef, str, int]] = []
    for klass in cls.__mro__:
        if "__post_init__" not in vars(klass) or not klass.__module__.startswith("trl"):
            continue
        fn = vars(klass)["__post_init__"]
        try:
            lines, start = inspect.getsourcelines(fn)
            tree = ast.parse(textwrap.dedent("".join(lines)))
            file = _rel(inspect.getsourcefile(fn) or "")
        except (OSError, TypeError, SyntaxError):
            continue
        found.append((cast(ast.FunctionDef, tree.body[0]), file, start - 1))  # the source of a function
    unit = None
    for func, file, offset in reversed(found):  # innermost parent first
        unit = Unit("config", f"{file}:{offset + 1}", _prune(func.body), file, offset, (unit,) if unit else ())
    return unit


def _trainer_unit(trainer: str) -> Unit | None:
    parsed = trainer_tree(trainer)
    if parsed is None:
        return None
    rel, text, tree = parsed
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == TRAINER_CLASS[trainer]:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    body = _prune(item.body)
                    return Unit("trainer", f"{rel}:{item.lineno}", body, rel, 0) if body else None
    return None


def _identifiers(node) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _is_super_post_init(stmt) -> bool:
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__post_init__"
            and isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name)
            and call.func.value.func.id == "super")


def _prune(body) -> tuple:
    """The statements of a function body that touch the geometry names (or names they assign), recursively."""
    wanted = set(GEOMETRY) | {"exact_div"}
    changed = True
    keep: list = []
    while changed:  # a fixpoint: locals assigned from geometry values (possible_values) are geometry too
        changed = False
        keep = [s for s in body if _is_super_post_init(s) or (
            isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.If, ast.Raise, ast.Assert, ast.Expr))
            and _identifiers(s) & wanted)]
        for s in keep:
            targets = s.targets if isinstance(s, ast.Assign) else [getattr(s, "target", None)]
            for t in targets:
                if isinstance(t, ast.Name) and t.id not in wanted:
                    wanted.add(t.id)
                    changed = True
    return tuple(keep)


class Evaluator:
    """Evaluates a Reading on concrete values: every raise, failed assert and inexact exact_div is recorded."""

    def __init__(self, reading: Reading, procs: int):
        self.reading = reading
        self.procs = procs
        self.trials = 0
        self._code: dict[int, Any] = {}

    def run(self, values: dict) -> tuple[list[Problem], dict]:
        self.trials += 1
        args = SimpleNamespace(**values)
        args.world_size = self.procs
        args.do_eval = bool(values.get("do_eval")) or str(plain(values.get("eval_strategy", "no"))) != "no"
        accelerator = SimpleNamespace(num_processes=self.procs, process_index=0, is_main_process=True,
                                      local_process_index=0)
        problems: list[Problem] = []
        for unit in self.reading.units:
            if unit.kind == "config":
                env: dict[str, Any] = {"self": args}
            else:
                env = {"self": SimpleNamespace(args=args, accelerator=accelerator), "args": args,
                       "accelerator": accelerator}
            env.update({"__builtins__": SAFE_BUILTINS, "math": math})
            env["exact_div"] = self._exact_div(env, problems, unit)
            self._block(unit.body, env, unit, problems)
        rollout = values.get("local_rollout_forward_batch_size")
        if "local_rollout_forward_batch_size" in values and isinstance(rollout, int) and rollout < 1:
            # PPO and old RLOO step their rollout loops with range(0, n, local_rollout_forward_batch_size)
            problems.append(Problem("rollout loop", f"local_rollout_forward_batch_size ({rollout}) must be at least 1: "
                                    "the rollout loop range(0, n, local_rollout_forward_batch_size) stops with "
                                    "'range() arg 3 must not be zero'", "loop"))
        seen, unique = set(), []
        for p in problems:
            if p.site not in seen:
                seen.add(p.site)
                unique.append(p)
        return unique, vars(args)

    # -- statements
    def _block(self, body, env, unit: Unit, problems: list) -> bool:
        """Run statements; True when one of them raised (the rest of this block is unreachable)."""
        for stmt in body:
            env["__stmt__"] = stmt
            if _is_super_post_init(stmt):
                for parent in unit.supers:
                    self._block(parent.body, env, parent, problems)
                continue
            if isinstance(stmt, ast.If):
                try:
                    branch = stmt.body if self._eval(stmt.test, env) else stmt.orelse
                except Exception:
                    continue  # a condition on something the config does not decide (the model, the dataset)
                if self._block(_kept(branch), env, unit, problems):
                    continue
            elif isinstance(stmt, ast.Raise):
                problems.append(Problem(self._site(unit, stmt), self._raise_message(stmt, env), unit.kind))
                return True
            elif isinstance(stmt, ast.Assert):
                try:
                    ok = self._eval(stmt.test, env)
                except Exception:
                    continue
                if not ok:
                    msg = ast.unparse(stmt.test)
                    if stmt.msg is not None:
                        try:
                            msg = str(self._eval(stmt.msg, env))
                        except Exception:
                            pass
                    problems.append(Problem(self._site(unit, stmt), msg, unit.kind))
                    return True
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                self._assign(stmt, env)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                    isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "exact_div":
                try:
                    self._eval(stmt.value, env)
                except Exception:
                    pass
        return False

    def _assign(self, stmt, env) -> None:
        if stmt.value is None:
            return
        try:
            value = self._eval(stmt.value, env)
            if isinstance(stmt, ast.AugAssign):
                value = self._eval(ast.BinOp(left=_load(stmt.target), op=stmt.op, right=ast.Constant(value)), env)
        except Exception:
            return
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            if isinstance(t, ast.Name):
                env[t.id] = value
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                    isinstance(env.get(t.value.id), SimpleNamespace):
                setattr(env[t.value.id], t.attr, value)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute) and \
                    isinstance(t.value.value, ast.Name) and t.value.value.id == "self":
                holder = getattr(env.get("self"), t.value.attr, None)  # self.args.x = ...
                if isinstance(holder, SimpleNamespace):
                    setattr(holder, t.attr, value)

    def _exact_div(self, env, problems, unit):
        def exact_div(a, b, custom_error_message=""):
            if b == 0 or a % b:
                stmt = env.get("__stmt__")
                text = (f"{custom_error_message}: ZeroDivisionError ({a} / 0)" if b == 0 else
                        f"{custom_error_message}, inexact division: {a} / {b} = {a / b}")
                problems.append(Problem(self._site(unit, stmt), text, unit.kind))
                return a // b if b else 0
            return a // b
        return exact_div

    def _raise_message(self, stmt, env) -> str:
        exc = stmt.exc
        if isinstance(exc, ast.Call) and exc.args:
            try:
                return " ".join(str(self._eval(exc.args[0], env)).split())
            except Exception:
                return ast.unparse(exc.args[0])
        return ast.unparse(exc) if exc is not None else "raise"

    def _site(self, unit: Unit, stmt) -> str:
        line = getattr(stmt, "lineno", 0) + unit.offset
        return f"{unit.file}:{line}"

    def _eval(self, node, env):
        code = self._code.get(id(node))
        if code is None:
            expr = ast.Expression(body=node)
            ast.fix_missing_locations(expr)
            code = self._code[id(node)] = compile(expr, "<trl>", "eval")
        return eval(code, env)  # noqa: S307 (the installed TRL's own expressions, on plain numbers, no builtins)


def _kept(branch) -> list:
    return [s for s in branch if _is_super_post_init(s) or isinstance(
        s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.If, ast.Raise, ast.Assert, ast.Expr))]


def _load(target):
    if isinstance(target, ast.Name):
        return ast.Name(id=target.id, ctx=ast.Load())
    return ast.Attribute(value=target.value, attr=target.attr, ctx=ast.Load())


def plain(value: Any) -> Any:
    return getattr(value, "value", value)  # enums (IntervalStrategy) to their string



def config_values(cls, raw: dict) -> dict:
    """The config class's defaults overlaid with the user's keys (numbers given as strings made ints)."""
    import dataclasses

    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            try:
                values[f.name] = f.default_factory()
            except Exception:
                values[f.name] = None
        else:
            values[f.name] = None
    return values_over(values, raw)


def values_over(defaults: dict, raw: dict) -> dict:
    """The defaults overlaid with the user's keys that are fields (numbers given as strings made ints); `check
    --static` gives the defaults from trl_doctor/data/trl_fields.json."""
    values = dict(defaults)
    for key, value in raw.items():
        if key in values:
            values[key] = int(value) if key in GEOMETRY and isinstance(value, str) and value.strip().isdigit() else value
    return values



def probe_class(cls, procs: int):
    """The config class with its `world_size` property answering `procs`. Where world_size is a plain field
    (PPOConfig, PPO-style RLOOConfig: the trainer fills it in), the class itself: its __post_init__ does not
    read the process count."""
    import dataclasses

    if any(f.name == "world_size" for f in dataclasses.fields(cls)):
        return cls
    return type(f"{cls.__name__}AtWorldSize{procs}", (cls,), {"world_size": property(lambda self: procs),
                                                                "__module__": __name__})

