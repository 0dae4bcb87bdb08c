"""The options of one check: every knob the doors (CLI, API, DoctorCallback) set for the worker, each default
written once, here. The command line shows these defaults (`--smoke-timeout` ...), and the options cross the pipe
to the worker as this type (`to_dict` / `from_dict`, which refuses a field it does not know)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Options:
    device: str = "auto"  # auto | cpu | cuda
    trust_remote_code: bool = False
    smoke: bool = True
    smoke_timeout: float = 300.0
    unsafe_fixes: bool = False  # rules prepare costly unsafe fixes (rewritten weights) only when they may apply
    num_processes: int | None = None  # training processes of the launch (--num-processes); None: read the launch config
    trainer_run: dict | None = None  # a RunResult (JSON) the supervisor hands a fresh worker when a run hung or died
    launch: dict | None = None  # a launch command (trl_doctor.capture.command.LaunchCommand as JSON): check what it builds
    load_weights: bool = False  # the script's from_pretrained loads real weights (default: the meta device)
    script_timeout: float = 300.0  # seconds a launch command's script may take to construct its trainer
    # why the script runs at world size 1 rather than as rank 0 of the launch's processes (set by the supervisor for a
    # fresh worker when the script's rank set-up needed a GPU this machine lacks: trl_doctor/capture/world.py)
    one_process_why: str | None = None
    verbose: bool = False  # input errors carry the script's traceback
    target: str | None = None  # the launch machine's GPUs (--target 8xH100-80GB), judged instead of this machine's
    # the GPUs `target` describes, in NVML's shape: parsed once, by the front door (trl_doctor.front.settings.resolve)
    target_gpus: tuple[dict, ...] | None = None
    # with --target: the launch's Python environment is this one ("this"), another ("other"), or "auto": this one
    # when this torch is a CUDA build (a CPU torch is no GPU job's environment)
    target_env: str = "auto"
    max_memory: float | None = None  # GiB of address space for the worker (None: 85% of RAM; 0: no limit); see _limits
    memory_limit: int | None = None  # the limit the worker set, in bytes (recorded by the worker)
    user_code_timeout: float = 60.0  # seconds the user's code (a reward module's import, one call, a chat template) may run
    # hosts besides this machine the check may contact (--allow-host, the project's allow-hosts): HOST or HOST:PORT
    allow_hosts: tuple[str, ...] = ()
    sample: int | None = None  # --sample N: prompts sampled with the real model after the smoke step (None: N on a GPU where it fits, else none)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Options":
        """The options a Request carried; a field this release does not know is refused (ValueError)."""
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown check options: {', '.join(sorted(unknown))}")
        if data.get("target_gpus") is not None:  # a JSON list across the pipe
            data = {**data, "target_gpus": tuple(data["target_gpus"])}
        if data.get("allow_hosts") is not None:
            data = {**data, "allow_hosts": tuple(data["allow_hosts"])}
        return cls(**data)


DEFAULTS = Options()
