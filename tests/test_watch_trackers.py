"""Issue 43: where a running job's metrics are. TensorBoard event files written by the tracker's own code
(transformers' TensorBoardCallback, the `report_to: tensorboard` a job runs, over torch's SummaryWriter), read while
they grow, one run of several in a store, files cut mid-record or not TensorBoard's; a bare JSON list of log rows
(`trainer.state.log_history` as people save it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, run_doctor

pytest.importorskip("tensorboard", reason="the TensorBoard reader needs tensorboard (the [watch] extra)")

ROWS = [r for r in json.loads((FIXTURES / "zero-advantage" / "bad_grpo_constant_reward.json").read_text())["log_history"]
        if "loss" in r]


def write_run(output_dir: Path, rows: list[dict], every: int = 10, end: bool = True, max_steps: int = -1) -> Path:
    """A job's TensorBoard events as transformers writes them: TensorBoardCallback.on_log at each logged step."""
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import TensorBoardCallback

    before = set(output_dir.glob("runs/*/events.out.tfevents.*"))
    args = TrainingArguments(output_dir=str(output_dir), report_to=["tensorboard"], logging_steps=every, use_cpu=True,
                             max_steps=max_steps)
    state, control = TrainerState(), TrainerControl()
    callback = TensorBoardCallback()
    callback.on_train_begin(args, state, control)
    for i, row in enumerate(rows):
        state.global_step = (i + 1) * every
        callback.on_log(args, state, control, logs={k: v for k, v in row.items() if k != "step"})
    if end:
        callback.on_log(args, state, control, logs={"train_runtime": 12.5, "train_loss": 0.0, "epoch": 1.0})
        callback.on_train_end(args, state, control)
    (made,) = set(output_dir.glob("runs/*/events.out.tfevents.*")) - before
    return made


def watch_json(path, *args):
    proc = run_doctor("watch", str(path), "--format", "json", *args)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    return proc.returncode, {r["rule"]: r for r in report["results"]}, report


def test_an_output_folder_is_read_from_its_tensorboard_events_before_any_checkpoint(tmp_path):
    events = write_run(tmp_path / "out", ROWS[:3])
    assert not list((tmp_path / "out").glob("checkpoint-*"))
    code, results, report = watch_json(tmp_path / "out")
    assert report["config"] == str(events)
    zero = results["zero-advantage"]
    assert code == 1 and zero["status"] == "fail", zero
    assert zero["details"]["since"] == "step 10" and "from step 10 to step 30 (3 logs)" in zero["message"]


@pytest.mark.parametrize("every", [10, 5000])
def test_the_reader_matches_tensorboards_own(tmp_path, every):
    """Every scalar as tensorboard's own EventAccumulator reads the same file (steps of one varint byte, and of
    two and three: 5000 to 40000), the scalars read by the reader's own fast path (no Event built for them)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trl_doctor.watch import tensorboard
    from trl_doctor.watch.history import History, read

    events = write_run(tmp_path / "out", ROWS, every=every)
    reader = tensorboard.reader(History(events, "tensorboard"), events)
    reader.feed(events.read_bytes())
    assert len(reader._fast) > 10  # the scalars' tags were read from their bytes
    ours = read(events)
    theirs = EventAccumulator(str(events.parent))
    theirs.Reload()
    for tag in theirs.Tags()["scalars"]:
        name = tag.removeprefix("train/")
        if name in ("train_runtime", "train_loss", "epoch") or tag.startswith("eval/"):
            continue
        from trl_doctor.watch.history import canonical

        column = ours.column(canonical(name))
        expected = [(e.step, e.value) for e in theirs.Scalars(tag)]
        assert [(p.step, p.value) for p in column] == expected, tag
    assert ours.ended and ours.steps_per_log() == every


def test_a_growing_file_is_read_on_and_a_torn_record_waits(tmp_path):
    from trl_doctor.watch.history import History
    from trl_doctor.watch.tensorboard import reader

    events = write_run(tmp_path / "out", ROWS[:4])
    data = events.read_bytes()
    history = History(events, "tensorboard")
    events_reader = reader(history, events)
    cut = len(data) // 2 + 3  # mid-record
    events_reader.feed(data[:cut])
    first = len(history.logs)
    assert 0 < first < 4 and events_reader.offset < cut  # the torn record is not consumed
    events_reader.feed(data[cut:])
    assert [log.step for log in history.logs] == [10, 20, 30, 40] and history.ended


def test_of_two_runs_in_one_folder_the_newest_is_judged(tmp_path):
    old = write_run(tmp_path / "out", [dict(r, frac_reward_zero_std=0.0, reward_std=0.5) for r in ROWS[:4]])
    past = time.time() - 3600
    os.utime(old, (past, past))
    time.sleep(1.1)  # transformers names a run folder by the second it started
    new = write_run(tmp_path / "out", ROWS[:4])
    assert old.parent != new.parent
    code, results, report = watch_json(tmp_path / "out")
    assert report["config"] == str(new) and results["zero-advantage"]["status"] == "fail"
    code, results, report = watch_json(old.parent)  # a run named: that run
    assert report["config"] == str(old) and results["zero-advantage"]["status"] == "pass"


def test_the_jobs_own_arguments_are_read_from_its_events(tmp_path):
    """TensorBoardCallback writes the TrainingArguments as text when training begins: a job stopped at step 20 of 40
    with a learning rate of 0 still had steps to go (learning-rate-zero needs max_steps to say so once it ended)."""
    rows = [dict(r, learning_rate=0.0) for r in ROWS[:2]]
    events = write_run(tmp_path / "out", rows, max_steps=40)
    from trl_doctor.watch.history import read

    history = read(events)
    assert history.max_steps == 40 and history.logging_steps == 10 and history.args["max_steps"] == 40
    code, results, _ = watch_json(tmp_path / "out")
    lr = results["learning-rate-zero"]
    assert code == 1 and lr["status"] == "fail" and lr["details"]["since"] == "step 10", lr


def test_a_file_that_is_not_tensorboards_is_one_line(tmp_path):
    run = tmp_path / "out" / "runs" / "x"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host").write_bytes(b"\xff" * 64)
    proc = run_doctor("watch", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not a TensorBoard event file" in proc.stderr.strip().splitlines()[-1]


def test_a_bare_json_list_of_log_rows_is_a_log(tmp_path):
    path = tmp_path / "log_history.json"
    path.write_text(json.dumps(ROWS))
    code, results, _ = watch_json(path)
    assert code == 1 and results["zero-advantage"]["status"] == "fail"
    path.write_text("[]")
    proc = run_doctor("watch", str(path))
    assert proc.returncode == 2 and "without a training log row" in proc.stderr


def test_a_printed_log_takes_its_interval_from_the_recipe(tmp_path):
    """transformers' printed dicts carry no step: with the recipe's logging_steps (TRL's default 10, written out),
    two logs of a constant reward are 20 steps, enough to judge."""
    from test_watch import printed

    rows = [{k: v for k, v in dict(r, frac_reward_zero_std=1.0).items() if k != "step"} for r in ROWS[:2]]
    (tmp_path / "train.log").write_text(printed(rows))  # as transformers prints them: no step
    code, results, _ = watch_json(tmp_path / "train.log")
    # 2 logs of unknown length: too little evidence for a fail (a warn where loss and grad_norm are 0 too)
    assert results["zero-advantage"]["status"] == ("warn" if rows[-1]["grad_norm"] == 0 else "skip"), results
    (tmp_path / "recipe.yaml").write_text("logging_steps: 10\n")
    code, results, _ = watch_json(tmp_path / "train.log", "--config", str(tmp_path / "recipe.yaml"))
    assert code == 1 and results["zero-advantage"]["status"] == "fail", results["zero-advantage"]


def test_a_csv_of_log_rows_as_pandas_writes_it(tmp_path):
    """`pd.DataFrame(trainer.state.log_history).to_csv(path)`, how people save a job's logs: an index column, empty
    cells where a row lacks a metric, the summary row last."""
    import pandas as pd

    rows = json.loads((FIXTURES / "zero-advantage" / "bad_grpo_constant_reward.json").read_text())["log_history"]
    path = tmp_path / "log_history.csv"
    pd.DataFrame(rows).to_csv(path)
    code, results, report = watch_json(path)
    zero = results["zero-advantage"]
    assert code == 1 and zero["status"] == "fail" and zero["details"]["since"] == "step 1", zero
    from trl_doctor.watch.history import read

    history = read(path)
    assert [log.step for log in history.logs] == [r["step"] for r in rows if "loss" in r] and history.ended


def test_a_csv_as_wandb_exports_a_runs_charts(tmp_path):
    """W&B's "Download CSV" of a run's charts: `Step`, then `<run> - <metric>` with its `__MIN` and `__MAX`."""
    import csv

    metrics = ["train/reward", "train/reward_std", "train/frac_reward_zero_std", "train/loss", "train/grad_norm"]
    path = tmp_path / "wandb_export.csv"
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Step"] + [c for m in metrics for c in (f"grpo-1 - {m}", f"grpo-1 - {m}__MIN",
                                                            f"grpo-1 - {m}__MAX")])
        for step in range(10, 90, 10):
            values = {"train/reward": 1.0, "train/reward_std": 0.0, "train/frac_reward_zero_std": 1.0,
                      "train/loss": 0.0, "train/grad_norm": 0.0}
            out.writerow([step] + [v for m in metrics for v in (values[m], -99.0, 99.0)])
    code, results, _ = watch_json(path)
    zero = results["zero-advantage"]
    assert code == 1 and zero["status"] == "fail" and "from step 10 to step 80" in zero["message"], zero
