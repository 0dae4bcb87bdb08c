"""The dress rehearsal (issue 60): after the smoke step, the trainer it built runs the job's later phases in
miniature, with the job's own settings for them and the twin's sizes, in the check's own folder:

- trackers (where the job reports to any): each starts offline as `train()` starts it, with the job's arguments, and
  takes one log of the step's metrics; it stays attached through the later phases, as in the job;
- evaluation (where the job evaluates: `eval_strategy` not "no"): `trainer.evaluate()` on the step's rows (the eval
  split is the job's; its rows' format is the training rows'); the metrics
  it logs, and `metric_for_best_model` looked up in them as transformers' `_determine_best_metric` does (its KeyError
  is the job's at its first evaluation);
- checkpoint (where the job saves): `trainer._save_checkpoint` with the job's `save_only_model` and
  `save_total_limit`, into the check's folder;
- resume: one more step from that checkpoint (`trainer.train(resume_from_checkpoint=...)`), as a restarted job does:
  the optimizer's live states are dropped first, as a restarted process has none (loading the checkpoint's beside
  them held both copies: two sets of AdamW states on the GPU with the real model, more than the job ever holds);
- final save: `trainer.save_model()`;
- push to hub (where the job pushes): `trainer.push_to_hub()` with the Hub offline, up to its first request
  (facts/trainer_run/hub_push.py): the model card and the files it would upload; nothing is sent.

Each phase's outcome is data ({"phase", "ok", "s", "error", "gpu_peak_mb" on a GPU, ...}; "ok" None with a "why" where
the check's own folder ran out of space, which says nothing of the job's): a phase that raises is the job's failure
at that phase, in the trainer's own words; the next phases still run where they do not depend on it. Nothing reaches
the user's folders (the trainer's output_dir is the check's), the job's trackers start offline with their records in
the check's folder (facts/trainer_run/trackers.py), nothing reaches the Hub.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any


def rehearse(trainer: Any, spec: Any) -> list[dict]:
    """The phases the job's settings call for, in the order the job meets them, its trackers started offline first
    (as `train()` starts them) and seeing every later phase."""
    from trl_doctor.facts.rewards import live_reward
    from trl_doctor.facts.trainer_run import trackers

    job = dict(spec.rehearse)
    job_args = live_reward(job["job_args"]) if job.get("job_args") else None
    out: list[dict] = []
    with trackers.offline(trainer, list(job.get("report_to") or []), _folder(trainer, "trackers")) as started:
        if started.names:
            if _phase(out, "trackers", lambda: started.begin_and_log(trainer, job_args)) is None:
                started.detach(trainer)  # the job stops there: the later phases are judged without them
                out[-1]["stopped at"] = started.at
                if "timed out" in str(out[-1].get("error", "")).lower():  # its service did not start here in time:
                    # this machine's, not the job's (wandb's own 30 s init timeout, set for the rehearsal)
                    out[-1].update(ok=None, why=f"not rehearsed: {started.at} did not start on this machine in time "
                                                f"({out[-1].pop('error')[:200]})")
            out[-1]["trackers"] = list(started.names)
        if started.not_started:
            out.append({"phase": "trackers not started", "ok": None, "s": 0.0, "why": "; ".join(
                f"{name}: {why}" for name, why in started.not_started.items())})
        _later_phases(trainer, job, out)
    return out


def _folder(trainer: Any, name: str) -> str:
    return os.path.join(trainer.args.output_dir, name)


def _later_phases(trainer: Any, job: dict, out: list[dict]) -> None:
    metrics: dict | None = None
    if str(job.get("eval_strategy") or "no").lower() not in ("no", "intervalstrategy.no"):
        rows = trainer.eval_dataset if trainer.eval_dataset is not None else trainer.train_dataset
        found = _phase(out, "evaluation", lambda: trainer.evaluate(eval_dataset=rows))
        if found is not None:
            metrics = {k: v for k, v in found.items() if isinstance(v, (int, float))}
            out[-1]["metrics"] = sorted(metrics)
            if job.get("metric_for_best_model"):
                trainer.args.metric_for_best_model = job["metric_for_best_model"]
                trainer.args.greater_is_better = job.get("greater_is_better")
                _phase(out, "best model", lambda: trainer._determine_best_metric(metrics, None))
    checkpoint = None
    if str(job.get("save_strategy") or "steps").lower() not in ("no", "savestrategy.no"):
        trainer.args.save_only_model = bool(job.get("save_only_model"))
        trainer.args.save_total_limit = job.get("save_total_limit")
        if _phase(out, "checkpoint", lambda: trainer._save_checkpoint(trainer.model, None)) is not None:
            checkpoint = _newest_checkpoint(trainer.args.output_dir)
            out[-1]["files"] = sorted(os.listdir(checkpoint))[:20] if checkpoint else []
    if checkpoint is not None:
        def resume() -> None:
            trainer.args.max_steps = trainer.state.global_step + 1
            drop_optimizer_state(trainer)
            trainer.train(resume_from_checkpoint=checkpoint)
        _phase(out, "resume", resume)
    _phase(out, "final save", lambda: trainer.save_model(_folder(trainer, "final")))
    if job.get("push_to_hub") is True:
        from trl_doctor.facts.trainer_run.hub_push import push_up_to_network

        pushed = _phase(out, "push to hub", lambda: push_up_to_network(trainer, job))
        if isinstance(pushed, dict):
            out[-1].update(pushed)


def drop_optimizer_state(trainer: Any) -> None:
    """Empty the optimizer's per-parameter states (AdamW's moments), as a restarted process starts with none, and
    give their memory back: the resume then loads the checkpoint's into the same optimizer, one copy at a time."""
    import gc

    optimizer = getattr(trainer, "optimizer", None)
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps the torch one
    state: Any = getattr(inner, "state", None)
    if state is not None and hasattr(state, "clear"):
        state.clear()
    gc.collect()
    torch = _cuda_torch()
    if torch is not None:
        torch.cuda.empty_cache()


def _cuda_torch():
    """torch, where it is imported and has a GPU (the real model's rehearsal), else None."""
    import sys

    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized() else None


def _phase(out: list[dict], name: str, call) -> Any:
    """Run one phase; its record appended to `out`; its value, or None when it raised."""
    start = time.perf_counter()
    torch = _cuda_torch()
    if torch is not None:
        torch.cuda.reset_peak_memory_stats()
    try:
        value = call()
    except Exception as exc:
        if _disk_full(exc):  # the check's own folder is full (a real model's checkpoint on a small /tmp): the
            # doctor's disk, not the job's, which run-phases judges at output_dir; not rehearsed, and said why
            out.append({"phase": name, "ok": None, "s": round(time.perf_counter() - start, 2),
                        "why": "not rehearsed: the check's own folder ran out of space "
                               f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                               "run-phases judges the job's disk at output_dir"})
        else:  # the phase's failure is the finding: the trainer's own words
            out.append({"phase": name, "ok": False, "s": round(time.perf_counter() - start, 2),
                        "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"})
        value = None
    else:
        out.append({"phase": name, "ok": True, "s": round(time.perf_counter() - start, 2)})
    if torch is not None:  # what the phase took on the GPU, for the doctor's own cost (docs/gpu-verdicts.json)
        out[-1]["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if out[-1]["ok"]:
        return value if value is not None else True
    return None


_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_WORDS = ("No space left on device", "Disk quota exceeded", f"os error {errno.ENOSPC})",
               f"os error {errno.EDQUOT})")


def _disk_full(exc: BaseException) -> bool:
    """A full disk, said as an OSError or in another library's words (safetensors' SafetensorError: "I/O error: No
    space left on device (os error 28)"), anywhere in the exception's chain."""
    from trl_doctor.errors import exception_chain

    return any(isinstance(at, OSError) and at.errno in _FULL or any(w in str(at) for w in _FULL_WORDS)
               for at in exception_chain(exc))


def _newest_checkpoint(folder: str) -> str | None:
    try:
        found = [n for n in os.listdir(folder) if n.startswith("checkpoint-") and n.split("-")[-1].isdigit()]
    except OSError:
        return None
    return os.path.join(folder, max(found, key=lambda n: int(n.split("-")[-1]))) if found else None
