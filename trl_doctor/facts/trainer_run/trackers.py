"""The job's trackers, started offline for the rehearsal (issue 60): each `report_to` tracker the job names starts as
the job starts it (transformers' own callback, given the job's arguments and the model), with its records kept in the
check's own folder and nothing sent anywhere, then sees a log and the later phases, and is closed.

A tracker's callback reads the job's whole arguments when it starts: TensorBoard writes them as JSON, wandb, MLflow and
Trackio take them as their run's config. Where the job's arguments hold what these cannot take (a `torch.dtype` in
`model_init_kwargs`, as TRL's own documentation writes it), the job stops at `train()`, after the model has loaded,
in the tracker's words: the rehearsal's "trackers" phase fails in the same words.

Each tracker with an offline recipe below starts: its environment points it at the check's folder (the variables set
for the rehearsal only, and put back); a run id or resume setting aimed at a server is dropped (a server's run is not
on this machine). A tracker without one (neptune, dagshub, azure_ml, ...) is not started, and said so.
"""

from __future__ import annotations

import copy
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

# tracker -> (variables set, {dir} the tracker's folder in the check's own; variables dropped)
OFFLINE: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "wandb": ({"WANDB_MODE": "offline", "WANDB_DIR": "{dir}", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off",
               # its caches, settings and artifact staging (a completions table is one) too: nothing in the home folder
               "WANDB_CACHE_DIR": "{dir}/cache", "WANDB_CONFIG_DIR": "{dir}/config", "WANDB_DATA_DIR": "{dir}/data",
               "WANDB_ARTIFACT_DIR": "{dir}/artifacts", "WANDB_INIT_TIMEOUT": "30"},
              ("WANDB_RESUME", "WANDB_RUN_ID", "WANDB_BASE_URL")),
    "tensorboard": ({"TENSORBOARD_LOGGING_DIR": "{dir}"}, ()),
    "mlflow": ({"MLFLOW_TRACKING_URI": "file:{dir}/store", "MLFLOW_ALLOW_FILE_STORE": "true"},  # made by MLflow
               ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TRACKING_TOKEN")),
    "trackio": ({"TRACKIO_DIR": "{dir}"}, ("TRACKIO_SPACE_ID", "TRACKIO_DATASET_ID", "TRACKIO_BUCKET_ID")),
    "comet_ml": ({"COMET_MODE": "offline", "COMET_OFFLINE_DIRECTORY": "{dir}"}, ()),
    "clearml": ({"CLEARML_OFFLINE_MODE": "1"}, ()),
    "swanlab": ({"SWANLAB_MODE": "offline", "SWANLAB_LOG_DIR": "{dir}"}, ()),
}
# the arguments that aim a tracker at a server or a folder of the job's, kept off for the rehearsal where present
ARGS_OFF = {"trackio_space_id": None, "trackio_bucket_id": None, "trackio_static_space_id": False}


@dataclass
class Started:
    """The trackers started for the rehearsal: their callbacks (attached to the trainer), and those not started."""
    names: list[str] = field(default_factory=list)
    callbacks: list[Any] = field(default_factory=list)
    not_started: dict[str, str] = field(default_factory=dict)
    at: str | None = None  # the tracker starting (or "log") when begin_and_log stopped
    report_to_before: Any = None  # the trainer's own report_to (the step's: none)
    made: list[Any] = field(default_factory=list)  # every callback made, detached or not: each is closed at the end

    def begin_and_log(self, trainer: Any, job_args: Any = None) -> None:
        """What the job's trackers meet first: `train()`'s on_train_begin (each starts its run with the job's own
        arguments, `job_args` as the script built them, and the model's config), then one log of the step's
        metrics through the trainer's own `log` (TRL's completions tables among them, where the job logs them)."""
        handler = copy.copy(trainer.callback_handler)  # the trainer's own, with its model, tokenizer, optimizer
        args = self._as_started(trainer, job_args)
        for name, callback in zip(self.names, self.callbacks):  # in report_to's order, as the trainer calls them
            self.at = name
            handler.callbacks = [callback]
            handler.on_train_begin(args, trainer.state, trainer.control)
        self.at = "log"
        last = trainer.state.log_history[-1] if trainer.state.log_history else {}
        trainer.log({k: v for k, v in last.items() if k not in ("step", "epoch") and isinstance(v, (int, float))})

    def _as_started(self, trainer: Any, job_args: Any) -> Any:
        """The job's arguments as its trackers get them, their folders and servers those of the rehearsal (a copy:
        the script's object is not touched)."""
        if job_args is None:
            return trainer.args
        args = copy.copy(job_args)
        moved = {"output_dir": trainer.args.output_dir, "report_to": list(self.names),
                 "logging_dir": getattr(trainer.args, "logging_dir", None)}
        for key, value in {**moved, **ARGS_OFF}.items():
            if hasattr(args, key):
                object.__setattr__(args, key, value)  # past a frozen TrainingArguments' __setattr__
        return args

    def detach(self, trainer: Any) -> None:
        """Take the trackers off the trainer: its later phases run as without them (report_to put back too, as
        TRL's own logging follows it)."""
        for callback in self.callbacks:
            trainer.remove_callback(callback)
        self.callbacks = []
        if self.names:
            trainer.args.report_to = self.report_to_before


def requested(names: list[str]) -> list[str]:
    """The job's trackers, "all" as transformers reads it (every tracker installed here)."""
    if "all" in names:
        from transformers.integrations import get_available_reporting_integrations

        names = [n for n in names if n != "all"] + list(get_available_reporting_integrations())
    return list(dict.fromkeys(n for n in names if n not in ("none", "")))


@contextmanager
def offline(trainer: Any, names: list[str], folder: str) -> Iterator[Started]:
    """The job's trackers started offline in `folder` for the duration; closed, detached and the environment and
    arguments put back after."""
    started = Started(report_to_before=getattr(trainer.args, "report_to", None))
    env_before: dict[str, str | None] = {}
    args_before: dict[str, Any] = {}
    try:
        for name in requested(names):
            recipe = OFFLINE.get(name)
            if recipe is None:
                started.not_started[name] = "no offline mode known for it: not started in the rehearsal"
                continue
            where = os.path.join(folder, name)
            os.makedirs(where, exist_ok=True)
            set_env, drop = recipe
            for key in (*set_env, *drop):
                env_before.setdefault(key, os.environ.get(key))
            os.environ.update({k: v.format(dir=where) for k, v in set_env.items()})
            for key in drop:
                os.environ.pop(key, None)
            for key, value in {**ARGS_OFF, **({"logging_dir": where} if name == "tensorboard" else {})}.items():
                if hasattr(trainer.args, key):
                    args_before.setdefault(key, getattr(trainer.args, key))
                    setattr(trainer.args, key, value)
            try:
                callback = _callback(name)
            except Exception as exc:  # not installed here: run-phases says so, in the same words
                started.not_started[name] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                continue
            trainer.add_callback(callback)
            started.made.append(callback)
            started.names.append(name)
            started.callbacks.append(callback)
        if started.names:
            trainer.args.report_to = list(started.names)  # TRL's own tracker paths (completions tables) follow it
        yield started
    finally:
        for callback in started.made:  # a tracker that failed to start may have opened its writer first
            _close(callback)
        started.detach(trainer)
        _finish_modules()
        for key, value in args_before.items():
            setattr(trainer.args, key, value)
        for key, env_value in env_before.items():
            if env_value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = env_value


def _callback(name: str) -> Any:
    from transformers.integrations import get_reporting_integration_callbacks

    (cls,) = get_reporting_integration_callbacks([name])
    return cls()


def _close(callback: Any) -> None:
    """Close what the callback opened (a TensorBoard writer's file, an MLflow run): the check's folder is left
    whole and no writer thread outlives the rehearsal."""
    writer = getattr(callback, "tb_writer", None)
    try:
        if writer is not None:
            writer.close()
        flow = getattr(callback, "_ml_flow", None)
        if flow is not None and getattr(callback, "_initialized", False) and flow.active_run() is not None:
            flow.end_run()
    except Exception:
        pass


def _finish_modules() -> None:
    """Finish the runs the trackers' own modules keep (wandb's service process is stopped with it)."""
    wandb = sys.modules.get("wandb")
    try:
        if wandb is not None and getattr(wandb, "run", None) is not None:
            wandb.finish(quiet=True)
        if wandb is not None and hasattr(wandb, "teardown"):
            wandb.teardown()
    except Exception:
        pass
    trackio = sys.modules.get("trackio")
    try:
        if trackio is not None and trackio.context_vars.current_run.get() is not None:
            trackio.finish()
    except Exception:
        pass
