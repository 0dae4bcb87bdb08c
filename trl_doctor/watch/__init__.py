"""The watch: judging a job's logged metrics while it trains (DoctorCallback(watch=True)) or from the outside
(`trl-doctor watch PATH`), with the watch rules (TW001-TW013, rules/). The context they read is `context.py`, the
logs `history.py`; the facts they share are trl_doctor.facts.metrics."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all: a temporary file beside it, then a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def fitted(line: str) -> str:
    """A line the watch prints (--follow's, the job's log's) made harmless and wrapped to the terminal's width
    (COLUMNS, else the terminal's, else 80), its continuation lines indented. Its text holds metric names, rule
    messages and a plugin's exception words, all from the job's logs (anyone's text): control characters, lone
    surrogates and escape sequences become visible escapes, and no `::` or `##[` survives (a CI runner acts on them)."""
    import shutil
    import textwrap

    from trl_doctor.report.formats._safe import for_terminal

    width = max(40, shutil.get_terminal_size((80, 24)).columns)
    return textwrap.fill(for_terminal(line, one_line=True), width=width, subsequent_indent="    ",
                         break_on_hyphens=False)


def read_bytes(path: Path, limit: int, what: str = "training log") -> bytes:
    """A watched file's bytes, refused in one line naming it (InputError) past `limit` or when it cannot be read:
    every file under a watched folder is hostile."""
    from trl_doctor.context.inputs import not_a_file
    from trl_doctor.errors import InputError

    odd = not_a_file(path)
    if odd:  # a FIFO would block, a device (/dev/zero) be read without end
        raise InputError(f"{path}: {odd}, not a {what}")
    try:
        size = path.stat().st_size
        if size > limit:
            raise InputError(f"{path}: {size / (1 << 30):.1f} GiB, larger than any {what} ({limit >> 30} GiB at most)")
        with open(path, "rb") as f:
            data = f.read(limit + 1)  # a file that grows between the stat and the read is still read to `limit`
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{path}: larger than any {what} ({limit >> 30} GiB at most)")
    return data
