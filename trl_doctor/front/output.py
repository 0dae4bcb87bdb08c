"""What the command line writes: a report to stdout or its file, and the one-line input error (exit 2); shared by
`check` (cli.py) and `watch` (watch_cli.py)."""

from __future__ import annotations

import os
from pathlib import Path

import click

EXIT_INPUT = 2
# what stood at each report path (and its folder) before anything of the user's ran: (link target or None, the
# folder's real path). A launch command's script runs in between, and may put a link where a report goes.
_BEFORE: dict[str, tuple[str | None, str]] = {}


def remember_report_paths(paths) -> None:
    """Note what stands at each report path now, before the check runs the user's code (cli.check)."""
    for path in paths:
        if path:
            _BEFORE[os.path.abspath(path)] = (_link(path), os.path.realpath(os.path.dirname(os.path.abspath(path))))


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _unlinked(path: str) -> str | None:
    """A report is never written through a link that was not at its path when the check began (a launch script
    made it): the link is removed and the report written in its place; a folder made a link is refused (its words,
    or None)."""
    before = _BEFORE.get(os.path.abspath(path))
    if before is None:
        return None
    link, folder = before
    if os.path.realpath(os.path.dirname(os.path.abspath(path))) != folder:
        return "its folder was replaced by a link while the check ran; the report is not written through it"
    now = _link(path)
    if now is not None and now != link:
        from trl_doctor.report.formats._safe import for_terminal

        os.unlink(path)
        click.echo(for_terminal(f"trl-doctor: {path} became a link while the check ran (to {now}): replaced by the "
                                "report, not written through", one_line=True), err=True)
    return None


def error_line(message: str) -> None:
    """One line on stderr; its text (paths, keys, an exception's words) may come from the checked repository."""
    from trl_doctor.report.formats._safe import for_terminal

    click.echo(f"trl-doctor: error: {for_terminal(message, one_line=True)}", err=True)


def input_error(message: str) -> "click.exceptions.Exit":
    error_line(message)
    return click.exceptions.Exit(EXIT_INPUT)


def emit(text: str, path: str | None) -> None:
    if path:
        from trl_doctor.errors import InputError

        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)  # as ruff's --output-file: the folder is made
        except (FileExistsError, NotADirectoryError):  # mkdir's own words ("File exists") name no cause
            raise InputError(f"{path}: cannot write the report: a file stands where its folder would be") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot write the report: {exc.strerror or exc}") from None
        try:
            refused = _unlinked(path)
            if refused:
                raise InputError(f"{path}: cannot write the report: {refused}")
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:  # a full disk, a read-only folder: one line, exit 2
            raise InputError(f"{path}: cannot write the report: {exc.strerror or exc}") from None
    else:
        click.echo(text, nl=False)


def unexpected(exc: Exception, what: str, verbose: bool, doing: str = "the check") -> str:
    """An unexpected stop of `doing` on `what` (the doctor's own bug met on some input), as its one line."""
    if isinstance(exc, RecursionError):
        return f"{what}: an input is nested too deeply to check"
    if isinstance(exc, MemoryError):
        return f"{what}: an input is too large to check in this machine's memory"
    loop = symlink_loop(exc)
    if loop:
        return f"{loop}: a symbolic link loop (the link leads back to itself), not a file or folder"
    text = str(exc).splitlines()[0][:300] if str(exc) else ""
    hint = "" if verbose else " (-v shows the traceback)"
    return f"{what}: {doing} stopped on {type(exc).__name__}: {text}{hint}"


def symlink_loop(exc: Exception) -> str | None:
    """The path of a symbolic link loop `exc` reports (pathlib's RuntimeError before Python 3.13, ELOOP after)."""
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return str(exc.filename)
    text = str(exc)
    if isinstance(exc, RuntimeError) and text.startswith("Symlink loop from "):
        return text[len("Symlink loop from "):].strip("'\"")
    return None
