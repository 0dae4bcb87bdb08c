"""Errors the command line turns into exit status 2 with one line on stderr."""


class InputError(Exception):
    """The config or one of its inputs cannot be read. The message names the file and the problem."""


class Unavailable(Exception):
    """A context artifact cannot be built for a reason that is a finding, not an input error
    (for example TRL rejects the trainer config). Rules that need it are skipped with this reason."""
