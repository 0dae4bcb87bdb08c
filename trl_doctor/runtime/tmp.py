"""The check's temporary files have one owner: one folder per check, `$TMPDIR/trl-doctor-XXXXXXXX`, made by the
process that prints the report and removed by it (in a `finally`, and on SIGINT/SIGTERM/SIGHUP, see
trl_doctor.supervisor.interrupt). Everything else a check writes lives under it: the workers' logs, the worker's own folder
(the twin checkpoint, the dataset cache, the trainer's output: `Context.workdir`), and whatever the user's code puts
in its TMPDIR, which the worker points here.

The folder holds OWNER, {"pid", "start", "tag"}: a check killed by SIGKILL cannot clean up, so the next check's
`sweep` removes every `trl-doctor-*` folder whose owner process is gone (the pid with another start time is another
process), after ending the processes still tagged with its tag (trl_doctor.runtime.tree). A folder without OWNER (an older
release's) is removed once it is a day old. This module is light: no torch, transformers or TRL.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from trl_doctor.runtime import tree as _tree

PREFIX = "trl-doctor-"
OWNER = "owner.json"
DIR_ENV = "TRL_DOCTOR_CHECK_DIR"  # the check's folder, in the worker's environment
UNOWNED_AGE_S = 24 * 3600


@dataclass(frozen=True)
class CheckFolder:
    path: Path
    tag: str

    @property
    def tmp(self) -> Path:
        """The TMPDIR the worker and the user's code get."""
        return self.path / "tmp"


def new_folder(parent: Path | None = None, tag: str | None = None) -> CheckFolder:
    """A fresh `trl-doctor-*` folder with its OWNER written (this process, its start time, the tag)."""
    tag = tag or _tree.new_tag()
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=str(parent) if parent else None))
    (path / OWNER).write_text(json.dumps({"pid": os.getpid(), "start": _tree.start_time(os.getpid()), "tag": tag}))
    (path / "tmp").mkdir()
    return CheckFolder(path, tag)


def remove(path: Path) -> None:
    """Remove the folder and everything in it: a folder inside without write or search permission (a held folder's
    layer keeps the modes the user's code gave, 0o555; the overlay's own work folder is 0o000) is opened up first."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError:
        _opened_up(path)
        shutil.rmtree(path, ignore_errors=True)


def _opened_up(path: Path) -> None:
    """Every folder under `path` (itself included) given its owner's rwx, top-down, so the walk can enter it."""
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    for root, dirs, _ in os.walk(path):  # top-down: a folder's mode is set before the walk lists it
        for name in dirs:
            folder = os.path.join(root, name)
            if not os.path.islink(folder):
                try:
                    os.chmod(folder, 0o700)
                except OSError:
                    pass


@contextmanager
def check_folder() -> Iterator[CheckFolder]:
    """The check's folder, after the stale ones of killed checks are swept; removed when the block ends."""
    sweep()
    folder = new_folder()
    try:
        yield folder
    finally:
        remove(folder.path)


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the `trl-doctor-*` folders of checks whose process is gone (their tagged processes ended first); the
    folders removed."""
    root = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return removed
    for path in candidates:
        try:
            if path.is_symlink() or not path.is_dir():
                continue
            owner = _owner(path)
        except OSError:
            continue
        if owner is None:
            if not _old(path):
                continue
        elif _owner_alive(owner):
            continue
        elif owner.get("tag"):
            _tree.end(None, str(owner["tag"]))
        remove(path)
        removed.append(path)
    return removed


def _owner(path: Path) -> dict | None:
    try:
        data = json.loads((path / OWNER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: a folder being written this instant is not stale
    return data if isinstance(data, dict) else {}


def _owner_alive(owner: dict) -> bool:
    pid, start = owner.get("pid"), owner.get("start")
    if not isinstance(pid, int):
        return True  # cannot tell: keep it
    if not _tree.alive(pid) and _exists_elsewhere(pid):
        return True
    return _tree.alive(pid) and (start is None or _tree.start_time(pid) == start)


def _exists_elsewhere(pid: int) -> bool:
    """Without /proc (not Linux), whether a process `pid` exists at all."""
    if Path("/proc/self").exists():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _old(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime > UNOWNED_AGE_S
    except OSError:
        return False
