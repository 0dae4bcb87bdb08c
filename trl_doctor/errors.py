"""Errors the command line turns into exit status 2 with one line on stderr."""


class InputError(Exception):
    """The config or one of its inputs cannot be read. The message names the file and the problem."""


class Unavailable(Exception):
    """A context artifact cannot be built for a reason that is a finding, not an input error
    (for example TRL rejects the trainer config). Rules that need it are skipped with this reason."""


class WatchStopped(Exception):
    """DoctorCallback(watch=True, on_fail="stop") stopped a trainer whose own loop does not honour
    `control.should_training_stop` (TRL's PPOTrainer): raised from train() after the checkpoint of the failing step
    was saved. Catch it to go on after train(); the message names the step, the rules and the checkpoint."""


def exception_chain(exc: BaseException):
    """The exception and each one behind it (its cause, else its context), once each: where a library's words for
    a failure (a full disk, a refused request) may sit under another's."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        yield at
        at = at.__cause__ or at.__context__
