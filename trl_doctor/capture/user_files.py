"""Which files are the user's while a launch command runs: the exit-2 line and the trainer's construction point at the
innermost frame of the user's own code, never at a library's.

A library is whatever Python, site-packages (any on sys.path) or the doctor hold, a package on PYTHONPATH that shadows
an installed one (a patched transformers copied into `vendor/`), and a folder an installed distribution is imported
from outside site-packages (a fork vendored in the repository and installed editable: a `.pth` path or setuptools'
editable finder), unless it holds the launched script or module. While a launch runs, the user's files are those in
its folder, the script's, and the git work tree holding them.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path
from typing import Any, cast

def _library_roots() -> tuple[str, ...]:
    """Where installed packages live: this interpreter's stdlib and site-packages, the user's site-packages, and any
    site-packages / dist-packages folder on sys.path (a .pth or PYTHONPATH can add one): TRL installed there is
    a library, not the user's code."""
    import site

    paths = [sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")]
    paths += list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()]
    paths += [p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")]
    return tuple({os.path.realpath(p) + os.sep for p in paths if p})


_LIBRARY_ROOTS = _library_roots()
DOCTOR_ROOT = os.path.realpath(os.path.dirname(os.path.dirname(__file__)))


# the folders the user's own files live in while a launch command runs (set_user_roots): its folder, the script's, and
# the repository holding them; empty: any file outside the libraries counts
_USER_ROOTS: tuple[str, ...] = ()
# packages on PYTHONPATH that shadow an installed one (a patched transformers copied into `vendor/`): libraries even
# inside the user's repository
_SHADOWS: tuple[str, ...] = ()
_COMPILED = (".pyx", ".pxi", ".pxd", ".so", ".pyd")  # Cython frames name their source relative to the package
_MAX_PYTHONPATH_NAMES = 1000  # names of one PYTHONPATH folder compared with the installed packages


def set_user_roots(folders) -> tuple:
    """Make `folders` (and the git work tree holding each) the user's; returns what was in force before."""
    global _USER_ROOTS, _SHADOWS
    before = (_USER_ROOTS, _SHADOWS)
    real_folders = [os.path.realpath(f) for f in folders if f]
    roots = set(real_folders)
    for real in real_folders:
        top = next((p for p in (real, *map(str, Path(real).parents)) if os.path.exists(os.path.join(p, ".git"))), None)
        if top is not None and top != os.sep:
            roots.add(top)
    _USER_ROOTS = tuple(r.rstrip(os.sep) + os.sep for r in roots)
    _SHADOWS = _shadowing_packages(real_folders) + _editable_roots(real_folders)
    return before


def set_user_roots_to(before: tuple) -> None:
    """Put back what `set_user_roots` returned."""
    global _USER_ROOTS, _SHADOWS
    _USER_ROOTS, _SHADOWS = before


def _shadowing_packages(folders: list[str]) -> tuple[str, ...]:
    """Package folders on PYTHONPATH named as a package installed in site-packages: a copy of a library, not the
    user's code. One that holds a folder of the launch command (the script's own package) stays the user's."""
    out = []
    for entry in filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        try:
            names = sorted(os.listdir(entry))[:_MAX_PYTHONPATH_NAMES]
        except OSError:
            continue
        for name in names:
            package = os.path.realpath(os.path.join(entry, name))
            if not os.path.isfile(os.path.join(package, "__init__.py")):
                continue
            installed = any(os.path.isfile(os.path.join(root, name, "__init__.py")) for root in _LIBRARY_ROOTS)
            if installed and not any((f + os.sep).startswith(package + os.sep) for f in folders):
                out.append(package + os.sep)
    return tuple(out)


def _editable_roots(folders: list[str]) -> tuple[str, ...]:
    """Folders an installed distribution is imported from outside site-packages: a path that a .pth file of a
    site-packages folder adds (`pip install -e` of a src layout), or a package that setuptools' editable finder maps.
    A fork of transformers vendored in the user's repository and installed so is a library, not the user's code; one
    that holds a folder of the launch command (the user's own project, installed editable) stays the user's."""
    found = []
    for site_dir in _LIBRARY_ROOTS:
        try:
            names = [n for n in os.listdir(site_dir) if n.endswith(".pth") or _EDITABLE_FINDER.fullmatch(n)]
        except OSError:
            continue
        for name in names[:_MAX_PYTHONPATH_NAMES]:
            path = os.path.join(site_dir, name)
            found += _finder_mapping(path) if name.endswith(".py") else _pth_paths(site_dir, path)
    out = []
    for root in map(os.path.realpath, found):
        if (os.path.isdir(root) and not (root + os.sep).startswith(_LIBRARY_ROOTS)
                and not any((f + os.sep).startswith(root + os.sep) for f in folders)):
            out.append(root + os.sep)
    return tuple(out)


_EDITABLE_FINDER = re.compile(r"__editable___.+_finder\.py")


def _pth_paths(site_dir: str, path: str) -> list[str]:
    """The folders a .pth file adds to sys.path (its lines that are not comments or `import` statements)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [line.strip() for line in handle.read(65536).splitlines()]
    except OSError:
        return []
    return [os.path.join(site_dir, line) for line in lines if line and not line.startswith(("#", "import ", "import\t"))]


def _finder_mapping(path: str) -> list[str]:
    """The package folders of setuptools' editable finder (`MAPPING = {'pkg': '/repo/src/pkg'}`), read as literals."""
    import ast

    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            tree = ast.parse(handle.read(1 << 20))
    except (OSError, SyntaxError, ValueError):
        return []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and node.targets else getattr(node, "target", None)
        node_ = cast(Any, node)  # read like `target` above: an Assign's, AnnAssign's or AugAssign's value
        if isinstance(target, ast.Name) and target.id == "MAPPING" and node_.value is not None:
            try:
                mapping = ast.literal_eval(node_.value)
            except ValueError:
                return []
            return [str(v) for v in mapping.values()] if isinstance(mapping, dict) else []
    return []


def is_user_file(filename: str) -> bool:
    """A file of the user's (their script, their modules), not Python's, a package's, or the doctor's: a real file,
    outside the libraries' folders, and, while a launch command runs, inside its folder, the script's or their
    repository (a package on PYTHONPATH elsewhere, or a copy of an installed one anywhere on it, is a library too)."""
    if not filename or filename.startswith("<") or not os.path.isabs(filename) or filename.endswith(_COMPILED):
        return False
    real = os.path.realpath(filename)
    if real.startswith(_LIBRARY_ROOTS) or real.startswith(DOCTOR_ROOT + os.sep) or real.startswith(_SHADOWS):
        return False
    return not _USER_ROOTS or real.startswith(_USER_ROOTS)


def user_frame(frame) -> tuple[str, int] | None:
    """(file, line) of the innermost user frame at or above `frame`."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None
