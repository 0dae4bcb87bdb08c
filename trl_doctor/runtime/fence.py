"""The fence around the user's code in the check's worker: one mechanism for every place that runs it (importing
a reward module, calling a reward function, rendering a chat template).

`user_code(what, limit)` tells the supervisor (`trl_doctor.supervisor.session`) on the worker's channel that user code
starts (`user-code`) and ends (`user-code-end`). The supervisor stops a worker whose innermost fence outlives its
limit, and when the worker dies inside a fence it fails the rule that was running with the cause, then hands
what failed (`Request.failed`: {key: cause}) to the next worker, where `check_failed(key)` keeps the facts layer
from running the same code again. Without a channel (in-process use: trl_doctor.front.api, tests) the fence sends
nothing and stops nothing.

In the worker the fence also restores file descriptors 1 and 2 when the user's code closed or replaced them
(what the code prints goes to the worker's log, and nothing may later write into a file that took their
numbers), and compares the check's input files before and after: `take_changes()` lists what changed; what user code
created in the check's folders (the working directory, the config's) is listed by `take_created()`. The doctor
cannot stop a process from deleting or rewriting files it may write (the worker runs as the user): it can only
notice and say so, and the rule that ran the code fails naming the file. Processes the user's code started and left
running (the worker is their subreaper, so a double-forked daemon counts) are listed by `take_left()` for the rule's
details; they are ended with the worker (trl_doctor.runtime.tree), not at the fence's end, as a reward module's pool may serve
the calls after its import.

This module is light: no torch, transformers or TRL.
"""

from __future__ import annotations

import faulthandler
import os
import stat
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from trl_doctor.runtime import tree as _tree

if TYPE_CHECKING:  # the messages are built only where a supervisor listens: `check --static` never imports them
    from trl_doctor.protocol import Message

DEFAULT_LIMIT = 60.0  # seconds (--user-code-timeout)
MAX_INPUT_FILES = 200  # files of the inputs' folders whose size and mtime are compared
MAX_FOLDER_ENTRIES = 10_000  # entries of a watched folder listed around user code (a folder past it is not watched)

_send: Callable[[Message], None] | None = None
_limit = DEFAULT_LIMIT
_failed: dict[str, str] = {}
_inputs: tuple[Path, ...] = ()
_saved_std: dict[int, int] = {}  # fd -> a duplicate of what it was when the worker started
_changes: list[str] = []
_left: list[str] = []
_folders: tuple[Path, ...] = ()
_created: list[str] = []


class UserCodeFailed(RuntimeError):
    """This user code ended (or overran) an earlier worker of the check: it is not run again."""


def configure(send: Callable[[Message], None] | None = None, limit: float = DEFAULT_LIMIT,
              failed: dict[str, str] | None = None, inputs: tuple[Path, ...] = (),
              folders: tuple[str | Path | None, ...] = ()) -> None:
    """Set up the worker's fence (`serve` calls it); `configure()` puts it back to in-process use. `folders`: where
    what user code creates is noticed (the working directory, the config's folder)."""
    global _send, _limit, _failed, _inputs, _folders
    _send, _limit, _failed, _inputs = send, float(limit), dict(failed or {}), tuple(inputs)
    _folders = tuple(dict.fromkeys(Path(f).resolve() for f in folders if f))
    _changes.clear()
    _left.clear()
    _created.clear()
    for fd in list(_saved_std):
        os.close(_saved_std.pop(fd))
    if send is not None:
        for fd in (1, 2):
            try:
                _saved_std[fd] = os.dup(fd)
            except OSError:
                pass


def supervised() -> bool:
    """Whether a supervisor stops user code that overruns (else the caller's own limit is the only one)."""
    return _send is not None


def check_failed(*keys: str) -> None:
    """Raise UserCodeFailed with the recorded cause when this user code already failed in an earlier worker."""
    for key in keys:
        if key in _failed:
            raise UserCodeFailed(f"{_failed[key]} (earlier in this check; not run again)")


def take_left() -> list[str]:
    """The processes user code started and left running since the last call ('rewards.py (...): 1234: sleep 300')."""
    out = list(_left)
    _left.clear()
    return out


def take_created() -> list[str]:
    """What user code created in the check's folders since the last call ('rewards.py (...): created
    /repo/completion_samples/'). Left in place: the doctor cannot tell it from what another process made meanwhile."""
    out = list(_created)
    _created.clear()
    return out


def take_changes() -> list[str]:
    """What user code changed among the check's input files since the last call (one line per fence)."""
    out = list(_changes)
    _changes.clear()
    return out


@contextmanager
def user_code(what: str, limit: float | None = None, key: str | None = None) -> Iterator[None]:
    """Run the block as user code `what` ("rewards.py (importing rewards.format_reward)"), stopped by the supervisor
    after `limit` seconds (default: --user-code-timeout); `key` names it for `check_failed` (default: `what`)."""
    key = key or what
    before = _snapshot()
    entries = _entries()
    children = _children()
    std = {fd: _identity(fd) for fd in _saved_std}
    dumps = _send is not None and not faulthandler.is_enabled()
    if dumps:  # a crash in the user's code leaves its Python stack in the worker's log (the rule's log_tail)
        faulthandler.enable(all_threads=False)
    if _send is not None:
        from trl_doctor.protocol import UserCode

        _emit(UserCode(what, key, _limit if limit is None else float(limit), _log_size(), time.monotonic()))
    try:
        yield
    finally:
        if dumps:
            faulthandler.disable()
        _restore_std(std)
        if _send is not None:
            from trl_doctor.protocol import UserCodeEnd

            _emit(UserCodeEnd(key, time.monotonic()))
        changed = _changed(before, _snapshot())
        if changed:
            _changes.append(f"{what} {changed}")
        _left.extend(f"{what}: {_tree.describe(pid)}" for pid in _children() - children)
        _created.extend(f"{what}: created {path}" for path in _new_entries(entries, _entries()))


def _children() -> set[int]:
    """The worker's live descendants (only where a supervisor runs it: in-process they are the caller's business)."""
    if _send is None:
        return set()
    return set(_tree.descendants(os.getpid()))


def _emit(message: Message) -> None:
    if _send is None:
        return
    try:
        _send(message)
    except (OSError, ValueError):
        pass  # the supervisor is gone: the worker is stopped anyway


# -- the standard streams ------------------------------------------------------------------------------------------

def _log_size() -> int | None:
    """How far the worker's log (its stdout) is written: where what the user's code prints starts."""
    if _send is None:
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _restore_std(before: dict[int, tuple[int, int] | None]) -> None:
    """Put fds 1 and 2 back when the user's code closed or replaced them, and Python's streams when it closed those."""
    for fd, identity in before.items():
        if _identity(fd) != identity:
            os.dup2(_saved_std[fd], fd)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None or getattr(stream, "closed", False):
            setattr(sys, name, open(fd, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False))


# -- the check's input files -----------------------------------------------------------------------------------------

def input_files(*paths: Path | None) -> tuple[Path, ...]:
    """The files to watch: each file given, and the files directly in each folder given (at most MAX_INPUT_FILES)."""
    out: list[Path] = []
    for path in paths:
        if path is None:
            continue
        path = Path(path)
        try:
            found = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        except OSError:
            continue
        out += [p for p in found if p not in out]
    return tuple(out[:MAX_INPUT_FILES])


def _snapshot() -> dict[Path, tuple[int, int] | None]:
    out: dict[Path, tuple[int, int] | None] = {}
    for path in _inputs:
        try:
            st = path.stat()
        except OSError:
            out[path] = None
        else:
            out[path] = (st.st_size, st.st_mtime_ns)
    return out


def _changed(before: dict, after: dict) -> str:
    """'removed a.jsonl; changed config.yaml', or '' when nothing changed."""
    removed = [str(p) for p, v in before.items() if v is not None and after.get(p) is None]
    changed = [str(p) for p, v in before.items() if v is not None and after.get(p) not in (None, v)]
    parts = ([f"removed {', '.join(removed)}"] if removed else []) + ([f"changed {', '.join(changed)}"] if changed else [])
    return "; ".join(parts)


# -- what user code creates in the check's folders -------------------------------------------------------------------

def watch(folders) -> dict[Path, frozenset[str]]:
    """The names directly in `folders` now, for `created_since` (code the fence does not run: the launch command's
    script in the capture)."""
    return _entries(tuple(dict.fromkeys(Path(f).resolve() for f in folders if f)))


def created_since(before: dict[Path, frozenset[str]]) -> list[str]:
    """What appeared in the folders `watch` listed ('/repo/logs/', a folder with a trailing '/')."""
    return _new_entries(before, _entries(tuple(before)))


def _entries(folders: tuple[Path, ...] | None = None) -> dict[Path, frozenset[str]]:
    """The names directly in each folder (default: the watched ones; a folder past MAX_FOLDER_ENTRIES, or
    unreadable, is left out)."""
    out: dict[Path, frozenset[str]] = {}
    for folder in _folders if folders is None else folders:
        try:
            with os.scandir(folder) as it:
                names = []
                for entry in it:
                    names.append(entry.name)
                    if len(names) > MAX_FOLDER_ENTRIES:
                        break
        except OSError:
            continue
        if len(names) <= MAX_FOLDER_ENTRIES:
            out[folder] = frozenset(names)
    return out


def _new_entries(before: dict[Path, frozenset[str]], after: dict[Path, frozenset[str]]) -> list[str]:
    """Paths that appeared in a watched folder (a folder with a trailing '/')."""
    out = []
    for folder, names in after.items():
        for name in sorted(names - before.get(folder, names)):
            path = folder / name
            out.append(f"{path}/" if path.is_dir() else str(path))
    return out

