"""The user's folders held: what the check's processes write there lands in a layer of the check's own.

A launch's framework writes before it builds its trainer (ms-swift's `output/v0-*/args.json`, a logging set-up's
files), a reward writes its samples, a script saves a config: in the check these would be files left in the user's
folders. So the worker, once in a user namespace of its own (trl_doctor.runtime.netns), takes a mount namespace too
and mounts an overlay over each folder it holds (the working directory, the config's folder): reads see the folder
as it is; every write, new file, change or removal lands in the upper layer, inside the check's own temporary folder,
which goes when the check ends. Every process of the check sees the same (the namespace is inherited); no other
process of the machine sees anything.

A folder is not held, and the report's notes say "left in place" as before, where: the kernel refuses an overlay in
a user namespace (before Linux 5.11), the folder holds mounts of its own (an overlay would hide them), it holds the
check's own folder, its file system is read-only (an overlay would make it look writable to the rules that ask,
save-outputs among them; nothing can be written there anyway), or its path holds `,` `:` or `\\` (the overlay's
option separators).

The free space of a held folder is the one measured before the mount (`disk_usage`): the overlay itself reports its
upper layer's file system.

Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from pathlib import Path

CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000

_state: dict = {"held": {}, "usage": {}}  # {folder: upper layer}, {folder: shutil.disk_usage before the mount}


def libc():
    """The C library, its errno kept (ctypes.get_errno): unshare, mount, prctl."""
    return ctypes.CDLL(None, use_errno=True)


def held() -> dict[str, str]:
    """{folder held: its upper layer} in this process."""
    return dict(_state["held"])


def holder(path) -> str | None:
    """The held folder `path` lies in (itself included), or None."""
    p = os.path.abspath(os.fspath(path))
    return next((f for f in _state["held"] if p == f or p.startswith(f.rstrip("/") + "/")), None)


def written() -> list[str]:
    """What the check's processes have written so far into each held folder, as paths there (its upper layer's
    entries, a folder with a trailing '/'; a removal's whiteout included, as the path it removed). The doctor's own
    files (`seed_site`'s) are not the processes' and are left out, with a folder that holds nothing else."""
    own = set(_state.get("own", ()))  # real paths, as the held folders are
    out = []
    for folder, upper in _state["held"].items():
        try:
            with os.scandir(upper) as entries:
                out += [os.path.join(folder, e.name) + ("/" if e.is_dir(follow_symlinks=False) else "")
                        for e in entries if not _only_own(e.path, os.path.join(folder, e.name), own)]
        except OSError:
            continue
    return sorted(out)


def _only_own(upper_path: str, held_path: str, own: set[str]) -> bool:
    """Whether an upper layer's entry holds only the doctor's own files (the copied-up folders above one included)."""
    if not own:
        return False
    if not os.path.isdir(upper_path) or os.path.islink(upper_path):
        return held_path in own
    found = False
    for root, _, files in os.walk(upper_path):
        rel = os.path.relpath(root, upper_path)
        for name in files:
            if os.path.normpath(os.path.join(held_path, rel, name)) not in own:
                return False
            found = True
    return found  # an empty folder is the launch's own


SCOUT_PTH = "zz-trl-doctor-scout.pth"


def seed_site(text: str, layer: Path) -> list[str]:
    """A `.pth` file of `text` in each site-packages folder of this Python, in the check's own layer only: where the
    folder is held already (a virtualenv inside the working directory) it is written there, else an overlay of its
    own is mounted over it first; where neither can be, nothing is written (the folder itself is never changed).
    Every Python process of the check started from this installation reads it at start-up, even with -I or -E
    (which ignore PYTHONPATH). The paths written."""
    import site

    out: list[str] = []
    try:
        folders = [os.path.realpath(p) for p in site.getsitepackages() if os.path.isdir(p)]
    except AttributeError:  # a Python whose site module lacks it (an embedded one)
        return out
    for index, folder in enumerate(dict.fromkeys(folders)):
        if holder(folder) is None:
            mount([folder], layer / f"site-{index}")
        if holder(folder) is None:  # not held: never written
            continue
        path = os.path.join(folder, SCOUT_PTH)
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            continue
        _state.setdefault("own", set()).add(path)
        out.append(path)
    return out


def disk_usage(path):
    """shutil.disk_usage of `path`, as its folder's file system has it: for a held folder, what was measured before
    the overlay (whose own figure is the check's temporary folder's)."""
    folder = holder(path)
    if folder is not None and folder in _state["usage"]:
        return _state["usage"][folder]
    return shutil.disk_usage(path)


_SYSTEM = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys",
           "/usr", "/var/lib", "/var/run", "/snap")
MAX_NAMED = 16  # folders a command line may add to the held ones


RECIPE_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
RECIPE_BYTES = 1 << 20  # what is read of a recipe file for the paths it names
# a path a recipe names: absolute or in the home folder, not inside a URL (`http://host/x`) or a longer word
_RECIPE_PATH = re.compile(r"""(?<![\w.:/~-])(~?/[^\s"'`,;#\]})]+)""")


def named_folders(argv, cwd: str) -> list[str]:
    """The folders a launch's command line names (`--output_dir /data/run1`, `--config recipes/grpo.yaml`,
    `output_dir=out`), and those its recipe files name (`output_dir: /data/runs/grpo` in the YAML, JSON or TOML a
    word names): for each path, the nearest folder of it that exists, so what the job writes there, made or not yet,
    is held too. Left out: the root, the system's folders, the Python installation (a framework's
    `<site-packages>/swift/cli/rlhf.py`) and the doctor's own; at most MAX_NAMED."""
    own = _own_folders()
    out: list[str] = []
    recipes: list[str] = []
    for word in argv or ():
        word = str(word)
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word.split("=", 1)[-1]
        if "/" not in value and not value.endswith(RECIPE_SUFFIXES):
            continue
        _add(_nearest_folder(value, cwd, own), out)
        path = os.path.join(cwd, os.path.expanduser(value))
        if value.endswith(RECIPE_SUFFIXES) and os.path.isfile(path):
            recipes.append(path)
    for recipe in recipes:  # relative paths inside resolve from the working directory, held already
        for value in recipe_paths(recipe):
            _add(_nearest_folder(value, cwd, own), out)
    return out[:MAX_NAMED]


def recipe_paths(path) -> list[str]:
    """The absolute (or home) paths a recipe file's text names, in order, each once ([] where it cannot be read)."""
    try:
        with open(path, "rb") as f:
            text = f.read(RECIPE_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    return list(dict.fromkeys(m.group(1).rstrip(".") for m in _RECIPE_PATH.finditer(text)))


def _own_folders() -> set[str]:
    import sys
    import sysconfig

    return {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                          os.path.dirname(__file__) + "/..",
                                          *(sysconfig.get_paths().get(k, "") for k in ("purelib", "platlib"))) if p}


def _nearest_folder(value: str, cwd: str, own: set[str]) -> str | None:
    """The nearest existing folder of the path `value` (relative to `cwd`) as a real path, or None where it names
    none worth holding (not a path, a URL, the root, a system or Python installation folder)."""
    if "/" not in value or "\0" in value or len(value) > 4096 or "://" in value:
        return None
    path = os.path.normpath(os.path.join(cwd, os.path.expanduser(value)))
    while path != "/" and not os.path.isdir(path):
        path = os.path.dirname(path)
    real = os.path.realpath(path)
    if real == "/" or any(real == s or real.startswith(s + "/") for s in _SYSTEM):
        return None
    if any(real == o or real.startswith(o.rstrip("/") + "/") for o in own):
        return None
    return real


def _add(folder: str | None, out: list[str]) -> None:
    if folder is not None and folder not in out:
        out.append(folder)


def outermost(folders) -> list[str]:
    """The folders as real paths, each once, a folder inside another left out (the outer overlay holds it)."""
    real = sorted({os.path.realpath(os.fspath(f)) for f in folders if f}, key=len)
    out: list[str] = []
    for f in real:
        if not any(f == o or f.startswith(o.rstrip("/") + "/") for o in out):
            out.append(f)
    return out


def own_mount_namespace() -> None:
    """A mount namespace of this process's own, its mounts private (this process must own a user namespace); once."""
    if _state.get("namespace"):
        return
    c = libc()
    if c.unshare(CLONE_NEWNS) != 0 or c.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    _state["namespace"] = True


def hosts_file_with(names: dict[str, str], folder: Path) -> None:
    """/etc/hosts, as this process and its children see it, with `names` answered by their addresses (the allowed
    hosts carried into the network namespace, looked up outside it): a copy in `folder` bind-mounted over it, so the
    system resolver of every process answers them without DNS. Left as it is where no mount can be made."""
    try:
        own_mount_namespace()
        target = os.path.realpath("/etc/hosts")
        try:
            text = Path(target).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        lines = "".join(f"{address} {name}\n" for name, address in sorted(names.items()))
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / "hosts"
        copy.write_text(text.rstrip("\n") + "\n# trl-doctor: the allowed hosts, carried into the check's network "
                        "namespace\n" + lines)
        libc().mount(os.fsencode(copy), os.fsencode(target), None, _MS_BIND, None)
    except OSError:
        pass


def mount(folders, layer: Path) -> dict[str, str]:
    """In a mount namespace of this process's own (it must already own a user namespace), an overlay over each
    folder, its upper layer under `layer`; {folder: why not} for those not held. The working directory is entered
    again, so it is the held view."""
    c = libc()
    try:
        own_mount_namespace()
    except OSError as exc:
        return {f: f"no mount namespace ({exc.strerror})" for f in outermost(folders)}
    cwd = os.getcwd()
    mounts = _mount_points()
    layer = Path(os.path.realpath(layer))
    refused: dict[str, str] = {}
    for index, folder in enumerate(outermost(folders)):
        why = _why_not(folder, layer, mounts)
        if why:
            refused[folder] = why
            continue
        upper, work = layer / f"{index}" / "upper", layer / f"{index}" / "work"
        upper.mkdir(parents=True)
        work.mkdir(parents=True)
        usage = shutil.disk_usage(folder)
        options = f"lowerdir={folder},upperdir={upper},workdir={work}"
        err = 0
        for extra in ("", ",userxattr"):
            if c.mount(b"overlay", os.fsencode(folder), b"overlay", 0, (options + extra).encode()) == 0:
                err = 0
                break
            err = ctypes.get_errno()
        if err:
            refused[folder] = f"the kernel refused an overlay here ({os.strerror(err)})"
            continue
        _state["held"][folder] = str(upper)
        _state["usage"][folder] = usage
    try:
        os.chdir(cwd)
    except OSError:
        pass
    return refused


def _why_not(folder: str, layer: Path, mounts: list[str]) -> str:
    if not os.path.isdir(folder):
        return "not a folder"
    if any(c in folder for c in ",:\\") or any(c in str(layer) for c in ",:\\"):
        return "its path holds `,` `:` or `\\`"
    inside = folder.rstrip("/") + "/"
    if str(layer).startswith(inside):
        return "it holds the check's own temporary folder"
    if any(m.startswith(inside) for m in mounts):
        return "it holds mounts of its own, which an overlay would hide"
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:  # an overlay would make it look writable to the rules
            return "its file system is read-only: nothing is written there anyway"
    except OSError:
        return "its file system cannot be asked"
    return ""


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace (/proc/self/mountinfo's fifth field, octal escapes decoded)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return out
