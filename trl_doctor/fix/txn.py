"""Writing several files as one transaction: after a crash, a kill or a refused rename, each file holds its old or
its new content and the set is finished (or undone) by the next run; a backup is never empty or partial.

    lock     an exclusive flock on every touched folder (sorted, one per inode) for the whole transaction, so
             concurrent runs take turns; the caller plans its changes again under the lock
    recover  a journal left by a killed run is rolled forward when every journal it lists is there (the commit
             point was reached), else dropped; then any `.NAME.trl-doctor-<txid>.tmp` left is removed
    check    before any write: no target in a hub cache or a symlink, each file opens for append, each folder
             takes a new file; else InputError "<file>: cannot apply the fix: <reason>; nothing was changed"
    prepare  each backup (an exact copy with the original's mode, at the first free NAME.trl-doctor.bak[.N]) and
             each new content is written to a temporary file in the target's folder and fsynced
    commit   a journal listing every temp -> final rename is written (temp, fsync, rename) into each touched folder
    rename   backups into place, then the new files over the targets; folders fsynced; the journals removed.
             A rename that fails moves the replaced targets back from their backups and raises InputError.

Test-only fault hook: with TRL_DOCTOR_FIX_KILL_AT=<n> the process sends itself SIGKILL just before its n-th step.
Steps, counted from 1 across the process: each temporary file written (backups first, then new contents), each
journal written, each rename, each journal removed; a recovery's renames and removals count too.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import signal
from pathlib import Path
from typing import Callable, Sequence

from trl_doctor.errors import InputError
from trl_doctor.context.hubcache import in_hub_cache

BACKUP_SUFFIX = ".trl-doctor.bak"
KILL_ENV = "TRL_DOCTOR_FIX_KILL_AT"
TEMP = re.compile(r"^\..+\.trl-doctor-[0-9a-f]{12}\.tmp$")
JOURNAL = ".trl-doctor-{}.journal"
_steps = 0


def _step() -> None:
    global _steps
    _steps += 1
    if os.environ.get(KILL_ENV) == str(_steps):
        os.kill(os.getpid(), signal.SIGKILL)


def backup_path(path: Path) -> Path:
    """The first free backup name: file.trl-doctor.bak, then .bak.1, .bak.2, ... (earlier backups are kept)."""
    candidate = path.with_name(path.name + BACKUP_SUFFIX)
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}{BACKUP_SUFFIX}.{n}")
        n += 1
    return candidate


def transact(folders, replan: Callable[[], Sequence]) -> list[tuple[Path, Path | None]]:
    """Lock `folders`, recover what a killed run left, then write the changes `replan()` returns (objects with
    .path, .old and .new, planned from the files as they are now) as one transaction. Returns (file, backup) for
    the files a recovery finished, then for the files written."""
    wanted = {Path(f).resolve() for f in folders}
    while True:
        fds = _lock(wanted)
        try:
            journals = _journals(wanted)
            more = {Path(j).parent.resolve() for _, data in journals for j in data["journals"]}
            more = {f for f in more if f.is_dir()} - wanted
            if not more:  # every folder a left journal names is locked too
                finished = _recover(wanted, journals)
                return finished + _write(list(replan()))
        finally:
            for fd in fds:
                os.close(fd)  # releases its flock
        wanted |= more


def _lock(folders) -> list[int]:
    fds: list[int] = []
    seen: set[tuple[int, int]] = set()
    for folder in sorted(folders):
        try:
            fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            raise InputError(f"{folder}: cannot apply the fix: cannot lock the folder ({exc.strerror}); "
                             "nothing was changed") from None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in seen:  # a second flock on the same folder would wait for ourselves
            os.close(fd)
            continue
        seen.add((st.st_dev, st.st_ino))
        fcntl.flock(fd, fcntl.LOCK_EX)
        fds.append(fd)
    return fds


def _journals(folders) -> list[tuple[Path, dict]]:
    found = []
    for folder in sorted(folders):
        for path in folder.glob(JOURNAL.format("*")):
            try:
                found.append((path, json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError):  # written by rename, never partial: not ours
                continue
    return found


def _recover(folders, journals) -> list[tuple[Path, Path | None]]:
    """Finish each committed transaction a killed run left, drop the others, then remove stray temporary files;
    returns (file, backup) for the files of the transactions it had to finish."""
    finished = []
    try:
        for _, data in journals:
            listed = [Path(j) for j in data["journals"]]
            left = [(tmp, final) for tmp, final in data["renames"] if os.path.lexists(tmp)]
            if left and all(j.exists() for j in listed):  # the commit point was reached: roll forward
                for tmp, final in left:
                    _step()
                    os.replace(tmp, final)
                _fsync_dirs({Path(f).parent for _, f in left})
                finished += [(Path(f), Path(b) if b else None) for f, b in data["files"]]
            for j in listed:
                if j.exists():
                    _step()
                    j.unlink()
        for folder in folders:
            for entry in os.scandir(folder):
                if TEMP.match(entry.name):
                    os.unlink(entry.path)
    except OSError as exc:
        raise InputError(f"{exc.filename}: cannot finish the fix an interrupted run left: {exc.strerror or exc}") from None
    return finished


def check(changes) -> None:
    """Refuse, before anything is written, a change no write can make (see the module docstring)."""
    for c in changes:
        reason = _refusal(Path(c.path))
        if reason:
            raise InputError(f"{c.path}: cannot apply the fix: {reason}; nothing was changed")


def _refusal(path: Path) -> str | None:
    if in_hub_cache(path):
        return "it is in a Hugging Face hub cache, which --fix never rewrites"
    if path.is_symlink():
        return f"it is a symbolic link (to {os.readlink(path)}), which --fix does not replace"
    try:
        if path.exists():
            with open(path, "ab"):  # refused for a read-only or immutable file, even to root
                pass
    except OSError as exc:
        return f"the file cannot be opened for writing ({exc.strerror or exc})"
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    probe = folder / f".probe.trl-doctor-{secrets.token_hex(6)}.tmp"
    try:
        with open(probe, "xb"):
            pass
        _remove(probe)
    except OSError as exc:
        return f"its folder {folder} does not accept a new file ({exc.strerror or exc})"
    return None


def _write(changes) -> list[tuple[Path, Path | None]]:
    if not changes:
        return []
    check(changes)
    for c in changes:
        c.path.parent.mkdir(parents=True, exist_ok=True)
    txid = secrets.token_hex(6)
    backups = {c.path: backup_path(c.path) for c in changes if c.old is not None}
    renames, journals = _prepare(changes, backups, txid)
    _commit(changes, backups, renames, journals)
    return [(c.path, backups.get(c.path)) for c in changes]


def _prepare(changes, backups, txid) -> tuple[list[tuple[str, str]], list[Path]]:
    """The temporary files and the journals: every write before the commit point; undone on any error."""
    items = [(backups[c.path], c.old, c.path) for c in changes if c.old is not None]
    items += [(c.path, c.new, c.path if c.old is not None else None) for c in changes]
    made: list[Path] = []
    renames = []
    current = changes[0].path
    try:
        for final, data, mode_from in items:
            current, tmp = mode_from or final, final.with_name(f".{final.name}.trl-doctor-{txid}.tmp")
            _step()
            made.append(tmp)
            _write_file(tmp, data, mode_from)
            renames.append((str(tmp), str(final)))
        folders = sorted({Path(f).parent for _, f in renames})
        _fsync_dirs(folders)
        journals = [f / JOURNAL.format(txid) for f in folders]
        files = [(str(c.path), str(backups[c.path]) if c.path in backups else None) for c in changes]
        text = json.dumps({"txid": txid, "journals": [str(j) for j in journals], "renames": renames, "files": files})
        for j in journals:
            current, tmp = j.parent, j.with_name(f".journal.trl-doctor-{txid}.tmp")
            _step()
            made += [tmp, j]
            _write_file(tmp, text.encode("utf-8"), None)
            os.replace(tmp, j)
        _fsync_dirs(folders)
        return renames, journals
    except OSError as exc:
        for p in made:
            _remove(p)
        raise InputError(f"{current}: cannot apply the fix: {exc.strerror or exc}; nothing was changed") from None


def _commit(changes, backups, renames, journals) -> None:
    done: set[str] = set()
    try:
        for tmp, final in renames:
            _step()
            os.replace(tmp, final)
            done.add(final)
    except OSError as exc:
        _roll_back(changes, backups, renames, done, journals)
        raise InputError(f"{final}: cannot apply the fix: {exc.strerror or exc}; nothing was changed "
                         "(the files already replaced were restored)") from None
    folders = sorted({Path(f).parent for _, f in renames})
    _fsync_dirs(folders)
    for j in journals:
        _step()
        j.unlink()
    _fsync_dirs(folders)


def _roll_back(changes, backups, renames, done, journals) -> None:
    """Undo the renames made so far: each replaced target gets its backup back; new files and backups go."""
    for j in journals:  # first: a kill from here on must not roll the transaction forward
        _remove(j)
    for c in changes:
        backup = backups.get(c.path)
        if str(c.path) in done and backup:
            os.replace(backup, c.path)
        elif str(c.path) in done:
            _remove(c.path)
        elif backup and str(backup) in done:
            _remove(backup)
    for tmp, _ in renames:
        _remove(Path(tmp))
    _fsync_dirs({Path(f).parent for _, f in renames})


def _write_file(path: Path, data: bytes, mode_from: Path | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if mode_from is not None:
        shutil.copymode(mode_from, path)


def _fsync_dirs(folders) -> None:
    for folder in folders:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
