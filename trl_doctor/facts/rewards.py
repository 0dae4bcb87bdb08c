"""Reward functions as TRL uses them, shared by the reward-functions rule (TD014) and the smoke step (TD006):

- `resolve_reward`: a `reward_funcs` entry resolved the way TRL's scripts do: a built-in name from
  `trl.rewards`, or a dotted import path, looked up from the config file's folder first, then the current
  folder (as `trl grpo` does; both on sys.path for the import only); the import runs in the worker's fence,
  and a module whose import ended an earlier worker is not imported again;
- `reward_fence`: the fence around calls of one reward function (a call that ended an earlier worker keeps
  `resolve_reward` from handing the function out again);
- `call_reward`: one call as the trainer makes it: a synchronous function on the main thread (math_verify refuses
  any other), under a time limit that works there (trl_doctor.runtime.deadline), an `async def` one on a loop thread;
- `reward_call`: how the installed GRPO/RLOO trainer calls reward functions, read from its source (which
  keywords, which extra arguments, which dataset columns, whether None, NaN and async functions are handled);
- `as_trl_reads`: a return value as the installed trainer reads it (a lazy iterable as its items where TRL
  iterates it);
- `bind_problem`, `raised_info`, `new_stats`, `record_values`, `reward_problem`: the checks on one call and
  the message naming what is wrong, the same in the static probe and in the real training step.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from trl_doctor.runtime import fence as _fence


class RewardImportError(Exception):
    pass


# Reward callables a launch command's script built, by the name the check knows them under: the one registry of
# live objects in the worker (`trl_doctor.capture`), filled before the rules run.
_LIVE: dict[str, Callable[..., Any]] = {}


def register_live(func: Callable[..., Any]) -> str:
    """Register a callable the script passed as a reward function; its name is `module.qualname`
    (`__main__.accuracy_reward` for one defined in the script)."""
    module = getattr(func, "__module__", None) or "script"
    base = f"{module}.{getattr(func, '__qualname__', None) or getattr(func, '__name__', None) or type(func).__name__}"
    name, n = base, 1
    while name in _LIVE and _LIVE[name] is not func:
        n += 1
        name = f"{base}#{n}"
    _LIVE[name] = func
    return name


def live_reward(name: str) -> Callable[..., Any] | None:
    """The callable a script passed under this name, or None for a name from a config."""
    return _LIVE.get(name)


def resolve_reward(name: str, base_dir: str | Path) -> Callable[..., Any]:
    if name in _LIVE:
        return _LIVE[name]
    if "." not in name:
        try:
            import trl.rewards as builtin

            return getattr(builtin, name)
        except (ImportError, AttributeError):
            raise RewardImportError(f"reward function {name!r} is neither a dotted path nor one of trl.rewards") from None
    module_name, _, attr = name.rpartition(".")
    base = str(Path(base_dir).resolve())
    try:
        _fence.check_failed(_call_key(name, base), *_import_keys(module_name, base))
    except _fence.UserCodeFailed as exc:
        raise RewardImportError(str(exc)) from None
    _forget_shadowed(module_name.split(".")[0], Path(base))
    # the config's folder, then the current one (where `trl grpo` looks), on sys.path for this import only
    added = [p for p in dict.fromkeys((base, os.getcwd())) if p not in sys.path]
    sys.path[:0] = added
    try:
        with _fence.user_code(f"{_module_label(module_name, base)} (importing {name})",
                              key=_import_keys(module_name, base)[0]):
            module = importlib.import_module(module_name)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # sys.exit() or a raised KeyboardInterrupt at import too
        cause = str(exc) or ("allocation past the worker's memory limit (--max-memory)" if isinstance(exc, MemoryError)
                             else "no message")
        raise RewardImportError(f"cannot import {module_name!r} for reward {name!r} (looked in {base} first): "
                                f"{type(exc).__name__}: {cause}") from None
    finally:
        for folder in added:
            if folder in sys.path:
                sys.path.remove(folder)
    func = getattr(module, attr, None)
    if func is None:
        raise RewardImportError(f"module {module_name!r} ({getattr(module, '__file__', '?')}) has no {attr!r}")
    if not callable(func):
        raise RewardImportError(f"reward {name!r} is not callable")
    return func


def _import_keys(module_name: str, base: str) -> list[str]:
    """The fence keys of importing `module_name` from `base`, then of its parent packages (whose failure it shares)."""
    parts = module_name.split(".")
    return [f"reward-import:{base}:{'.'.join(parts[:n])}" for n in range(len(parts), 0, -1)]


def _call_key(name: str, base: str) -> str:
    return f"reward-call:{base}:{name}"


def _module_label(module_name: str, base: str) -> str:
    """`rewards.py` (the module's file, relative to the config's folder), or `module rewards` when not there."""
    path = Path(base, *module_name.split("."))
    for file in (path.with_suffix(".py"), path / "__init__.py"):
        if file.is_file():
            return str(file.relative_to(base))
    return f"module {module_name}"


GRACE_S = 10.0  # in a supervised worker the supervisor stops an overrunning call first: the caller waits longer


@contextmanager
def reward_fence(name: str, func: Callable[..., Any], base_dir: str | Path, limit: float) -> Iterator[tuple[str, float]]:
    """The fence around calls of reward function `name`. Yields its label (`rewards.py (calling rewards.f)`) and how
    long the caller's own wait may last: `limit` in-process, longer where a supervisor stops the call at `limit`."""
    base = str(Path(base_dir).resolve())
    code = getattr(func, "__code__", None) or getattr(getattr(func, "__call__", None), "__code__", None)  # noqa: B004 (its code object: a callable instance's method)
    where = code.co_filename if code is not None else None
    label = f"{(os.path.relpath(where, base) if where and where.startswith(base) else where) or name} (calling {name})"
    with _fence.user_code(label, limit, key=_call_key(name, base)):
        yield label, limit + GRACE_S if _fence.supervised() else limit


def _forget_shadowed(top: str, base: Path) -> None:
    """Drop a cached module `top` that another folder provided when this config's folder has its own: two
    configs in one process (the doctor's tests, a notebook) may each keep reward functions in a `rewards.py`."""
    cached = sys.modules.get(top)
    local = next((p for p in (base / f"{top}.py", base / top / "__init__.py") if p.is_file()), None)
    if cached is None or local is None:
        return
    origin = getattr(cached, "__file__", None)
    if origin is not None and Path(origin).resolve() == local.resolve():
        return
    for key in [k for k in sys.modules if k == top or k.startswith(top + ".")]:
        del sys.modules[key]
    importlib.invalidate_caches()


def resolve_callables(names: Any, base_dir: str | Path) -> Any:
    """What a script passed as `tools`, `environment_factory` or `rollout_func`, by the names the capture registered
    (`resolve_reward` on each): a list, a dict of them, or one."""
    if isinstance(names, dict):
        return {key: resolve_reward(value, base_dir) for key, value in names.items()}
    if isinstance(names, list):
        return [resolve_reward(name, base_dir) for name in names]
    return resolve_reward(names, base_dir)


# -- calling one reward function ------------------------------------------------------------------------------------

TRAINER_OBJECTS = ("trainer_state", "log_extra", "log_metric")  # passed as they are: the trainer's own objects


def call_reward(func: Callable[..., Any], kwargs: dict, awaited: bool, wait: float,
                skip_files: tuple[str, ...] = ()) -> dict[str, Any]:
    """Call `func(**kwargs)` on the thread the installed trainer uses, capturing what it prints: a synchronous
    function on this (the worker's main) thread, under `_deadline.deadline(wait)`; an `async def` one on an event
    loop in a thread of its own, as TRL's `async_loop`. Returns {"value"} or {"raised": raised_info}, with
    "timeout" when it ran past `wait`, "off_main" when the error is only the doctor's (code that needs the main
    thread, probed from another one), and "printed"."""
    import contextlib
    import io

    from trl_doctor.runtime import deadline as _deadline

    args = _copied({k: v for k, v in kwargs.items() if k not in TRAINER_OBJECTS})
    args.update({k: v for k, v in kwargs.items() if k in TRAINER_OBJECTS})
    out: dict[str, Any] = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        if awaited or not _deadline.on_main_thread():
            out = _call_in_thread(func, args, awaited, wait, skip_files)
        else:
            limit = _deadline.deadline(wait)
            try:
                with limit:
                    out["value"] = func(**args)
            except BaseException as exc:  # the user's error is the finding (sys.exit() in a reward function too)
                out["raised"] = raised_info(exc, skip_files=skip_files + (__file__, _deadline.__file__))
            if limit.expired:
                out = {"timeout": True}
    if "raised" in out and not _deadline.on_main_thread() and "main thread" in out["raised"].get("chain", ""):
        out["off_main"] = True
    text = printed.getvalue().strip()
    if text:
        out["printed"] = text if len(text) <= 300 else text[:297] + "..."
    return out


def _call_in_thread(func: Callable[..., Any], args: dict, awaited: bool, wait: float,
                    skip_files: tuple[str, ...]) -> dict[str, Any]:
    import threading

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            if awaited:
                import asyncio

                box["value"] = asyncio.run(func(**args))
            else:
                box["value"] = func(**args)
        except BaseException as exc:
            box["raised"] = raised_info(exc, skip_files=skip_files + (__file__,))

    worker = threading.Thread(target=target, name="trl-doctor-reward-call", daemon=True)
    worker.start()
    worker.join(wait)
    return {"timeout": True} if worker.is_alive() else box


def _copied(kwargs: dict) -> dict:
    """A deep copy, so that a function that edits its arguments does not change what the next one gets; the lists
    themselves where a value cannot be copied (TRL passes the same objects to every function)."""
    import copy

    try:
        return copy.deepcopy(kwargs)
    except Exception:
        return {k: list(v) if isinstance(v, list) else v for k, v in kwargs.items()}


# -- how the installed trainer calls reward functions ------------------------------------------------------------

@dataclass(frozen=True)
class RewardCall:
    """How one installed trainer calls a reward function, read from its source file."""

    source: str  # trl/trainer/grpo_trainer.py
    takes_reward_funcs: bool  # False for the PPO-style RLOOTrainer (trl < 0.22): a reward model only
    keywords: tuple[str, ...] = ()  # ("prompts", "completions", "completion_ids")
    extras: tuple[str, ...] = ()  # always-set reward_kwargs entries: ("trainer_state", "log_extra", "log_metric")
    # entries set only for a job with an environment_factory (trl >= 1.x: `if self.environments is not None:
    # reward_kwargs["environments"] = self.environments`, one instance per completion)
    environment_extras: tuple[str, ...] = ()
    excluded_columns: tuple[str, ...] = ("prompt", "completion")  # dataset columns not passed by name
    none_allowed: bool = False  # `reward if reward is not None else torch.nan` (trl >= 0.16)
    nan_ignored: bool = False  # rewards summed with nansum: a NaN score counts as "no score"
    awaits_async: bool = False  # `async def` reward functions are awaited
    checks_length: bool = False  # a wrong number of scores is an error, not a silent broadcast
    eos_pad_for_reward_models: bool = False  # a reward model's tokenizer without pad gets pad = eos
    evidence: str = ""  # file:line of the call

    def call_names(self, environments: bool = False) -> tuple[str, ...]:
        """What the call passes by name besides the dataset's columns; `environments`: the job has an
        environment_factory."""
        return self.keywords + self.extras + (self.environment_extras if environments else ())


_CALL_RE = re.compile(r"(?<![\w.])(?:reward_func|func)\(\s*((?:\w+\s*=\s*\w+\s*,\s*)*)\*\*reward_kwargs\s*,?\s*\)")
_EXTRA_RE = re.compile(r"^([ \t]*)reward_kwargs\[[\"'](\w+)[\"']\]\s*=", re.M)
_EXCLUDED_RE = re.compile(r"for key in inputs\[0\] if key not in \[([^\]]*)\]")
_NONE_RE = re.compile(r"if \w+ is not None else (?:torch\.nan|float\([\"']nan[\"']\)|math\.nan)")
_ASYNC_RE = re.compile(r"is_async_callable\(|iscoroutinefunction\(")
_LENGTH_RE = re.compile(r"were expected|len\(output\w*\) != len\(prompts\)")
_EOS_PAD_RE = re.compile(r"reward_processing_class\.pad_token\s*=\s*reward_processing_class\.eos_token")


def reward_call(trainer: str) -> RewardCall | None:
    """How the installed `trainer` ("grpo" or "rloo") calls reward functions; None when TRL lacks its source."""
    from trl_doctor.facts.trl.installed import trainer_source

    found = trainer_source(trainer)
    if found is None:
        return None
    return parse_reward_call(*found)


def parse_reward_call(rel: str, text: str) -> RewardCall:
    call = _CALL_RE.search(text)
    if call is None:
        return RewardCall(source=rel, takes_reward_funcs="reward_funcs" in text)
    keywords = tuple(re.findall(r"(\w+)\s*=", call.group(1)))
    extras, environment_extras = [], []
    lines = text.splitlines()
    for m in _EXTRA_RE.finditer(text):
        block = _block(lines, text.count("\n", 0, m.start()), len(m.group(1)))
        if block is None:
            extras.append(m.group(2))
        elif re.match(r"if self\.environments\b", block):
            environment_extras.append(m.group(2))
    excluded = _EXCLUDED_RE.search(text)
    columns = tuple(re.findall(r"[\"'](\w+)[\"']", excluded.group(1))) if excluded else ("prompt", "completion")
    line = text.count("\n", 0, call.start()) + 1
    return RewardCall(
        source=rel,
        takes_reward_funcs=True,
        keywords=keywords,
        extras=tuple(dict.fromkeys(extras)),
        environment_extras=tuple(dict.fromkeys(environment_extras)),
        excluded_columns=columns,
        none_allowed=bool(_NONE_RE.search(text)),
        nan_ignored=".nansum(" in text,
        awaits_async=bool(_ASYNC_RE.search(text)),
        checks_length=bool(_LENGTH_RE.search(text)),
        eos_pad_for_reward_models=bool(_EOS_PAD_RE.search(text)),
        evidence=f"{rel}:{line}: `{' '.join(call.group(0).split())}`",
    )


def _block(lines: list[str], index: int, indent: int) -> str | None:
    """The `if`/`elif`/`else` line whose block holds the statement on line `index` (an argument passed only
    sometimes), stripped; None where the statement is not inside one."""
    for prev in reversed(lines[:index]):
        stripped = prev.strip()
        if not stripped or stripped.startswith("#"):
            continue
        prev_indent = len(prev) - len(prev.lstrip())
        if prev_indent < indent:
            return stripped if stripped.startswith(("if ", "elif ", "else")) else None
        if prev_indent == indent:
            continue  # a sibling statement: keep looking for the block that holds them
    return None


class EnvironmentFailed(RuntimeError):
    """The script's environment factory or an environment's reset raised (any BaseException: a SystemExit, a
    KeyboardInterrupt), or ended an earlier worker of the check: its words."""


def fenced_environments(factory: Any, rows: list[dict], base_dir: str | Path, limit: float) -> list[Any]:
    """`environments_for` as user code (issue 59): inside the fence, so a reset that never returns is stopped at
    `limit` by the supervisor (the next worker is told, and this raises without running it again), one that ends the
    worker is named as the code that did, and whatever it raises is an EnvironmentFailed."""
    base = str(Path(base_dir).resolve())
    named = factory if not isinstance(factory, dict) else next(iter(factory.values()), None)
    name = f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', type(named).__name__)}"
    key = f"environment:{base}:{name}"
    try:
        _fence.check_failed(key)
    except _fence.UserCodeFailed as exc:
        raise EnvironmentFailed(str(exc)) from None
    try:
        with _fence.user_code(f"{name} (building and resetting the environments)", limit, key=key):
            return environments_for(factory, rows)
    except BaseException as exc:  # noqa: BLE001 - the user's code: a SystemExit or KeyboardInterrupt is its failure too
        raise EnvironmentFailed(f"{type(exc).__name__}: {' '.join(str(exc).split())[:300] or 'no message'}") from None


def environments_for(factory: Any, rows: list[dict]) -> list[Any]:
    """One environment per row, as GRPOTrainer builds them for a batch (trl 1.16 `_generate`): the factory called
    (a dict of factories: the one the row's `environment` names), then `reset(**row)` (the row without its
    `environment` key for a dict). Raises what the user's factory or reset raises."""
    envs = []
    for row in rows:
        if isinstance(factory, dict):
            env = factory[row.get("environment")]()
            env.reset(**{k: v for k, v in row.items() if k != "environment"})
        else:
            env = factory()
            env.reset(**row)
        envs.append(env)
    return envs


def is_async(func: Callable[..., Any]) -> bool:
    """As TRL's is_async_callable: async functions, partials of them and instances with an async __call__."""
    import functools
    import inspect

    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None))  # noqa: B004 (an async __call__)


# -- one call: the checks and the message ----------------------------------------------------------------------------

def new_stats() -> dict[str, Any]:
    return {"calls": 0, "completions": 0, "scores": 0, "nonfinite": 0, "nan": 0, "none": 0, "non_numeric": 0,
            "min": None, "max": None, "sum": 0.0}


def bind_problem(func: Callable[..., Any], name: str, signature, args: tuple, kwargs: dict) -> dict | None:
    """Why `func` cannot take this call (its signature, what was passed, Python's error), or None."""
    if signature is None:
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return {"error": str(exc), "signature": f"{getattr(func, '__name__', name)}{signature}",
                "passed": sorted(kwargs), "positional": len(args)}
    return None


def raised_info(exc: BaseException, skip_files: tuple[str, ...] = ()) -> dict[str, str]:
    """The error and the innermost frame outside `skip_files` (the user's line that raised)."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename not in skip_files]
    where = frames[-1] if frames else None
    error = f"{type(exc).__name__}: {exc}"
    chain: list[str] = []  # the messages it was raised from too: what the doctor's own calling caused shows there
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(chain) < 5:
        seen.add(id(link))
        chain.append(str(link))
        link = link.__cause__ or link.__context__
    return {
        "error": error,
        "where": f"{where.filename}:{where.lineno}" if where else "?",
        "line": (where.line or "") if where else "",
        "chain": " | ".join(chain),
    }


def as_trl_reads(values: Any, call: RewardCall | None) -> Any:
    """A reward function's return value as the installed trainer reads it: a TRL that maps None to NaN (trl >= 0.16:
    `[reward if reward is not None else torch.nan for reward in output_reward_func]`) iterates whatever it gets, so a
    lazy iterable (a generator, `map`, `itertools.starmap`, Modal's `Function.starmap`) reaches torch.tensor as the
    list of its items; an older TRL hands the value to torch.tensor as it is, which refuses an iterator ('must be
    real number, not ...'): left as it is, for `record_values` to flag."""
    if call is not None and call.none_allowed and not hasattr(values, "__len__") and hasattr(values, "__iter__") \
            and not isinstance(values, (str, bytes, dict)):
        return list(values)
    return values


def record_values(stats: dict[str, Any], values: Any, expected: int | None) -> list[float | None] | None:
    """Fold one call's return value into `stats`; returns the scores as floats (None where none), or None when
    the value is not a list of scores at all."""
    stats["calls"] += 1
    stats["completions"] += expected or 0
    if values is None or isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        stats["wrong_type"] = type(values).__name__
        return None
    values_list = list(values)
    if expected is not None and len(values_list) != expected and "wrong_length" not in stats:
        stats["wrong_length"] = {"returned": len(values_list), "completions": expected}
    scores: list[float | None] = []
    for v in values_list:
        if v is None:
            stats["none"] += 1
            scores.append(None)
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            stats["non_numeric"] += 1
            stats.setdefault("non_numeric_example", repr(v)[:80])
            scores.append(None)
            continue
        stats["scores"] += 1
        scores.append(f)
        if not math.isfinite(f):
            stats["nonfinite"] += 1
            stats["nan"] += math.isnan(f)
            continue
        stats["sum"] += f
        stats["min"] = f if stats["min"] is None else min(stats["min"], f)
        stats["max"] = f if stats["max"] is None else max(stats["max"], f)
    return scores


def reward_problem(name: str, s: dict[str, Any], trl_version: str | None, short: Callable[[str], str] = str,
                   call: RewardCall | None = None) -> str | None:
    """The message for the first problem recorded in `s`, or None. With `call` (the static probe), the message
    also says what the installed trainer does with it."""
    one = "one float (or None) per completion" if call is None or call.none_allowed else "one float per completion"
    if "signature" in s:
        sig = s["signature"]
        passed = ", ".join(f"{k}=" for k in sig["passed"])
        missing = re.search(r"missing a required (?:keyword-only )?argument: '(\w+)'", sig["error"])
        advice = (f"TRL passes dataset columns by name, so `{missing.group(1)}` needs a dataset column of that name (or a "
                  "default value)" if missing else
                  "accept `prompts`, `completions` and `**kwargs` (TRL also passes every dataset column by name)")
        return (f"reward function {name} cannot be called the way trl {trl_version} calls it: it is "
                f"`{sig['signature']}`, TRL calls it with ({passed}) and Python says {sig['error']}; {advice}")
    if "raised" in s:
        r = s["raised"]
        return f"reward function {name} raised {r['error']} at {short(r['where'])}: `{r['line']}`"
    if "wrong_type" in s:
        return f"reward function {name} returned a {s['wrong_type']}, not a list with {one}"
    if "wrong_length" in s:
        w = s["wrong_length"]
        text = (f"reward function {name} returned {w['returned']} scores for {w['completions']} completions: TRL needs "
                f"{one}")
        if call is not None:
            text += (f"; trl {trl_version} stops with 'The reward function ... returned {w['returned']} rewards, but "
                     f"{w['completions']} were expected'" if call.checks_length else
                     f"; trl {trl_version} does not check the count: "
                     + ("a single score is broadcast to every completion, so every completion gets the same reward "
                        "and the advantages are zero" if w["returned"] == 1 else "the step fails on the tensor shapes"))
        return text
    if s.get("non_numeric"):
        return (f"reward function {name} returned non-numbers (e.g. {s.get('non_numeric_example')}): TRL needs {one}")
    return None
