"""What TRL and the libraries around it say while the step's trainer is built and stepped: every `warnings.warn` and
every log record at WARNING or above that trl, transformers, accelerate or peft emit, with the library's own words
and the file and line that said it (issue 46: TRL warns where it once refused; the report hears it).

A warning's place is the frame that called `warnings.warn` (TRL's `stacklevel=2` points the shown place at its
caller, here the doctor's own build); a warning whose caller is no library's (a reward function's, torch's) is not
heard, nor torch's C++ warnings that a library's tensor operation set off (torch's words, about torch's future).
Repeats are heard once; at most MAX_HEARD, each cut at MAX_WORDS characters."""

from __future__ import annotations

import logging
import re
import sys
import warnings
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator

LIBRARIES = ("trl", "transformers", "accelerate", "peft")
MAX_HEARD = 40
MAX_WORDS = 600
_TORCH_INTERNAL = "(Triggered internally at "  # how torch's C++ warnings end (c10's TORCH_WARN)
_RANK = re.compile(r"^\[RANK \d+\] ")  # TRL's logger prefixes each record with its process's rank


def _library(module: str | None) -> str | None:
    top = (module or "").split(".", 1)[0]
    return top if top in LIBRARIES else None


def _place(path: str, library: str) -> str:
    """`trl/trainer/grpo_trainer.py` for a file of the installed package (its path from the package's folder)."""
    parts = path.replace("\\", "/").split("/")
    if library in parts:
        return "/".join(parts[len(parts) - parts[::-1].index(library) - 1:])
    return path


def place(path: str) -> str:
    """`trl/trainer/grpo_trainer.py` for a file of one of the libraries, else the path as it is."""
    parts = path.replace("\\", "/").split("/")
    found = [name for name in LIBRARIES if name in parts]
    return _place(path, found[0]) if found else path


class _Heard:
    def __init__(self) -> None:
        self.items: list[dict] = []
        self._seen: set[tuple] = set()

    def add(self, library: str, kind: str, category: str, message: str, path: str, line: int) -> None:
        words = _RANK.sub("", " ".join(str(message).split()))[:MAX_WORDS]
        key = (library, words, path, line)
        if key in self._seen or len(self.items) >= MAX_HEARD:
            return
        self._seen.add(key)
        self.items.append({"library": library, "kind": kind, "category": category, "message": words,
                           "where": f"{_place(path, library)}:{line}"})


class _Handler(logging.Handler):
    def __init__(self, heard: _Heard) -> None:
        super().__init__(logging.WARNING)
        self.heard = heard

    def emit(self, record: logging.LogRecord) -> None:
        try:
            library = _library(record.name) or "?"
            self.heard.add(library, "log", record.levelname, record.getMessage(), record.pathname, record.lineno)
        except Exception:  # a record whose message cannot be formatted: not the doctor's to fail on
            pass


@contextmanager
def hearing() -> Iterator[list[dict]]:
    """Collect what the libraries say inside the block into the yielded list (filled as they speak). Warnings keep
    the filters the job has (a DeprecationWarning stays as quiet as in the job); UserWarning and FutureWarning, which
    a job shows once per place, are heard here even where an earlier import already showed them."""
    heard = _Heard()
    handler = _Handler(heard)
    loggers = [logging.getLogger(name) for name in LIBRARIES]
    with warnings.catch_warnings():
        warnings.simplefilter("always", UserWarning)
        warnings.simplefilter("always", FutureWarning)
        shown = warnings.showwarning

        def hear(message, category, filename, lineno, file=None, line=None):
            frame = sys._getframe(1)  # warnings' own frames, then the code that called warnings.warn
            while frame is not None and frame.f_globals.get("__name__") == "warnings":
                frame = frame.f_back
            library = _library(frame.f_globals.get("__name__")) if frame is not None else None
            if _TORCH_INTERNAL in str(message):  # torch's C++ TORCH_WARN, met inside a library's call: torch's words
                library = None
            if library is not None:  # a reward function's or torch's own warning is not the libraries'
                heard.add(library, "warning", category.__name__, str(message), frame.f_code.co_filename,
                          frame.f_lineno)
            return shown(message, category, filename, lineno, file, line)

        warnings.showwarning = hear
        for logger in loggers:
            logger.addHandler(handler)
        try:
            yield heard.items
        finally:
            for logger in loggers:
                logger.removeHandler(handler)


def known_warning(library: str, message: str) -> bool:
    """Whether data/known_warnings.yaml lists this as noise (said of the doctor's own step, or of a knowing choice)."""
    return any(library == lib and pattern.search(message) for lib, pattern in _noise())


@lru_cache(maxsize=1)
def _noise() -> tuple:
    """data/known_warnings.yaml's entries as (library, compiled words), read once."""
    from pathlib import Path

    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "data" / "known_warnings.yaml").read_text())
    return tuple((entry["library"], re.compile(entry["words"])) for entry in data["noise"])
