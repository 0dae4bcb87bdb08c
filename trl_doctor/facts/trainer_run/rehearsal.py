"""The dress rehearsal (issue 60): after the smoke step, the trainer it built runs the job's later phases in
miniature, with the job's own settings for them and the twin's sizes, in the check's own folder:

- evaluation (where the job evaluates: `eval_strategy` not "no"): `trainer.evaluate()` on the step's rows (the eval
  split is the job's; its rows' format is the training rows'); the metrics
  it logs, and `metric_for_best_model` looked up in them as transformers' `_determine_best_metric` does (its KeyError
  is the job's at its first evaluation);
- checkpoint (where the job saves): `trainer._save_checkpoint` with the job's `save_only_model` and
  `save_total_limit`, into the check's folder;
- resume: one more step from that checkpoint (`trainer.train(resume_from_checkpoint=...)`), as a restarted job does;
- final save: `trainer.save_model()`.

Each phase's outcome is data ({"phase", "ok", "s", "error", ...}): a phase that raises is the job's failure at that
phase, in the trainer's own words; the next phases still run where they do not depend on it. Nothing reaches the
user's folders (the trainer's output_dir is the check's), no tracker starts (report_to none), nothing is pushed.
"""

from __future__ import annotations

import os
import time
from typing import Any


def rehearse(trainer: Any, spec: Any) -> list[dict]:
    """The phases the job's settings call for, in the order the job meets them."""
    job = dict(spec.rehearse)
    out: list[dict] = []
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
            trainer.train(resume_from_checkpoint=checkpoint)
        _phase(out, "resume", resume)
    _phase(out, "final save", lambda: trainer.save_model(os.path.join(trainer.args.output_dir, "final")))
    return out


def _phase(out: list[dict], name: str, call) -> Any:
    """Run one phase; its record appended to `out`; its value, or None when it raised."""
    start = time.perf_counter()
    try:
        value = call()
    except Exception as exc:  # the phase's failure is the finding: the trainer's own words
        out.append({"phase": name, "ok": False, "s": round(time.perf_counter() - start, 2),
                    "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"})
        return None
    out.append({"phase": name, "ok": True, "s": round(time.perf_counter() - start, 2)})
    return value if value is not None else True


def _newest_checkpoint(folder: str) -> str | None:
    try:
        found = [n for n in os.listdir(folder) if n.startswith("checkpoint-") and n.split("-")[-1].isdigit()]
    except OSError:
        return None
    return os.path.join(folder, max(found, key=lambda n: int(n.split("-")[-1]))) if found else None
