"""The watch inside a job (DoctorCallback(watch=True)): each log the trainer makes is judged by the watch rules.

The main process judges; its verdict reaches every process through the job's own process group (one broadcast a
log, at the same step on all of them, as every process logs at the same steps), so all stop at the same step. A
verdict that changes is one line in the job's log; `doctor/<slug>` values (0 pass, 1 warn, 2 fail) join the logged
metrics the trackers receive; the JSON report is rewritten in output_dir (trl-doctor-watch.json) at each change and
at the end. On a failure at `fail_on` with on_fail="stop", the trainer saves a checkpoint and stops after this step;
a trainer whose own loop ignores `should_training_stop` (TRL's PPOTrainer) is stopped by raising WatchStopped from
train() once that checkpoint is saved (or at its next log, where it saves none).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trl_doctor.types import Status, fails

if TYPE_CHECKING:
    from trl_doctor.report.formats import Report
    from trl_doctor.watch.history import History

REPORT = "trl-doctor-watch.json"
FIRST, LAST = 20, 1000  # the logs a job's watch judges each log: the run's start (a baseline) and its newest
LEVEL = {Status.PASS: 0, Status.SKIP: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 0}


class Watcher:
    def __init__(self, fail_on: str = "fail", on_fail: str = "stop", thresholds: dict | None = None,
                 select=(), ignore=(), stream=None):
        if on_fail not in ("stop", "warn"):
            raise ValueError("on_fail must be 'stop' (save a checkpoint and stop) or 'warn' (say so and go on)")
        from trl_doctor.facts.metrics import threshold_problem
        from trl_doctor.watch.judge import watch_rules

        problem = threshold_problem(thresholds or {})
        if problem:  # refused where it is given, not at the first log an hour in
            raise ValueError(f"DoctorCallback(watch=...): {problem}")
        self.rules = watch_rules(select, ignore)
        self.fail_on, self.on_fail = fail_on, on_fail
        self.thresholds = thresholds or {}
        self.stream = stream
        self.history: History | None = None
        self.said: dict[str, str] = {}
        self.report: Report | None = None
        self.stopped_at: int | None = None
        self.seconds = 0.0  # what judging has cost the job, in all
        self.settings: dict[str, Any] = {}
        self.trainer_kind: str | None = None
        self.preflight: dict = {}
        self.release: str | None = None
        self.loop: str | None = None  # the trainer's class, where its own loop ignores should_training_stop
        self.stopped_for = ""
        self.troubles: set[str] = set()  # the watch's own troubles said in the job's log (each once)
        self.trainer: Any = None  # the live trainer: its newest generation batch is read at each log

    def begin(self, args, trainer, preflight_report=None) -> None:
        from trl_doctor.watch.history import History

        from trl_doctor.context.env import package_version

        self.history = History(Path(getattr(args, "output_dir", None) or ".") / REPORT, "job",
                               logging_steps=_logging_steps(args))
        self.history.gpus = _gpus(args)
        self.release = package_version("trl")
        self.settings = _settings(args)
        self.trainer_kind = _kind(trainer)
        self.trainer = trainer
        self.loop = None if trainer is None or _honours_stop(type(trainer)) else type(trainer).__name__
        if preflight_report is not None:
            self.preflight = {r.rule: {"status": r.status.value, "message": r.message} for r in preflight_report.results}

    def on_log(self, args, state, control, logs: dict | None) -> None:
        if self.history is None:
            self.begin(args, None)
        assert self.history is not None  # begun
        if self.stopped_at is not None and state.global_step > self.stopped_at and self.on_fail == "stop":
            self._raise("the trainer went on past the step it was told to stop at")
        start = time.perf_counter()
        lines: list[str]
        levels: dict[str, int]
        stop, lines, levels = False, [], {}
        try:
            log = self.history.add(dict(logs or {}), step=state.global_step) if logs else None
            if log is not None and state.is_world_process_zero and self.trainer is not None:
                from trl_doctor.watch.completions import from_trainer

                self.history.take_completions(from_trainer(self.trainer, state.global_step))
            if log is not None and state.is_world_process_zero:
                stop, lines, levels = self._judge(state)
        except Exception as exc:  # the watch's own trouble (a log it cannot read, its bug): a line, never the job's end
            stop, lines, levels = False, self._trouble(state, exc), {}
        stop, lines, levels = _agree((stop, lines, levels))  # every process, whatever happened above
        if logs is not None and levels:
            logs.update(_tracked(levels))
        if state.is_world_process_zero:
            from trl_doctor.watch import fitted

            for line in lines:  # wrapped to the terminal (COLUMNS; 80 in a log file), as --follow's lines are
                print(fitted(line), file=self.stream or sys.stderr, flush=True)
            if self.report is not None and (lines or stop):  # a trouble before the first report has none to write
                self._write(args)
        if stop and self.on_fail == "stop" and self.stopped_at is None:
            self.stopped_at = state.global_step
            control.should_save = _can_save(args, self.stream)  # a checkpoint that cannot be written is not asked for
            control.should_training_stop = True
            self.stopped_for = ", ".join(f"{r.id} {r.rule}" for r in self.report.results if fails(r, self.fail_on)) \
                if self.report is not None else ""
        self.seconds += time.perf_counter() - start

    def _judge(self, state) -> tuple[bool, list[str], dict[str, int]]:
        from trl_doctor.watch.context import WatchContext
        from trl_doctor.watch.judge import judge, report

        assert self.history is not None  # on_log began it
        ctx = WatchContext(self.history.view(FIRST, LAST), self.trainer_kind, self.settings, thresholds=self.thresholds,
                           preflight=self.preflight, release=self.release, running=True)
        results = judge(ctx, self.rules)
        self.report = report(ctx, results, fail_on=self.fail_on)
        lines = []
        for r in results:
            said = f"{r.status.value}: {r.message}"
            if r.status == Status.ERROR:  # a crashed rule is the watch's trouble, said once; it never stops the job
                said = f"error: the rule crashed ({r.message.removeprefix('the rule crashed: ')}); the job goes on"
            if r.status in (Status.WARN, Status.FAIL, Status.ERROR) and self.said.get(r.id) != said:
                lines.append(f"trl-doctor watch, step {state.global_step}: {r.id} {r.rule} {said}")
            self.said[r.id] = said
        bad = [r for r in results if r.status != Status.ERROR and fails(r, self.fail_on)]
        if bad and self.on_fail == "stop" and self.stopped_at is None:
            lines.append(f"trl-doctor watch: stopping the job at step {state.global_step} ({', '.join(r.id + ' ' + r.rule for r in bad)}): "
                         "the trainer saves a checkpoint and ends training after this step")
        return bool(bad), lines, {r.rule: LEVEL[r.status] for r in results}

    def _trouble(self, state, exc: Exception) -> list[str]:
        """The watch's own trouble at this log, as the job's log line (once for each kind): the job goes on."""
        words = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        if words in self.troubles:
            return []
        self.troubles.add(words)
        return [f"trl-doctor watch, step {state.global_step}: the watch could not judge this log ({words}); the job "
                "goes on, unjudged where it cannot be read"]

    def on_save(self, state) -> None:
        """After the checkpoint of the stopping step: a loop that ignores should_training_stop is stopped here."""
        if self.stopped_at is not None and self.loop and self.on_fail == "stop":
            self._raise(f"checkpoint-{state.global_step} is saved")

    def _raise(self, saved: str):
        from trl_doctor.errors import WatchStopped

        why = f" ({self.stopped_for})" if self.stopped_for else ""
        raise WatchStopped(f"trl-doctor watch stopped the job at step {self.stopped_at}{why}: {saved}; "
                           f"{self.loop or 'the trainer'}'s own loop does not honour should_training_stop, so the "
                           "doctor stops it by raising this from train(); catch trl_doctor.WatchStopped to go on "
                           "after train(), or use DoctorCallback(on_fail=\"warn\")")

    def end(self, args, state) -> None:
        if state.is_world_process_zero and self.report is not None:
            self._write(args)

    def _write(self, args) -> None:
        from trl_doctor.watch import write_atomic

        assert self.report is not None  # both callers check
        folder = Path(getattr(args, "output_dir", None) or ".")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(folder / REPORT, self.report.render("json"))
        except OSError as exc:
            print(f"trl-doctor watch: cannot write {folder / REPORT}: {exc.strerror or exc}", file=self.stream or sys.stderr)


def _can_save(args, stream) -> bool:
    """Whether the trainer can write the stopping step's checkpoint into output_dir (a read-only or missing folder:
    the trainer's save would raise, and the job would die of the watch's stop). Said in the log when it cannot."""
    import tempfile

    folder = Path(getattr(args, "output_dir", None) or ".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError as exc:
        print(f"trl-doctor watch: {folder} cannot be written ({exc.strerror or exc}): the job stops without a "
              "checkpoint of this step", file=stream or sys.stderr, flush=True)
        return False


def _tracked(levels: dict[str, int]) -> dict[str, int]:
    """What the trackers receive: `doctor/fail` and `doctor/warn` (how many rules say so) every log, and
    `doctor/<slug>` (1 warn, 2 fail) for each rule that is not ok."""
    out = {"doctor/fail": sum(1 for v in levels.values() if v == 2), "doctor/warn": sum(1 for v in levels.values() if v == 1)}
    out.update({f"doctor/{slug}": v for slug, v in levels.items() if v})
    return out


def _settings(args) -> dict[str, Any]:
    """The trainer's arguments the watch rules read (beta, max_completion_length, fp16, bf16, ...)."""
    out = {}
    for key in ("beta", "max_completion_length", "response_length", "fp16", "bf16", "num_generations",
                "num_iterations", "mask_truncated_completions", "max_steps", "logging_steps", "learning_rate"):
        if hasattr(args, key):
            out[key] = getattr(args, key)
    return out


def _gpus(args) -> int | None:
    """The GPUs the job trains on: one a process where it trains on CUDA (a findings' cost in GPU-hours), else None."""
    if "torch" not in sys.modules:
        return None
    try:
        import torch

        if not torch.cuda.is_available() or getattr(args, "use_cpu", False):
            return None
        return max(1, int(getattr(args, "world_size", 1) or 1))
    except Exception:  # the job's own state: an odd args object costs the finding its GPU-hours, nothing else
        return None


def _logging_steps(args) -> int | None:
    """The job's logging interval in optimizer steps, when its arguments say it in steps (a ratio below 1 is of a
    total the history learns from the logged steps instead)."""
    value = getattr(args, "logging_steps", None)
    strategy = getattr(args, "logging_strategy", "steps")
    strategy = str(getattr(strategy, "value", strategy))  # an IntervalStrategy enum, or its string
    if strategy != "steps" or isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1:
        return None
    return int(value)


def _kind(trainer) -> str | None:
    if trainer is None:
        return None
    from trl_doctor.facts.trl.async_grpo import is_async_grpo
    from trl_doctor.vocabulary import ASYNC_GRPO

    if is_async_grpo(type(trainer)):  # no GRPOTrainer: its logs are its own (trl_doctor.facts.metrics)
        return ASYNC_GRPO
    names = [c.__name__ for c in type(trainer).__mro__]
    for kind, classes in (("grpo", ("GRPOTrainer",)), ("rloo", ("RLOOTrainer",)), ("ppo", ("PPOTrainer", "PPOv2Trainer"))):
        if any(cls in names for cls in classes):
            return kind
    return "other"


def _honours_stop(cls) -> bool:
    """Whether the trainer's training loop stops on control.should_training_stop: transformers.Trainer's does (its
    train() runs _inner_training_loop); a class with its own train() does when that loop reads the flag."""
    import inspect

    train = getattr(cls, "train", None)
    try:
        from transformers import Trainer

        if train is None or train is Trainer.train:
            return True
        return "should_training_stop" in inspect.getsource(train)
    except (ImportError, OSError, TypeError):
        return True  # unknown: the next log past the stop step says so (Watcher.on_log)


def _agree(verdict: tuple) -> tuple:
    """The main process's verdict, in every process of a distributed job (every process logs at the same step, so
    each calls this once a log, and the broadcast pairs up)."""
    if "torch" not in sys.modules:
        return verdict  # no torch in this process: no process group either
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            box = [verdict]
            dist.broadcast_object_list(box, src=0)
            return box[0]
    except (ImportError, RuntimeError):
        pass
    return verdict
