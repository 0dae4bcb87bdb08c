"""Whether a path is in a Hugging Face hub cache, which --fix never rewrites.

Decided on the resolved path, so a local symlink to a snapshot counts: under a cache root (HF_HUB_CACHE,
HUGGINGFACE_HUB_CACHE, TRANSFORMERS_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub,
huggingface_hub's own setting), or anywhere laid out as a cache (`models--org--name/{snapshots,blobs}`), or a folder
whose files are symlinks into a `blobs/` folder. Light: no torch or transformers.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_PREFIXES = ("models--", "datasets--", "spaces--")


def cache_roots() -> list[Path]:
    """Every folder a hub cache may live in, by the environment and the defaults."""
    env = os.environ
    found = [env.get(v) for v in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE")]
    if env.get("HF_HOME"):
        found.append(os.path.join(env["HF_HOME"], "hub"))
    if env.get("XDG_CACHE_HOME"):
        found.append(os.path.join(env["XDG_CACHE_HOME"], "huggingface", "hub"))
    found.append("~/.cache/huggingface/hub")
    try:
        from huggingface_hub import constants

        found.append(constants.HF_HUB_CACHE)
    except Exception:  # not installed, or an old layout of the package
        pass
    return [Path(p).expanduser().resolve() for p in dict.fromkeys(f for f in found if f)]


def in_hub_cache(path: str | os.PathLike) -> bool:
    """True for a file or folder inside a hub cache (see the module docstring), existing or not."""
    given = Path(path).expanduser().absolute()
    real = given.resolve()
    if any(real == root or root in real.parents for root in cache_roots()):
        return True
    if _cache_layout(real) or _links_into_blobs(given):
        return True
    folder = given if given.is_dir() else given.parent
    return folder.is_dir() and _links_into_blobs_in(folder)


def _cache_layout(real: Path) -> bool:
    """`.../models--org--name/snapshots/<rev>/...` or `.../models--org--name/blobs/<hash>`, next to a blobs/ folder."""
    for part in (real, *real.parents):
        repo = part.parent
        if part.name in ("snapshots", "blobs") and repo.name.startswith(REPO_PREFIXES) and (repo / "blobs").is_dir():
            return True
    return False


def _links_into_blobs(path: Path) -> bool:
    try:
        return path.is_symlink() and path.resolve().parent.name == "blobs"
    except (RuntimeError, OSError):  # a symbolic link loop (RuntimeError before Python 3.13): no cache blob
        return False


def _links_into_blobs_in(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(e.is_symlink() and _links_into_blobs(Path(e.path)) for e in entries)
    except OSError:
        return False
