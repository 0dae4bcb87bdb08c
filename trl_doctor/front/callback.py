"""`DoctorCallback`: the check as a gate inside the job, for jobs launched by hand where no CI gate runs, and the
watch over the job while it trains.

At `on_train_begin` the main process checks the live trainer (its model, tokenizer, dataset, reward functions
and config), prints the table, and when a rule fails at or above `fail_on` the job stops before step 1: every
process learns the verdict (a broadcast when torch.distributed is running) and raises `DoctorStop`, so none
is left waiting for the others. `preflight=False` leaves that check out.

With `watch=True` (or a dict of thresholds by watch rule, as `[tool.trl-doctor.watch]` holds them) each log is
judged by the watch rules (trl_doctor.watch.job): a failure with `on_fail="stop"` saves a checkpoint and ends
training at that step on every process; `on_fail="warn"` only says so.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from trl_doctor.types import fails

if TYPE_CHECKING:
    from trl_doctor.report.formats import Report


class DoctorStop(RuntimeError):
    """Raised in every process when the check fails: the job stops before its first step."""


class DoctorCallback(TrainerCallback):
    def __init__(self, fail_on: str = "fail", smoke: bool = False, trainer: Any = None, stream=None, *,
                 preflight: bool = True, watch: bool | dict = False, on_fail: str = "stop", **options: Any):
        if fail_on not in ("fail", "warn"):
            raise ValueError("fail_on must be 'fail' or 'warn'")
        self.fail_on = fail_on
        self.preflight = preflight
        self.watcher = None
        if watch:
            from trl_doctor.watch.job import Watcher

            self.watcher = Watcher(fail_on, on_fail, thresholds=watch if isinstance(watch, dict) else None,
                                   stream=stream)
        self.smoke = smoke
        self.trainer = trainer  # found on the stack at on_train_begin when not given
        self.stream = stream
        self.options = options
        self.report: Report | None = None
        self.seconds: float | None = None  # what the check cost at on_train_begin

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = self.trainer or _calling_trainer(self)
        if self.preflight:
            self._preflight(state, trainer)
        if self.watcher is not None:
            self.watcher.begin(args, trainer, self.report)
            _first(trainer, self)  # before the trackers' callbacks, so that they receive the doctor/* values
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.watcher is not None:
            self.watcher.on_log(args, state, control, logs)
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.watcher is not None:
            self.watcher.on_save(state)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.watcher is not None:
            self.watcher.end(args, state)
        return control

    @property
    def watch_report(self):
        """The watch's last report (trl_doctor.Report), or None before the first log."""
        return self.watcher.report if self.watcher is not None else None

    def _preflight(self, state, trainer) -> None:
        ok, why = True, ""
        if state.is_world_process_zero:
            from trl_doctor.front.api import check

            if trainer is None:
                print("trl-doctor: DoctorCallback found no trainer to check; pass DoctorCallback(trainer=...)",
                      file=self.stream or sys.stderr)
            else:
                import time

                start = time.perf_counter()
                self.report = check(trainer, fail_on=self.fail_on, smoke=self.smoke, **self.options)
                self.seconds = time.perf_counter() - start
                print(self.report.table, file=self.stream or sys.stderr, end="")
                ok = self.report.ok
                bad = [f"{r.id} {r.rule}" for r in self.report.results if fails(r, self.fail_on)]
                why = ", ".join(bad)
        ok, why = _agree(ok, why)
        if not ok:
            raise DoctorStop(f"trl-doctor stopped the job before step 1: {why} (fail_on={self.fail_on!r})")


def _first(trainer, callback) -> None:
    """Put `callback` first among the trainer's callbacks: the trackers' on_log then sees what it adds to the logs."""
    handler = getattr(trainer, "callback_handler", None)
    callbacks = getattr(handler, "callbacks", None)
    if callbacks and callback in callbacks:
        callbacks.remove(callback)
        callbacks.insert(0, callback)


def _calling_trainer(callback: DoctorCallback):
    """The transformers Trainer whose callback handler is calling `callback`: found up the stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        handler = getattr(candidate, "callback_handler", None)
        if handler is not None and callback in getattr(handler, "callbacks", ()):
            return candidate
        frame = frame.f_back
    return None


def _agree(ok: bool, why: str) -> tuple[bool, str]:
    """The main process's verdict, in every process of a distributed job."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            box = [(ok, why)]
            dist.broadcast_object_list(box, src=0)
            return box[0]
    except Exception:
        pass
    return ok, why
