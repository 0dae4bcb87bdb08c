"""The trainer run's messages, typed and versioned: what the parent side asks for (`Spec`), where the run is
(`Stage`), and what came of it (`RunResult`). They cross a process boundary when the run is supervised from
the printing process (a stage tells the supervisor when the smoke timeout starts; a run that hung or died is
handed back to a fresh worker as a `RunResult`), so each has a plain-JSON form (`to_json` / `from_json`),
as pytest's report serialization does. A message of another protocol version is refused, not misread.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

VERSION = 1

# The stages a run goes through, in order; a failure names the one it happened in.
STAGES = ("import", "config", "reward functions", "models", "dataset", "trainer init with Liger on", "trainer init",
          "logits probe", "train", "inspect", "sample")
OUTCOMES = ("ok", "failed", "timeout", "crashed")


from trl_doctor.protocol import ProtocolError  # noqa: E402,F401  (one error for every message of trl-doctor)


@dataclass(frozen=True)
class Spec:
    """Everything the worker side needs to build the trainer and run the probes and the step."""

    trainer: str
    device: str
    model_path: str
    tokenizer_path: str | None  # None: the run is lent the context's tokenizer (lent.py)
    model_label: str
    work_dir: str
    user_dir: str
    config: dict  # the user's keys the installed config class takes
    overrides: dict  # the step's sizes (2 sequences, 8 tokens, no saving...)
    rows: list  # the first dataset rows, as the trainer gets them
    raw: dict = field(default_factory=dict)  # every plain value of the config (PEFT keys, paths)
    columns: list = field(default_factory=list)
    model_note: str | None = None  # why the twin or the real model
    twin_aux: bool = True  # the step runs on the miniature twin, its reward and value models twinned too
    model_kwargs: dict = field(default_factory=dict)
    precision: str = "fp32"
    reward_funcs: list = field(default_factory=list)
    # GRPOTrainer's tools, environment_factory (a name, or {environment: name}) and rollout_func, by the names
    # trl_doctor.facts.rewards resolves (a script's live callables): the trainer is built as the script built it
    agent: dict = field(default_factory=dict)
    # the PEFT config the script passed, by the name trl_doctor.facts.rewards registered it under (its own class:
    # a PromptTuningConfig stays one); None: the config's use_peft / lora_* keys, as `trl <trainer>` builds them
    peft: str | None = None
    reward_models: list = field(default_factory=list)
    reward_model_path: str | None = None
    value_model_path: str | None = None
    train: bool = True  # False: build the trainer and run the probes only (--no-smoke)
    # after the step, the job's later phases in miniature (facts/trainer_run/rehearsal.py): the job's own settings
    # for them ({"eval_strategy", "metric_for_best_model", "save_only_model", ...}); {}: none rehearsed
    rehearse: dict = field(default_factory=dict)
    force_token_id: int | None = None
    force_token: str | None = None
    force_reason: str | None = None
    force_after: int = 3
    suppress_ids: list = field(default_factory=list)
    twin_parameters: int | None = None
    # the real-model sample after the step (--sample N, or by default on a GPU where the real model fits):
    # {"n", "model_path", "prompt_ids", "rows", "generation", ...} as `parent.sample_plan` builds it; {} when not
    # asked for; {"refused": why} when asked for but not run
    sample: dict = field(default_factory=dict)
    user_code_timeout: float = 60.0
    left_out: list = field(default_factory=list)  # what only the launch machine can do, off for the step (launch_only)
    # a vision-language model's image rows: the rows saved as a dataset (`rows` then holds them without their
    # images), and the folder whose processor turns them into inputs; None for text
    rows_path: str | None = None
    processor_path: str | None = None

    def details(self) -> dict[str, Any]:
        """What every outcome reports about the run's set-up."""
        out: dict[str, Any] = {"device": self.device, "model": self.model_label}
        if self.model_note:
            out["model choice"] = self.model_note
        if self.precision:
            out["precision"] = self.precision
        if self.left_out:
            out["left out of the step (the launch machine's)"] = list(self.left_out)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Spec":
        return cls(**_fields(cls, _versioned(data, "Spec")))


@dataclass(frozen=True)
class Stage:
    """The run entered stage `name` (one of STAGES) `elapsed_s` seconds after it started."""

    name: str
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Stage":
        return cls(**_fields(cls, _versioned(data, "Stage")))


@dataclass
class Progress:
    """What the worker side has seen so far: the stage, each reward function's calls, the finished probes.
    Kept apart from the frozen Spec, so a failure can report everything gathered before it."""

    stage: str | None = None
    calls: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    heard: list = field(default_factory=list)  # what TRL and its libraries warned (heard.py), as they said it
    agent: dict = field(default_factory=dict)  # calls of the script's rollout_func during the step: {"rollout_func": n}


@dataclass(frozen=True)
class RunResult:
    """What came of a run.

    - `ok`: `result` holds {"trainer", "import_s", "probes", "model", "train", "sample", "heard"} (train is None with
      --no-smoke; sample is None unless the real model was sampled, else what `worker.sample_real` gives);
    - `failed`: the trainer raised; `error` holds {"error_type", "error", "traceback", "stage", "rewards", "probes",
      "heard"};
    - `timeout`: stopped after `limit` seconds in `last_stage`;
    - `crashed`: the process died (`code`: its exit status, negative for a signal) in `last_stage`; `cause` is the
      supervisor's words for it ("killed by SIGKILL", or the kernel's out-of-memory killer when its record says so).
    """

    outcome: str
    details: dict
    spec: Spec | None = None
    result: dict | None = None
    error: dict | None = None
    log_tail: str = ""
    last_stage: str | None = None
    code: int | None = None
    limit: float | None = None
    cause: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ProtocolError(f"unknown trainer-run outcome {self.outcome!r}")

    @property
    def probes(self) -> dict:
        """The probes that finished, whatever the outcome."""
        if self.result is not None:
            return dict(self.result.get("probes") or {})
        return dict((self.error or {}).get("probes") or {})

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["spec"] = self.spec.to_json() if self.spec is not None else None
        return {"version": VERSION, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunResult":
        data = _fields(cls, _versioned(data, "RunResult"))
        if data.get("spec") is not None:
            data["spec"] = Spec.from_json(data["spec"])
        return cls(**data)


def _versioned(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProtocolError(f"a {what} message must be a JSON object")
    if data.get("version") != VERSION:
        raise ProtocolError(f"a {what} message of protocol version {data.get('version')!r}; this is version {VERSION}")
    return data


def _fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}
