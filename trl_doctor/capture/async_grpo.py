"""TRL's AsyncGRPOTrainer as the script built it, read where transformers' constructor stops it.

AsyncGRPOTrainer.__init__ runs TRL's own set-up first (the model loaded by id with its tree attention, TRL's refusals
of hybrid and attention-sink models and of a LoRA on lm_head, the tokenizer, the PEFT wrap) and then calls
transformers' Trainer.__init__, where the capture stops every trainer it does not hook itself. So the set-up runs
for real, on the meta-device model, and what it built is read from its own frame: the model, the reward functions
(normalized to a list), tools, environment factory, dataset, tokenizer and config. Nothing of TRL's async_grpo is
imported by the doctor.

Its rollout worker pickles the reward functions, tools and environment factory for a spawned child process when
training starts (AsyncRolloutWorker.start(), after the server is reached and the first weights are sent). The same
pickling is tried here, while the script's `__main__` is still the running script (runpy's module), as it is in the
real run: a lambda, a closure or a local function fails here as it fails there.
"""

from __future__ import annotations

import io
import pickle
import re
from dataclasses import dataclass
from typing import Any

from ..facts.trl.async_grpo import PICKLED, TRAINER_FILE

# AsyncGRPOTrainer.__init__'s locals the doctor reads, by the name its Trainer.__init__ arguments have elsewhere
_LOCALS = ("model", "args", "train_dataset", "processing_class", "callbacks", "optimizers", "peft_config",
           "reward_funcs", "tools", "environment_factory", "rollout_worker", "weight_transfer")
PICKLE_LIMIT = 64 << 20  # bytes pickled per object before it is taken as picklable (a captured model, a big table)


def _trl_init(code) -> bool:
    """Whether `code` is AsyncGRPOTrainer.__init__ in the installed TRL's file."""
    return code.co_name == "__init__" and code.co_filename.replace("\\", "/").endswith(TRAINER_FILE)


def construction_locals(frame, trainer: Any) -> dict[str, Any] | None:
    """The locals of the AsyncGRPOTrainer.__init__ frame (above `frame`) building `trainer`, or None."""
    while frame is not None:
        if _trl_init(frame.f_code) and frame.f_locals.get("self") is trainer:
            found = frame.f_locals
            return {name: found[name] for name in _LOCALS if name in found}
        frame = frame.f_back
    return None


def refusal(exc: BaseException):
    """(the AsyncGRPOTrainer.__init__ frame, TRL's words, where TRL raised them) when `exc` is one of its own
    refusals of what the script built, raised by its __init__ itself before transformers' constructor (a model with
    recurrent layers or attention sinks, a LoRA on lm_head, router_aux_loss_coef on a dense model, use_liger_kernel,
    a missing peft); else None. An error from deeper down (the meta-device model, a library) is not TRL's verdict."""
    if not isinstance(exc, (ValueError, TypeError, NotImplementedError, ImportError)):
        return None
    tb, last = exc.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    frame = last.tb_frame if last is not None else None
    if frame is None or not _trl_init(frame.f_code):
        return None
    assert last is not None  # the frame is its
    words = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
    return frame, words, f"trl/{TRAINER_FILE}:{last.tb_lineno}"


def record(recorder, trainer: Any, built: dict[str, Any], frame, refused: tuple[str, str] | None = None) -> None:
    """Record an AsyncGRPOTrainer in the capture's Recorder from its __init__'s locals (`frame` is that __init__'s):
    stopped at transformers' constructor, or refused by TRL's own checks before it (`refused`: its words and where
    it raised them)."""
    from ..facts.trl.async_grpo import Built
    from ..vocabulary import ASYNC_GRPO

    recorder.trainer_cls = type(trainer)
    recorder.trainer_kind = ASYNC_GRPO
    recorder.arguments = {k: v for k, v in built.items() if v is not None}
    recorder.async_grpo = Built(tuple(spawn_pickling(built)), refused, built.get("weight_transfer") is not None,
                                built.get("rollout_worker") is not None, unguarded_main(frame))


def unguarded_main(frame) -> tuple[str, int] | None:
    """(file, line) of the main module's top-level statement that is building the trainer (the script's, or the
    module `python -m` runs: sys.modules["__main__"] as the capture runs it, as the job will), when that statement is
    outside an `if __name__ == "__main__":` block; None when it is inside one, or the trainer is built from no
    main module's top level (a console script's entry function), or the file cannot be read.

    AsyncRolloutWorker starts its child with multiprocessing's spawn, which runs the main module again in the child
    (as `__mp_main__`) before the child does anything: unguarded, the whole script runs there once more."""
    import sys

    main = sys.modules.get("__main__")
    main_globals = getattr(main, "__dict__", None)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is main_globals:
            file, line = frame.f_code.co_filename, frame.f_lineno
            guarded = _in_main_guard(file, line)
            return (file, line) if guarded is False else None
        frame = frame.f_back
    return None


def _in_main_guard(file: str, line: int) -> bool | None:
    """Whether `line` of `file` lies in a top-level `if __name__ == "__main__":` block (None: the file does not read
    or parse)."""
    import ast

    try:
        with open(file, "rb") as f:
            tree = ast.parse(f.read(4 << 20))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.lineno <= line <= (node.end_lineno or 0):
            return True
    return False


def _is_main_test(test) -> bool:
    import ast

    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, *test.comparators]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


def record_refusal(exc: BaseException, recorder, line_of) -> bool:
    """Whether `exc` is TRL's AsyncGRPOTrainer refusing what the script built in its own __init__ (see `refusal`):
    then it is recorded with that refusal, from the frame that raised it, as the trainer the script built (at the
    script line `line_of(frame, trainer)` finds: the hooks' own)."""
    found = refusal(exc)
    if found is None:
        return False
    frame, words, where = found
    trainer = frame.f_locals.get("self")
    built = construction_locals(frame, trainer)
    if trainer is None or built is None:
        return False
    record(recorder, trainer, built, frame, (words, where))
    recorder.where = line_of(frame, trainer)
    return True


@dataclass(frozen=True)
class Unpicklable:
    """One object AsyncRolloutWorker would pickle for its child process, and pickle's refusal."""

    what: str  # "reward_funcs[0]", "tools[1]", "environment_factory['chess']"
    name: str  # the object as a person names it: `<lambda>`, `make_env.<locals>.Env`
    error: str  # pickle's words, one line, without memory addresses
    where: tuple[str, int] | None  # where it is defined (file, line), when it is a function or class


def spawn_pickling(arguments: dict[str, Any]) -> list[Unpicklable]:
    """What of the trainer's reward functions, tools and environment factory pickle refuses, one entry per object."""
    out = []
    for key in PICKLED:
        for what, value in _items(key, arguments.get(key)):
            error = _pickle_error(value)
            if error is not None:
                out.append(Unpicklable(what, _name(value), error, _defined_at(value)))
    return out


def _items(key: str, value: Any) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [(f"{key}[{k!r}]", v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [(f"{key}[{i}]", v) for i, v in enumerate(value)]
    return [(key, value)]


class _Enough(Exception):
    """Raised by the sink past PICKLE_LIMIT bytes: the object pickles as far as it was taken."""


class _Sink(io.RawIOBase):
    def __init__(self) -> None:
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.size += len(data)
        if self.size > PICKLE_LIMIT:
            raise _Enough()
        return len(data)


def _pickle_error(value: Any) -> str | None:
    try:
        pickle.Pickler(_Sink(), protocol=pickle.DEFAULT_PROTOCOL).dump(value)
    except _Enough:
        return None
    except RecursionError:
        return "RecursionError: too deeply nested to pickle"
    except BaseException as exc:  # noqa: BLE001 - pickle.PicklingError, AttributeError, TypeError (what TRL's start()
        # turns into TypeError), and whatever a user object's __reduce__ raises, a KeyboardInterrupt or SystemExit
        # included (issue 59): the job stops there at train(), the capture records it
        words = re.sub(r" at 0x[0-9a-fA-F]+", "", " ".join(str(exc).split()))
        return f"{type(exc).__name__}: {words[:300] or 'no message'}"
    return None


def _name(value: Any) -> str:
    target = getattr(value, "func", value)  # functools.partial
    name = getattr(target, "__qualname__", None) or getattr(type(target), "__qualname__", type(target).__name__)
    return str(name)


def _defined_at(value: Any) -> tuple[str, int] | None:
    import inspect

    target = getattr(value, "func", value)
    if not (inspect.isfunction(target) or inspect.isclass(target) or inspect.ismethod(target)):
        target = type(target)
    try:
        file = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        return None
    return (file, line) if file else None
