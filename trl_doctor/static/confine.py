"""Where `check --static` may read: the checked repository. On a pull request's checkout a symbolic link can lead
anywhere (`model/tokenizer.json -> ~/.ssh/id_rsa`), and what --static reads it may publish (a token's text in an
annotation or in SARIF). So a file whose path lies inside the repository but whose real path leaves it is never
read: an input error (exit 2, one line) names the file and where it leads.

The repository is the nearest folder above the config holding `.git`, else the nearest holding a project file
(`.trl-doctor.toml`, `pyproject.toml`), else the config's own folder. A path the config names outside it (an absolute
path, a hub id in the local cache) is read as named: it is written in the config, for its reviewers to see."""

from __future__ import annotations

import os
from pathlib import Path

from trl_doctor.errors import InputError

_MARKERS = (".git",)
_PROJECT = (".trl-doctor.toml", "pyproject.toml")


def repository_root(folder: Path) -> Path:
    """The checked repository holding `folder` (an absolute path, as named: its links not resolved)."""
    for markers in (_MARKERS, _PROJECT):
        for d in (folder, *folder.parents):
            if any(os.path.lexists(d / m) for m in markers):
                return d
    return folder


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Confinement:
    """The repository `root` (as named) and its real path; `check(path)` refuses a file that leaves it."""

    def __init__(self, root: Path):
        self.root = os.path.abspath(root)
        self.real = os.path.realpath(root)

    @classmethod
    def of(cls, config: str | os.PathLike) -> "Confinement":
        return cls(repository_root(Path(os.path.abspath(config)).parent))

    def check(self, path: Path | str) -> None:
        """InputError when `path`, named inside the repository, really lies outside it (a symbolic link on the way)."""
        named = os.path.abspath(path)
        if not (_inside(named, self.root) or _inside(named, self.real)):
            return  # named outside the repository by the config itself
        real = os.path.realpath(named)
        if not _inside(real, self.real):
            raise InputError(f"{path}: a symbolic link leads out of the checked repository ({self.root}) to {real}; "
                             "--static reads no file outside it")
