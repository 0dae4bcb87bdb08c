"""TD010 batch-geometry: the batch sizes divide the way the installed TRL requires, at the launch's process count.

What goes wrong
    GRPO and RLOO score completions in groups of `num_generations` per prompt, so every batch TRL generates
    must hold whole groups; PPO (and RLOO before TRL 0.22) splits each rollout batch into `num_mini_batches`
    and RLOO's groups of `rloo_k`. The sizes multiply across processes: a config that is fine on one GPU
    stops on eight. TRL finds out inside the launched job, one error at a time, after accelerate has started
    every process (and, from TRL 0.18, inside the config's `__post_init__`; before, in the trainer's
    `__init__`, after the model is loaded):
    - "generation_batch_size (12) must be divisible by num_generations (8)." (GRPOConfig/RLOOConfig, TRL >= 0.21);
      "The effective train batch size (4 x 3 x 1) must be evenly divisible by the number of generations per
      prompt (8)" (TRL 0.17-0.20); "The global train batch size (4 x 3) must be evenly divisible ..." (0.15-0.16);
    - "GRPO requires at least 2 generations per prompt to calculate the advantages" (num_generations 1);
    - "'generation_batch_size' and 'steps_per_generation' can not be both configured at the same time",
      "generation_batch_size (10) must be divisible by the global batch size (8).";
    - "The global eval batch size (8 * 4) must be divisible by the number of generations used for evaluation
      (6)." when evaluation is on (`eval_strategy` other than "no");
    - PPO: "`local_batch_size` must be a multiple of `num_mini_batches`, inexact division: 6 / 4 = 1.5",
      "Per-rank minibatch size 4 is insufficient for whitening" (`whiten_rewards` needs 8 per mini-batch);
      old RLOO: "`local_batch_size` must be a multiple of rloo_k"; a `local_rollout_forward_batch_size` of 0
      stops the first rollout ("range() arg 3 must not be zero").

Versions
    The rule reads the installed TRL instead of a table. TRL 0.14 counted prompts per device (no divisibility);
    0.15-0.16 required per-device × processes to divide by num_generations, 0.17 multiplied in
    gradient_accumulation_steps, 0.18 moved the check into GRPOConfig with `generation_batch_size` /
    `steps_per_generation` (default: gradient_accumulation_steps), 0.21 replaced the list of valid values by a
    plain divisibility test, 1.0 added `num_generations_eval`. RLOO took GRPO's geometry in 0.22; before it,
    RLOO (and PPO up to 0.16) computed `local_batch_size = per_device × gradient_accumulation_steps ×
    num_mini_batches`; PPO 0.17-1.12 (trl.experimental.ppo from 0.26) dropped num_mini_batches from that
    product, which is what makes `num_mini_batches` able to fail there. PPO is absent from TRL >= 1.13 (the
    rule then skips; see value-model). Checked against the wheels of 0.14, 0.15.2, 0.16.1, 0.17, 0.18.2, 0.19.1,
    0.21, 0.26, 1.0, 1.12 and 1.16.

How it is detected
    The geometry statements of the installed TRL are read from its own code with Python's `ast`: the config
    class's `__post_init__` chain (its `inspect` source) and the trainer's `__init__` (its source file, not
    imported). The statements that touch the batch knobs (per-device and eval batch, gradient accumulation,
    generation batch, steps per generation, num_generations(_eval), processes, mini-batches, rloo_k) are
    evaluated on the config's values (the config class's defaults, then the user's keys), with `world_size` /
    `accelerator.num_processes` set to the launch's process count. Each `raise`, failed `assert` or inexact
    `exact_div` is recorded with TRL's own message and the code line, and evaluation goes on, so every
    violation is reported at once. As a cross-check the installed config class is built with its `world_size`
    set to the same count: an error it raises that the reading did not find is reported too, and a finding it
    does not confirm is dropped. TRL 1.x's `trl <trainer> --config` passes keys its dataclasses do not know on
    to `accelerate launch`, which is how `num_processes` and `accelerate_config` get into a config.

    The number of processes is, in this order: `--num-processes N`; the config's `num_processes` key; the
    `num_processes` of the accelerate config the config names (`accelerate_config`: a path, relative to the
    config file, or one of TRL's built-in names such as `zero2`, `multi_gpu`; or `config_file`, accelerate
    launch's own flag); accelerate's default config ($HF_HOME/accelerate/default_config.yaml), which
    `accelerate launch` reads when no config is given; the GPUs NVML reports (with CUDA_VISIBLE_DEVICES applied:
    accelerate launch starts one process per GPU); else 1, and the report says so.

    For each violation, changes of one key at a time are tried on the same reading (gradient_accumulation_steps
    or steps_per_generation / generation_batch_size first, then the eval batch, num_mini_batches,
    num_generations or rloo_k, per_device_train_batch_size last; cheaper the closer to the current value), and
    the cheapest that removes it without adding another is named, with the best change of another key as
    the alternative.

What the fix does
    Writes the chosen changes into the config file (for example `gradient_accumulation_steps: 2`, or removing
    `steps_per_generation` when both it and generation_batch_size are set), for the process count the report
    names, after checking that the installed config class accepts the result. Nothing is written when no
    change of the config's own keys removes a violation.
"""

from __future__ import annotations

import ast
import builtins
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trl_doctor import DELETE, Edit, Fix, fail, passed, rule, skip
from trl_doctor.facts.launch import is_geometry_error, launch_processes
from trl_doctor.facts.trl import TRAINER_CLASS

# Names (attributes or locals) of TRL's batch arithmetic: statements that read or write one are evaluated.
GEOMETRY = frozenset({
    "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
    "generation_batch_size", "steps_per_generation", "num_generations", "num_generations_eval", "num_processes",
    "world_size", "num_mini_batches", "local_batch_size", "batch_size", "micro_batch_size", "mini_batch_size",
    "local_mini_batch_size", "local_dataloader_batch_size", "rloo_k", "local_rollout_forward_batch_size",
    "global_batch_size", "effective_batch_size", "global_eval_batch_size",
})
# The knobs a fix may change: (key, tier, direction). Lower tiers change less of what the job does: gradient
# accumulation keeps the per-device memory and the group size; per_device_train_batch_size changes memory.
KNOBS = (
    ("gradient_accumulation_steps", 0, "up"),
    ("steps_per_generation", 0, "up"),
    ("generation_batch_size", 0, "both"),
    ("per_device_eval_batch_size", 0, "both"),
    ("num_generations_eval", 1, "both"),
    ("num_mini_batches", 1, "both"),
    ("local_rollout_forward_batch_size", 1, "both"),
    ("num_generations", 2, "both"),
    ("rloo_k", 2, "both"),
    ("per_device_train_batch_size", 3, "both"),
)
UNSET_COST = 1.0  # removing a key the user set (its default is None: TRL derives it)
MAX_TRIALS = 600  # evaluations of the reading per check, for the fix search
SAFE_BUILTINS = {name: getattr(builtins, name) for name in (
    "int", "float", "str", "bool", "len", "range", "max", "min", "abs", "round", "sum", "list", "tuple", "set",
    "isinstance", "any", "all", "ValueError", "TypeError")}


@rule(
    id="TD010",
    slug="batch-geometry",
    title="Batch sizes, generations and mini-batches divide as the installed TRL requires at the launch's process count",
    fixable="sometimes",
)
def check(ctx):
    from trl_doctor.facts.trl import config_class

    cls = config_class(ctx.trainer)
    trl_version = ctx.version("trl") or "not installed"
    if cls is None:
        yield skip(f"trl {trl_version} has no {ctx.trainer.upper()}Config, so there is no batch geometry to check "
                   "(see value-model / smoke-step for the trainer itself)")
        return
    procs, launch = launch_processes(ctx)
    reading = installed_reading(ctx.trainer, cls)
    base = config_values(cls, ctx.config.raw)
    state = _State(reading, procs)
    problems, resolved = state.run(base)
    details: dict[str, Any] = {"trl": trl_version, "processes": f"{procs} ({launch['words']})"}
    if launch.get("note"):
        details["process count note"] = launch["note"]
    details["geometry"] = _geometry(resolved, procs)
    details["read from"] = [f"{u.where} ({u.kind})" for u in reading.units] or "no geometry code found"

    confirmed, extra, verdict = _cross_check(ctx, cls, ctx.config.raw, procs, problems)
    if verdict:
        details["cross-check"] = verdict
    problems = confirmed

    if not problems and not extra:
        yield passed(f"at {procs} process{'es' if procs != 1 else ''} ({launch['words']}): {_summary(resolved, procs)}",
                     **details)
        return

    plan = _plan_fixes(state, base, problems, cls, set(ctx.config.raw))
    lines = []
    for i, p in enumerate(problems, 1):
        hint = plan.hints.get(p.site)
        lines.append(f"({i}) {p.message} [{p.site}]" + (f": {hint}" if hint else ": no change of one key fixes it"))
    for msg in extra:
        lines.append(f"({len(lines) + 1}) TRL's {cls.__name__} at {procs} processes: {msg}")
    details["violations"] = lines
    fix = None
    if plan.changes and not extra:
        ok, why = _accepted(ctx, cls, ctx.config.raw, plan.changes, procs)
        if ok:
            sets = ", ".join(f"{k}: {v}" for k, v in plan.changes.items() if v is not DELETE)
            drops = ", ".join(k for k, v in plan.changes.items() if v is DELETE)
            words = "; ".join(w for w in (f"set {sets}" if sets else "", f"remove {drops}" if drops else "") if w)
            fix = Fix(f"{words} in {ctx.config.path.name} (for {procs} process{'es' if procs != 1 else ''})",
                      (Edit(str(ctx.config.path), set=tuple(plan.changes.items())),))
            details["changes"] = words
        else:
            details["fix not offered"] = f"TRL's {cls.__name__} rejects the changed config: {why}"
    count = len(lines)
    head = (f"{count} batch-geometry violation{'s' if count != 1 else ''} at {procs} process{'es' if procs != 1 else ''} "
            f"({launch['words']}), where trl {trl_version} stops: ")
    yield fail(head + "; ".join(lines), fix=fix, **details)


# -- reading the installed TRL's geometry code ------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    site: str  # "trl/trainer/grpo_config.py:1131"
    message: str  # TRL's own message, with this config's numbers
    kind: str = "trainer"  # "config" (the config class raises it), "trainer" (the trainer's __init__), "loop"


@dataclass(frozen=True)
class _Unit:
    kind: str  # "config" (the config class's __post_init__) or "trainer" (the trainer's __init__)
    where: str  # "trl/trainer/grpo_config.py:1048"
    body: tuple  # the function's statements, keeping only those that touch the geometry
    file: str  # relative path for sites
    offset: int  # line number of the function's first line minus 1
    supers: tuple = ()  # for a config unit: the parent __post_init__ units, called by super().__post_init__()


@dataclass(frozen=True)
class Reading:
    units: tuple  # the top-level units, config first


_READINGS: dict = {}


def installed_reading(trainer: str, cls) -> Reading:
    """The geometry statements of the installed TRL for `trainer` (cached per config class)."""
    key = (trainer, cls)
    if key not in _READINGS:
        units = []
        chain = _config_units(cls)
        if chain:
            units.append(chain)
        unit = _trainer_unit(trainer)
        if unit is not None:
            units.append(unit)
        _READINGS[key] = Reading(tuple(units))
    return _READINGS[key]


def _rel(path: str) -> str:
    from trl_doctor.facts.trl import trl_root

    root = trl_root()
    try:
        return "trl/" + Path(path).resolve().relative_to(root.resolve()).as_posix() if root else Path(path).name
    except ValueError:
        return Path(path).name


def _config_units(cls) -> _Unit | None:
    """The `__post_init__` of the TRL classes in the config class's MRO, each with its parent for super()."""
    import inspect

    found = []
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
        found.append((tree.body[0], file, start - 1))
    unit = None
    for func, file, offset in reversed(found):  # innermost parent first
        unit = _Unit("config", f"{file}:{offset + 1}", _prune(func.body), file, offset, (unit,) if unit else ())
    return unit


def _trainer_unit(trainer: str) -> _Unit | None:
    from trl_doctor.facts.trl import trainer_source

    src = trainer_source(trainer)
    if src is None:
        return None
    rel, text = src
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == TRAINER_CLASS[trainer]:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    body = _prune(item.body)
                    return _Unit("trainer", f"{rel}:{item.lineno}", body, rel, 0) if body else None
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


class _State:
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
        args.do_eval = bool(values.get("do_eval")) or str(_plain(values.get("eval_strategy", "no"))) != "no"
        accelerator = SimpleNamespace(num_processes=self.procs, process_index=0, is_main_process=True,
                                      local_process_index=0)
        problems: list[Problem] = []
        for unit in self.reading.units:
            if unit.kind == "config":
                env = {"self": args}
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
    def _block(self, body, env, unit: _Unit, problems: list) -> bool:
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

    def _site(self, unit: _Unit, stmt) -> str:
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


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)  # enums (IntervalStrategy) to their string


def _field_default(cls, key: str) -> Any:
    from trl_doctor.facts.trl import field_default

    return field_default(cls, key)


def config_values(cls, raw: dict) -> dict:
    """The config class's defaults overlaid with the user's keys (numbers given as strings made ints)."""
    import dataclasses

    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            try:
                values[f.name] = f.default_factory()  # type: ignore[misc]
            except Exception:
                values[f.name] = None
        else:
            values[f.name] = None
    for key, value in raw.items():
        if key in values:
            values[key] = int(value) if key in GEOMETRY and isinstance(value, str) and value.strip().isdigit() else value
    return values


# -- the smallest change ----------------------------------------------------------------------------------

@dataclass
class _Plan:
    changes: dict  # key -> new value (or DELETE), for the Fix
    hints: dict  # problem site -> "set gradient_accumulation_steps: 2 (or num_generations: 6)"


def _candidates(cls, values: dict, user_keys: set) -> list[tuple[float, str, Any]]:
    """(cost, key, new value or DELETE) for one-key changes, cheapest first."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(cls)}
    out = []
    for order, (key, tier, direction) in enumerate(KNOBS):
        current = values.get(key)
        if key not in fields or current is None or isinstance(current, bool) or not isinstance(current, int):
            continue
        tie = order * 1e-3  # equal costs: the order of KNOBS decides
        if key in user_keys and _field_default(cls, key) is None:
            out.append((tier + UNSET_COST + tie, key, DELETE))  # let TRL derive it again
        if current < 1:
            out.append((tier + 1 + tie, key, 1))
            continue
        for v in range(1, max(4 * current, current + 16) + 1):
            if v != current and not (direction == "up" and v < current):
                out.append((tier + abs(math.log2(v / current)) + tie, key, v))
    out.sort(key=lambda c: c[0])
    return out


ALT_TRIALS = 80  # evaluations spent looking for an alternative once the best change is known


def _plan_fixes(state: _State, base: dict, problems: list[Problem], cls, user_keys: set) -> _Plan:
    """One change per violation, cheapest first, each removing its violation without adding another."""
    values = dict(base)
    keys = set(user_keys)
    changes: dict[str, Any] = {}
    hints: dict[str, str] = {}
    current = [p for p in problems]
    unfixable: set[str] = set()
    for _ in range(len(problems) + 3):
        todo = [p for p in current if p.site not in unfixable]
        if not todo:
            break
        target = todo[0]
        before = {p.site for p in current}
        best, alt, spent = None, None, 0
        for cost, key, value in _candidates(cls, values, keys):
            if state.trials >= MAX_TRIALS or (best is not None and spent >= ALT_TRIALS):
                break
            if best is not None:
                if key == best[0]:
                    continue
                spent += 1
            trial = dict(values)
            trial[key] = _field_default(cls, key) if value is DELETE else value
            after, _ = state.run(trial)
            sites = {p.site for p in after}
            if target.site in sites or not sites <= before:
                continue
            if best is None:
                best = (key, value, trial, after)
            else:
                alt = (key, value)
                break
        if best is None:
            unfixable.add(target.site)
            continue
        key, value, values, after = best
        gone = [p for p in current if p.site != target.site and p.site not in {a.site for a in after}]
        current = after
        changes[key] = value
        if value is DELETE:
            keys.discard(key)
        else:
            keys.add(key)
        hint = f"remove {key} (TRL then derives it)" if value is DELETE else f"set {key}: {value}"
        if alt is not None:
            hint += f" (or remove {alt[0]})" if alt[1] is DELETE else f" (or {alt[0]}: {alt[1]})"
        hints[target.site] = hint
        for p in gone:  # removed by the same change
            main = f"removing {key}" if value is DELETE else f"{key}: {value}"
            hints.setdefault(p.site, f"fixed by the same change ({main})")
    return _Plan({k: v for k, v in changes.items() if v is DELETE or v != base.get(k)}, hints)


# -- the installed config class as a cross-check ----------------------------------------------------------



def _probe_class(cls, procs: int):
    """The config class with its `world_size` property answering `procs`. Where world_size is a plain field
    (PPOConfig, PPO-style RLOOConfig: the trainer fills it in), the class itself: its __post_init__ does not
    read the process count."""
    import dataclasses

    if any(f.name == "world_size" for f in dataclasses.fields(cls)):
        return cls
    return type(f"{cls.__name__}AtWorldSize{procs}", (cls,), {"world_size": property(lambda self: procs),
                                                                "__module__": __name__})


def _build(ctx, cls, raw: dict, changes: dict, procs: int) -> str | None:
    """None when the installed config class accepts the config at `procs` processes, else its error."""
    import dataclasses
    import warnings

    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {k: v for k, v in raw.items() if k in fields}
    for k, v in changes.items():
        if v is DELETE:
            kwargs.pop(k, None)
        else:
            kwargs[k] = v
    kwargs.setdefault("output_dir", str(ctx.workdir / "output"))
    try:
        kwargs.update(ctx.trainer_config_info.injected)  # use_cpu on a machine without a GPU, as TD009 builds it
    except Exception:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _probe_class(cls, procs)(**kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None


def _cross_check(ctx, cls, raw: dict, procs: int, problems: list[Problem]) -> tuple[list[Problem], list[str], str | None]:
    """(problems kept, TRL errors the reading missed, words) from building the installed config class."""
    error = _build(ctx, cls, raw, {}, procs)
    config_sites = [p for p in problems if p.kind == "config"]
    if error is None:
        if config_sites:  # TRL accepts what the reading rejects: trust TRL, say so
            kept = [p for p in problems if p not in config_sites]
            return kept, [], (f"{cls.__name__} accepts the config at {procs} processes; not reported: "
                              + "; ".join(p.message for p in config_sites))
        return problems, [], f"{cls.__name__} built with world_size {procs}: accepted"
    if not is_geometry_error(error):
        return problems, [], f"{cls.__name__} stops first on another error (see trainer-config): {error}"
    message = error.split(": ", 1)[-1]
    if any(_same(message, p.message) for p in problems):
        return problems, [], f"{cls.__name__} built with world_size {procs}: {error}"
    return problems, [message], f"{cls.__name__} built with world_size {procs}: {error} (not found by the reading)"


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).rstrip(".") == " ".join(b.split()).rstrip(".")


def _accepted(ctx, cls, raw: dict, changes: dict, procs: int) -> tuple[bool, str]:
    error = _build(ctx, cls, raw, changes, procs)
    if error is None or not is_geometry_error(error):
        return True, ""
    return False, error


# -- words ------------------------------------------------------------------------------------------------

def _geometry(v: dict, procs: int) -> dict:
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size",
            "num_generations", "num_generations_eval", "eval_strategy", "per_device_eval_batch_size", "num_mini_batches",
            "rloo_k", "local_batch_size", "batch_size", "mini_batch_size", "local_mini_batch_size",
            "local_rollout_forward_batch_size", "whiten_rewards", "total_episodes", "num_total_batches")
    out = {"processes": procs}
    for k in keys:
        if k in v and v[k] is not None:
            out[k] = _plain(v[k])
    return out


def _summary(v: dict, procs: int) -> str:
    pd, ga = v.get("per_device_train_batch_size"), v.get("gradient_accumulation_steps")
    g = v.get("num_generations")
    parts = []
    if v.get("generation_batch_size") and g:
        gbs, spg = v["generation_batch_size"], v.get("steps_per_generation")
        parts.append(f"generation batch {gbs} ({pd} per device × {_n(procs, 'process', 'processes')} × "
                     f"{_n(spg, 'step')} per generation) = {_n(gbs // g, 'prompt')} × {g} generations")
    elif "num_mini_batches" in v or "rloo_k" in v:
        local = v.get("local_batch_size")
        if local:
            parts.append(f"rollout batch {local} per process ({v.get('batch_size')} in all), "
                         f"{v.get('num_mini_batches')} mini-batch{'es' if v.get('num_mini_batches') != 1 else ''} "
                         f"of {v.get('local_mini_batch_size')} per process")
        else:
            parts.append(f"{pd} per device × {ga} accumulation steps, {v.get('num_mini_batches')} mini-batches")
        if v.get("rloo_k"):
            parts.append(f"rloo_k {v['rloo_k']}")
    elif g:
        total = pd * procs
        parts.append(f"{pd} per device × {procs} = {total} completions per step, num_generations {g}")
    if str(_plain(v.get("eval_strategy", "no"))) != "no" and g:
        ge = v.get("num_generations_eval") or g
        parts.append(f"eval batch {v.get('per_device_eval_batch_size')} × {procs} divides into groups of {ge}")
    return "; ".join(parts) + "; nothing the installed TRL checks fails" if parts else "nothing the installed TRL checks fails"


def _n(count: Any, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"
