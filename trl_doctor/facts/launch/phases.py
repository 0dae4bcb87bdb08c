"""The job's phases after its first step (issue 60): what stops a job at its first evaluation, its first checkpoint,
its resume or its trackers' start, read before launch. Each function returns a `Phase` finding or None.

- resume: `resume_from_checkpoint` (TRL's scripts pass it to `trainer.train()`): a path that holds no checkpoint
  transformers can load ("Can't find a valid checkpoint at ..."), or True with no checkpoint-* in output_dir
  ("No valid checkpoint found in output directory"): the job dies after loading its model;
- evaluation: `eval_strategy` set where TRL's scripts take `dataset[dataset_test_split]` and the dataset has no such
  split (KeyError after the load);
- the best model: `load_best_model_at_end` / `save_strategy: best` without `metric_for_best_model` (transformers'
  ValueError at the trainer's construction), or on the loss of an RL trainer (GRPO's loss is about beta x KL: the
  lowest-loss checkpoint is no better policy), or on a metric the installed trainer does not log (KeyError at the
  first evaluation, hours in);
- trackers: a `report_to` tracker with no credentials here and not offline (wandb's init stops `train()`);
- disk: the first checkpoint (weights in the training dtype, and the optimizer's states unless `save_only_model`)
  larger than the free space at `output_dir`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl_doctor.errors import Unavailable
from trl_doctor.runtime import hold as _hold
from trl_doctor.facts.launch.launcher import launch
from trl_doctor.facts.launch.settings import config_value

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
           "adapter_model.safetensors", "adapter_model.bin", "pytorch_model_fsdp.bin")
RL_TRAINERS = ("grpo", "rloo", "ppo", "async_grpo")


@dataclass
class Phase:
    """One phase's finding: `status` "fail" or "warn", what goes wrong and when, and the fix in words."""

    phase: str
    status: str
    message: str
    fix: str
    details: dict = field(default_factory=dict)


def _value(ctx, key: str, default: Any = None) -> Any:
    try:
        return config_value(ctx, key, default)
    except Unavailable:
        return default


def _text(value: Any) -> str:
    """An enum's value or the value as text (IntervalStrategy.NO -> "no")."""
    return str(getattr(value, "value", value)).lower() if value is not None else ""


def launch_dir(ctx) -> Path:
    """Where relative paths are read: the launch's folder for `check -- COMMAND`, else where the check runs."""
    live = getattr(ctx, "live", None)
    folder = getattr(live, "cwd", None) if live is not None else None
    return Path(folder) if folder else Path.cwd()


def _judged_from(ctx) -> str:
    return "the launch's folder" if getattr(ctx, "live", None) is not None else "the folder the check runs in"


def _here(path: Path) -> bool:
    """Whether a path is this machine's to judge: relative, or absolute with an existing parent here."""
    return not path.is_absolute() or any(p.exists() for p in path.parents if p != Path(p.anchor))


def resume(ctx) -> Phase | None:
    value = _value(ctx, "resume_from_checkpoint")
    if value in (None, "", False):
        return None
    output_dir = Path(str(_value(ctx, "output_dir") or "."))
    base = launch_dir(ctx)
    if value is True or _text(value) == "true" and not (base / str(value)).exists():
        folder = output_dir if output_dir.is_absolute() else base / output_dir
        if not _here(output_dir):
            return None
        found = _last_checkpoint(folder)
        if found is None:
            return Phase("resume", "fail", f"resume_from_checkpoint is True but output_dir {output_dir} holds no "
                         "checkpoint-* folder with a trainer_state.json: transformers stops train() with \"No valid "
                         "checkpoint found in output directory\" after the model has loaded", "unset "
                         "resume_from_checkpoint for a first run, or point it at a checkpoint folder",
                         {"output_dir": str(output_dir)})
        return None
    path = Path(str(value))
    where = path if path.is_absolute() else base / path
    if not _here(path):
        raise Unavailable(f"resume_from_checkpoint {value} is another machine's path (its parent folders are not "
                          "here): the launch machine's folder is not judged")
    seen_from = "" if path.is_absolute() else f" (a relative path, judged from {_judged_from(ctx)})"
    if not where.is_dir():
        return Phase("resume", "fail", f"resume_from_checkpoint {value} does not exist{seen_from}: TRL's scripts pass "
                     "it to trainer.train(), which stops with \"Can't find a valid checkpoint at ...\" after the model "
                     "has loaded", "point resume_from_checkpoint at a checkpoint-N folder, or unset it",
                     {"resume_from_checkpoint": str(value)})
    if not _holds_weights(where):
        return Phase("resume", "fail", f"resume_from_checkpoint {value}{seen_from} holds no weights transformers can "
                     f"resume from ({', '.join(WEIGHTS[:3])}, an adapter, FSDP shards): train() stops with \"Can't "
                     "find a valid checkpoint at ...\"", "point it at a checkpoint-N folder the Trainer wrote",
                     {"resume_from_checkpoint": str(value), "holds": sorted(p.name for p in where.iterdir())[:10]})
    return None


def _holds_weights(folder: Path) -> bool:
    if any((folder / name).is_file() for name in WEIGHTS):
        return True
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    return any(e.name.startswith("pytorch_model_fsdp") for e in entries) or any(
        e.is_dir() and any((e / n).is_file() for n in ("adapter_model.safetensors", "adapter_model.bin"))
        for e in entries)


def _last_checkpoint(folder: Path) -> Path | None:
    """transformers' get_last_checkpoint: the highest checkpoint-N holding a trainer_state.json."""
    try:
        found = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith("checkpoint-")
                 and p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None


def evaluation(ctx) -> Phase | None:
    """A config file run as TRL's scripts run it: with eval_strategy, they take dataset[dataset_test_split]."""
    if getattr(ctx, "live", None) is not None or _text(_value(ctx, "eval_strategy", "no")) in ("no", ""):
        return None
    split = _value(ctx, "dataset_test_split") or "test"
    splits = dataset_splits(ctx)
    if splits is None or split in splits:
        return None
    return Phase("evaluation", "fail", f"eval_strategy is {_text(_value(ctx, 'eval_strategy'))} but the dataset has "
                 f"no {split!r} split (it has {', '.join(sorted(splits))}): TRL's scripts take "
                 f"dataset[{split!r}] for the evaluation and stop with KeyError after the model has loaded",
                 f"set dataset_test_split to one of {', '.join(sorted(splits))}, or eval_strategy: no",
                 {"splits": sorted(splits), "dataset_test_split": split})


def dataset_splits(ctx) -> set[str] | None:
    """The split names of the config's dataset where they can be read here (a local file: one, `train`; a saved
    DatasetDict: its dataset_dict.json; a folder of data files: the splits `datasets` makes of it, from the files'
    names or its README's configs, as TRL's scripts' load_dataset(folder) does); None otherwise (a hub dataset, read
    offline only by name). A folder of one jsonl is one `train` split: `trl grpo` with eval_strategy stopped there
    with KeyError: 'test' where the doctor had passed it."""
    cfg = ctx.config
    if getattr(cfg, "dataset_file", None) is not None:
        return {"train"}
    folder = getattr(cfg, "dataset_dir", None)
    if folder is None:
        return None
    import json

    index = Path(folder) / "dataset_dict.json"
    if index.is_file():
        try:
            return set(json.loads(index.read_text(encoding="utf-8")).get("splits") or ())
        except (OSError, ValueError, AttributeError):
            return None
    if (Path(folder) / "dataset_info.json").is_file():  # a saved Dataset: the script's load_from_disk gives no splits
        return None
    try:
        from datasets import load_dataset_builder

        files = load_dataset_builder(str(folder), cfg.get("dataset_config")).config.data_files
    except Exception:  # what datasets cannot read here says nothing about its splits
        return None
    return {str(k) for k in files} if files else None


def best_model(ctx) -> Phase | None:
    """The metric to keep the best model by, as transformers' Trainer and the installed TRL trainer's logs take it."""
    load_best = bool(_value(ctx, "load_best_model_at_end", False))
    best_saves = _text(_value(ctx, "save_strategy", "steps")) == "best"
    metric = _value(ctx, "metric_for_best_model")
    if not (load_best or best_saves):
        return None
    why = "load_best_model_at_end" if load_best else "save_strategy: best"
    if metric is None:
        return Phase("best model", "fail", f"{why} without metric_for_best_model: transformers' Trainer refuses it "
                     "when it is constructed", "set metric_for_best_model (eval_reward for GRPO and RLOO)")
    name = metric if str(metric).startswith("eval_") else f"eval_{metric}"
    if ctx.trainer in RL_TRAINERS and name == "eval_loss":
        return Phase("best model", "warn", f"{why} on {metric}: an RL trainer's loss is no quality signal (GRPO's is "
                     "about beta x KL, near 0 whatever the rewards), so the run keeps the checkpoint of lowest loss, "
                     "not of best reward", "set metric_for_best_model: eval_reward and greater_is_better: true",
                     {"metric_for_best_model": metric})
    from trl_doctor.facts.trl.logged import eval_metrics, logs

    try:
        patterns = eval_metrics(ctx)
    except Unavailable:
        return None
    if logs(patterns, name):
        return None
    from difflib import get_close_matches

    known = sorted("eval_" + p.pattern.strip("^$").replace("\\", "").replace("[^/]+", "<f>") for p in patterns)
    close = get_close_matches(name, known, n=1)
    return Phase("best model", "fail", f"metric_for_best_model {metric} ({name}) is not a metric the installed "
                 f"trainer logs in an evaluation: the first evaluation stops with KeyError, hours in"
                 + (f" (did you mean {close[0]}?)" if close else ""),
                 f"set metric_for_best_model to one the trainer logs ({close[0] if close else 'eval_reward'})",
                 {"metric_for_best_model": metric, "logged (eval_*)": known[:24]})


def report_to(ctx, keep_all: bool = False) -> list[str]:
    """The trackers the job will start: the config's report_to, or for a launch the trackers its script asked for
    (the capture turns them off in what the trainer is given: trl_doctor.capture.machine.relax_trackers). "all"
    (every tracker installed where the job runs) is left out, or kept as it is with `keep_all`."""
    live = getattr(ctx, "live", None)
    asked = (getattr(live, "machine_relaxed", None) or {}).get("report_to") if live is not None else None
    value = asked[0] if asked else _value(ctx, "report_to")
    names = [value] if isinstance(value, str) else list(value or [])
    dropped = ("none", "") if keep_all else ("none", "all", "")
    return [_text(n) for n in names if _text(n) not in dropped]


def credentials_elsewhere(ctx) -> str | None:
    """Why the trackers' and the hub's credentials and packages are not judged here (None: they are): they are the
    launch machine's, and this is not it (no GPU here, or --target names another environment)."""
    the_launch = launch(ctx)
    if the_launch.software_here:
        return None
    asked = report_to(ctx) + (["push_to_hub"] if _value(ctx, "push_to_hub") is True else [])
    return f"{', '.join(asked)}: the launch machine's credentials and packages, not judged here ({the_launch.not_judged})" \
        if asked else None


def trackers(ctx) -> list[Phase]:
    """report_to trackers without credentials on the launch machine (judged where the launch's environment is this
    one: credentials_elsewhere)."""
    names = report_to(ctx) if launch(ctx).software_here else []
    out = []
    for name in names:
        check = _CREDENTIALS.get(name)
        if check is not None and (problem := check()):
            out.append(Phase("trackers", "fail", f"report_to {name}: {problem}", _FIXES[name], {"report_to": name}))
    return out


def trackers_missing(ctx) -> list[Phase]:
    """report_to trackers not installed in the launch's Python: transformers' Trainer makes each tracker's callback
    when it is constructed, and a callback whose package is missing raises there, after the model has loaded
    (its words, asked of the callback itself). Judged only where the launch's environment is this one."""
    names = report_to(ctx)
    if not names or not launch(ctx).software_here:
        return []
    try:
        from transformers.integrations import integration_utils as integrations
    except Exception:  # a transformers without them: nothing to ask
        return []
    known = getattr(integrations, "INTEGRATION_TO_CALLBACK", {})
    available = set(integrations.get_available_reporting_integrations())
    out = []
    for name in names:
        if name in available or name not in known:  # an unknown name is trainer-config's to judge
            continue
        words = _callback_refusal(known[name])
        if words is None:
            continue
        out.append(Phase("trackers", "fail", f"report_to {name}: not installed in this Python; the trainer stops when "
                         f"it is constructed, after the model has loaded: \"{words}\"",
                         f"install it in the launch's environment, or take {name} out of report_to",
                         {"report_to": name, "installed trackers": sorted(available)}))
    return out


def _callback_refusal(callback) -> str | None:
    """What a tracker callback says when made without its package (it raises before doing anything), or None."""
    try:
        callback()
    except Exception as exc:
        return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return None


_TRUE = ("1", "true", "yes", "on")


def hub(ctx) -> Phase | None:
    """push_to_hub: transformers' Trainer creates the job's hub repository when it is constructed (`init_hf_repo`,
    on the main process), before any step: a token must be at hand (hub_token, HF_TOKEN, the token file `hf auth
    login` writes) and the hub not switched off. Read without contacting anyone."""
    if _value(ctx, "push_to_hub") is not True or not launch(ctx).software_here:
        return None
    if user_env("HF_HUB_OFFLINE").lower() in _TRUE:
        return Phase("hub", "fail", "push_to_hub with HF_HUB_OFFLINE=1: the trainer creates its hub repository when "
                     "it is constructed and stops there, after the model has loaded (OfflineModeIsEnabled: \"Cannot "
                     "reach https://huggingface.co/api/repos/create: offline mode is enabled\")",
                     "unset HF_HUB_OFFLINE for the job, or set push_to_hub: false", {"push_to_hub": True})
    if _value(ctx, "hub_token") or _hub_token():
        return None
    return Phase("hub", "fail", "push_to_hub with no Hugging Face token here (no hub_token, HF_TOKEN unset, no token "
                 "file from `hf auth login`): creating the hub repository when the trainer is constructed stops the "
                 "job (401 Unauthorized), after the model has loaded",
                 "`hf auth login` (or export HF_TOKEN) on the launch machine, or set push_to_hub: false",
                 {"push_to_hub": True})


def _hub_token() -> bool:
    """Whether huggingface_hub finds a token here (the environment, then its token file); no request is made."""
    try:
        from huggingface_hub import get_token
    except Exception:
        return bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    try:
        return bool(get_token())
    except Exception:
        return False


def user_env(key: str) -> str:
    """A tracker's setting as the user had it: the doctor's worker disables the trackers for itself
    (runtime.quiet.quiet, which records the user's values first)."""
    import json

    from trl_doctor.runtime.quiet import USER_TRACKER_ENV

    recorded = os.environ.get(USER_TRACKER_ENV)
    if recorded is not None:
        try:
            values = json.loads(recorded)
        except ValueError:
            values = {}
        if key in values:
            return values[key] or ""
    return os.environ.get(key, "")


def _wandb() -> str | None:
    mode = user_env("WANDB_MODE").lower()
    if mode in ("offline", "disabled", "dryrun") or user_env("WANDB_DISABLED").lower() in ("1", "true"):
        return None
    if os.environ.get("WANDB_API_KEY"):
        return None
    netrc = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        if "api.wandb.ai" in netrc.read_text(errors="replace") or "wandb" in netrc.read_text(errors="replace"):
            return None
    except OSError:
        pass
    if os.environ.get("WANDB_BASE_URL"):  # a self-hosted server: its own credentials, not read here
        return None
    return ("no wandb API key here (WANDB_API_KEY unset, none in ~/.netrc) and WANDB_MODE is not offline: "
            "wandb.init stops train() after the model has loaded (\"api_key not configured (no-tty)\")")


def _comet() -> str | None:
    if os.environ.get("COMET_API_KEY") or os.environ.get("COMET_MODE", "").lower() in ("offline", "disabled"):
        return None
    if (Path.home() / ".comet.config").is_file():
        return None
    return "no Comet API key here (COMET_API_KEY unset, no ~/.comet.config) and COMET_MODE is not offline"


def _neptune() -> str | None:
    if os.environ.get("NEPTUNE_API_TOKEN") or os.environ.get("NEPTUNE_MODE", "").lower() in ("offline", "debug"):
        return None
    return "no Neptune API token here (NEPTUNE_API_TOKEN unset) and NEPTUNE_MODE is not offline"


_CREDENTIALS = {"wandb": _wandb, "comet_ml": _comet, "neptune": _neptune}
_FIXES = {"wandb": "export WANDB_API_KEY (or `wandb login`), or WANDB_MODE=offline",
          "comet_ml": "export COMET_API_KEY, or COMET_MODE=offline",
          "neptune": "export NEPTUNE_API_TOKEN, or NEPTUNE_MODE=offline"}


def disk(ctx, checkpoint_bytes: int | None) -> Phase | None:
    if checkpoint_bytes is None or _text(_value(ctx, "save_strategy", "steps")) == "no":
        return None
    output_dir = Path(str(_value(ctx, "output_dir") or "."))
    if not _here(output_dir):
        return None
    folder = output_dir if output_dir.is_absolute() else launch_dir(ctx) / output_dir
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None:
        return None
    free = _hold.disk_usage(existing).free  # a held folder's own disk, not its overlay's (runtime/hold.py)
    details = {"output_dir": str(folder), "free": _gib(free), "first checkpoint": _gib(checkpoint_bytes)}
    if free < checkpoint_bytes:
        return Phase("checkpoint", "fail", f"the first checkpoint needs about {_gib(checkpoint_bytes)} and {existing} "
                     f"has {_gib(free)} free: the first save stops the job after save_steps of training",
                     "free space there, point output_dir at a larger disk, or set save_only_model: true", details)
    if free < 1.1 * checkpoint_bytes:
        return Phase("checkpoint", "warn", f"the first checkpoint needs about {_gib(checkpoint_bytes)} and {existing} "
                     f"has {_gib(free)} free: a second one will not fit", "free space, or set save_total_limit",
                     details)
    return None


def checkpoint_bytes(ctx) -> int | None:
    """What the first checkpoint writes: the trained weights in their dtype (the whole policy, or the adapter) and,
    unless save_only_model, the optimizer's states for them (model-size estimates: facts.memory)."""
    from trl_doctor.facts.memory.estimate import optimizer_state_bytes
    from trl_doctor.facts.memory.plan import plan_from_context

    try:
        plan = plan_from_context(ctx)
    except Unavailable:
        return None
    except (ValueError, TypeError, OverflowError):  # a size the plan cannot use (.nan): trainer-config reports it
        return None
    trained = plan.peft_params or plan.policy_params
    weights = plan.peft_params * 4.0 if plan.peft_params else plan.policy_params * plan.param_bytes
    weights += plan.value_params * plan.param_bytes
    total = weights
    if not _value(ctx, "save_only_model", False):
        per, _ = optimizer_state_bytes(plan.optimizer, 4.0 if plan.peft_params else plan.param_bytes)
        total += per * (trained + plan.value_params)
    return int(total)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
