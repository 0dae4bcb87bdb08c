"""The watch from the outside (`trl-doctor watch PATH`, issue 33): the log formats a job leaves, the metric names of
each release, the healthy patterns never flagged, the thresholds the project config sets, the sparklines, the
picture, --follow on a growing log, and bad input as one line (exit 2).

The logs are the real runs of fixtures/_watch_runs.py (TRL itself on the CPU, committed under fixtures/<slug>/) and
rows in the shapes the releases print (transformers 5's quoted numbers, trl <= 0.16's names)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, run_doctor

pytestmark = pytest.mark.release_free  # the watch reads files: no installed release changes what it says

ZERO = FIXTURES / "zero-advantage" / "bad_grpo_constant_reward.json"
HEALTHY = FIXTURES / "zero-advantage" / "ok_grpo_healthy.json"
ROW = {"loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": 0.5, "reward_std": 0.3,
       "frac_reward_zero_std": 0.25, "completions/clipped_ratio": 0.1, "kl": 0.2, "epoch": 0.1}


def watch_json(*args: str) -> tuple[int, dict, str]:
    proc = run_doctor("watch", *args, "--format", "json")
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, {r["rule"]: r for r in report.get("results", [])}, proc.stderr


def printed(rows: list[dict], quoted: bool = False) -> str:
    """Rows as transformers prints them (transformers 5 quotes its rounded numbers)."""
    shown = [{k: (f"{v:.4g}" if quoted and isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    return "".join(f"{r}\n" for r in shown)


def state_file(tmp_path: Path, rows: list[dict], **more) -> Path:
    path = tmp_path / "trainer_state.json"
    every = more.get("logging_steps", 1)  # a job logging every N steps logs at steps N, 2N, ...
    path.write_text(json.dumps({"log_history": [dict(r, step=(i + 1) * every) for i, r in enumerate(rows)], **more}))
    return path


def test_a_real_constant_reward_run_fails_from_its_first_step():
    code, results, _ = watch_json(str(ZERO))
    assert code == 1
    zero = results["zero-advantage"]
    assert zero["status"] == "fail" and zero["details"]["since"] == "step 1", zero
    assert results["policy-gradient-gone"]["status"] == "fail"
    assert results["learning-rate-zero"]["status"] == "pass"


def test_the_same_run_made_healthy_passes_every_rule():
    code, results, _ = watch_json(str(HEALTHY))
    assert code == 0, results
    assert {r["status"] for r in results.values()} <= {"pass", "skip"}, {k: r["message"] for k, r in results.items()
                                                                          if r["status"] not in ("pass", "skip")}
    # GRPO's loss is about beta x kl and clip_ratio 0 with one update per batch: healthy, never flagged
    assert results["policy-gradient-gone"]["status"] == "pass"
    assert results["ratio-clipping"]["status"] == "pass"


def test_an_output_folder_a_checkpoint_and_the_state_file_read_the_same(tmp_path):
    for where in ("run/checkpoint-4", "run/checkpoint-8"):
        (tmp_path / where).mkdir(parents=True)
    state = json.loads(ZERO.read_text())
    short = dict(state, log_history=state["log_history"][:3])
    (tmp_path / "run/checkpoint-4/trainer_state.json").write_text(json.dumps(short))
    (tmp_path / "run/checkpoint-8/trainer_state.json").write_text(json.dumps(state))
    _, folder, _ = watch_json(str(tmp_path / "run"))  # the newest checkpoint's state
    _, checkpoint, _ = watch_json(str(tmp_path / "run/checkpoint-8"))
    _, file, _ = watch_json(str(ZERO))
    assert folder["zero-advantage"]["message"] == checkpoint["zero-advantage"]["message"] == file["zero-advantage"]["message"]
    _, early, _ = watch_json(str(tmp_path / "run/checkpoint-4"))
    # 3 logs with no spread: not yet the 5 needed for a fail, and not a pass either (issue 43); with loss 0 and
    # grad_norm 0 at each (this run has no KL term) every signal agrees those steps changed nothing: a warn (issue 61)
    assert early["zero-advantage"]["status"] == "warn", early["zero-advantage"]
    assert "every signal agrees" in early["zero-advantage"]["message"]
    shortest = dict(state, log_history=[dict(r, grad_norm=0.02) for r in state["log_history"][:3]])
    (tmp_path / "run/checkpoint-4/trainer_state.json").write_text(json.dumps(shortest))
    _, early, _ = watch_json(str(tmp_path / "run/checkpoint-4"))  # a gradient left (a KL term): too little evidence
    assert early["zero-advantage"]["status"] == "skip", early["zero-advantage"]
    assert "too little evidence yet, 5 logs in a row are needed" in early["zero-advantage"]["message"]


def test_printed_lines_as_transformers_prints_them(tmp_path):
    rows = [dict(ROW, frac_reward_zero_std=1.0, reward_std=0.0) for _ in range(6)]
    log = tmp_path / "train.log"
    # a progress bar on the same line, numbers quoted (transformers 5), a warning between
    log.write_text("Map: 100%|####| 8/8\n" + "".join(f" 40%|####      | 4/10 [00:04<00:06]{line}"
                                                   for line in printed(rows, quoted=True).splitlines(keepends=True))
                   + "UserWarning: something\n")
    code, results, _ = watch_json(str(log))
    assert code == 1
    assert results["zero-advantage"]["details"]["since"] == "log 1"  # a printed log carries no step


def test_nan_as_python_prints_it_is_read_and_failed(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(printed([ROW, ROW]) + "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-06, 'kl': inf, 'epoch': 0.3}\n")
    code, results, _ = watch_json(str(log))
    assert code == 1
    assert results["non-finite"]["status"] == "fail" and "loss is nan at log 3" in results["non-finite"]["message"]


def test_one_inf_grad_norm_in_fp16_is_a_skipped_step_not_a_failure(tmp_path):
    rows = [ROW] * 3 + [dict(ROW, grad_norm=float("inf"))] + [ROW] * 3
    log = tmp_path / "train.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))  # JSON writes inf as Infinity
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("fp16: true\n")
    code, results, _ = watch_json(str(log), "--config", str(recipe))
    assert code == 0 and "loss scaler" in results["non-finite"]["message"]
    recipe.write_text("bf16: true\n")  # no loss scaler in bf16: the optimizer applies it
    code, results, _ = watch_json(str(log), "--config", str(recipe))
    assert code == 1 and "in bf16" in results["non-finite"]["message"]


def test_old_release_names_are_read_as_today_s(tmp_path):
    """trl 0.15 logs completion_length and rewards/<f>, and reward_std is the mean of the groups' spreads."""
    old = [{"loss": 0.0, "grad_norm": 0.0, "learning_rate": 1e-6, "completion_length": 256.0,
            "rewards/accuracy_reward": 0.0, "rewards/format_reward": 0.0, "reward": 0.0, "reward_std": 0.0,
            "kl": 0.0, "epoch": 0.01 * i} for i in range(6)]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("max_completion_length: 256\nbeta: 0.04\n")
    code, results, _ = watch_json(str(state_file(tmp_path, old)), "--config", str(recipe))
    assert code == 1
    assert "reward_std 0" in results["zero-advantage"]["message"]
    assert "256 tokens long" in results["never-terminating"]["message"]
    # without the recipe, a mean pinned at one whole number, the most it reaches, is the limit itself (issue 61)
    _, results, _ = watch_json(str(state_file(tmp_path, old)))
    assert results["never-terminating"]["status"] == "fail", results["never-terminating"]
    assert "exactly 256 at 6 of 6 logs" in results["never-terminating"]["message"]
    # a mean that moves says nothing of the limit: a skip that says what to give
    moving = [dict(r, completion_length=200.0 + 7.25 * i) for i, r in enumerate(old)]
    _, results, _ = watch_json(str(state_file(tmp_path, moving)))
    assert results["never-terminating"]["status"] == "skip" and "--config" in results["never-terminating"]["message"]


def test_per_function_std_alone_is_not_the_group_spread(tmp_path):
    rows = [{"loss": 0.1, "grad_norm": 0.4, "learning_rate": 1e-6, "rewards/f/std": 0.0, "epoch": 0.1}] * 6
    code, results, _ = watch_json(str(state_file(tmp_path, rows)))
    assert results["zero-advantage"]["status"] == "skip", results["zero-advantage"]


def test_lr_zero_at_the_schedule_s_last_step_is_healthy(tmp_path):
    rows = [dict(ROW, learning_rate=1e-6 * (4 - i) / 4) for i in range(5)]  # linear decay: 0 at the last step
    code, results, _ = watch_json(str(state_file(tmp_path, rows, max_steps=5)))
    assert results["learning-rate-zero"]["status"] == "pass"
    rows = [dict(ROW, learning_rate=0.0)] * 5
    code, results, _ = watch_json(str(state_file(tmp_path, rows, max_steps=100)))
    assert code == 1 and results["learning-rate-zero"]["details"]["since"] == "step 1"


def test_the_project_config_changes_a_threshold(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(ZERO.read_text())
    (tmp_path / ".trl-doctor.toml").write_text("[watch.zero-advantage]\npatience = 20\n")
    code, results, _ = watch_json(str(folder))
    # 8 logs: not the 20 needed for a fail; loss and grad_norm 0 at each (no KL term): a warn that every signal agrees
    assert results["zero-advantage"]["status"] == "warn", results["zero-advantage"]
    assert "every signal agrees" in results["zero-advantage"]["message"]
    code, results, _ = watch_json(str(folder), "--isolated")
    assert results["zero-advantage"]["status"] == "fail"
    (tmp_path / ".trl-doctor.toml").write_text("[watch]\nzero-advantage = 3\n")
    proc = run_doctor("watch", str(folder))
    assert proc.returncode == 2 and "must be a table of numbers" in proc.stderr


def test_the_table_draws_sparklines_with_the_flagged_logs_marked():
    proc = run_doctor("watch", str(ZERO))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("frac_reward_zero_std"))
    assert any(c in lines[at] for c in "▁█")
    assert "^" in lines[at + 1] and "TW001 fail" in lines[at + 1]


def test_plot_writes_an_svg_with_the_verdicts(tmp_path):
    """Issue 43, item 4: a step axis under each panel, every warn and fail on the picture (its metric's panel, or
    listed at the top), marks at the flagged steps."""
    from xml.dom.minidom import parseString

    picture = tmp_path / "curves.svg"
    proc = run_doctor("watch", str(ZERO), "--plot", str(picture))
    assert proc.returncode == 1
    svg = picture.read_text()
    parseString(svg)
    assert svg.startswith("<svg") and "TW001 zero-advantage fail" in svg and "#c0392b" in svg
    assert ">step 1<" in svg and "<circle" in svg
    failed = {r["id"] for r in json.loads(run_doctor("watch", str(ZERO), "--format", "json").stdout)["results"]
              if r["status"] in ("warn", "fail")}
    assert failed and all(f"{i} " in svg for i in failed), failed
    bad = run_doctor("watch", str(ZERO), "--plot", str(tmp_path / "curves.png"))
    assert bad.returncode == 2 and "SVG" in bad.stderr


@pytest.mark.parametrize("columns", ["80", "60", "132"])
def test_the_sparklines_fit_the_terminal(columns):
    """Issue 43, item 4: every sparkline line fits COLUMNS (80 when unset), long metric names shortened."""
    log = FIXTURES / "watch" / "public" / "vlm-grpo-entropy-collapse-format-dropped.log"
    proc = run_doctor("watch", str(log), env={"COLUMNS": columns})
    coda = proc.stdout[proc.stdout.index("\nmetrics over"):].splitlines()
    assert len(coda) > 10 and max(len(line) for line in coda) <= int(columns), coda
    assert any("rewards/mc_idx_reward/mean" in line for line in coda) or columns == "60"


@pytest.mark.parametrize("content, words", [
    ("", "no logged metrics found"),
    ("just some text\nno dicts here\n", "no logged metrics found"),
    ('{"log_history": 5}', "no log_history list"),
    ('{"log_history": [', "not valid JSON"),
    ('{"log_history": []}', "holds no training log yet"),
    ("{'loss': __import__('os').system('touch /tmp/pwned')}\n", "no logged metrics found"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, content, words):
    path = tmp_path / ("trainer_state.json" if content.startswith('{"') else "train.log")
    path.write_text(content)
    proc = run_doctor("watch", str(path))
    assert proc.returncode == 2, proc.stdout
    assert words in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not Path("/tmp/pwned").exists()


def test_a_folder_without_a_log_and_a_missing_path(tmp_path):
    proc = run_doctor("watch", str(tmp_path))
    assert proc.returncode == 2 and "no trainer_state.json in this folder" in proc.stderr
    proc = run_doctor("watch", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_follow_reads_a_growing_log_and_stops_at_the_failure(tmp_path):
    from trl_doctor.watch.judge import watch_rules
    from trl_doctor.watch.run import Watch, follow

    log = tmp_path / "train.log"
    log.write_text("")
    zero = dict(ROW, frac_reward_zero_std=1.0, reward_std=0.0)

    def job():
        for row in [ROW, ROW] + [zero] * 6:
            time.sleep(0.05)
            with open(log, "a") as f:
                f.write(printed([row]))

    writer = threading.Thread(target=job)
    writer.start()
    shown: list[str] = []
    report, history = follow(Watch(log), watch_rules(), shown.append, interval=0.02, idle_exit=10)
    writer.join()
    assert not report.ok
    assert any("TW001 zero-advantage fail" in line and "log 7" in line for line in shown), shown
    assert len(history.logs) == 7  # stopped at the log the failure was decided at


def test_follow_names_the_log_a_failure_was_decided_at_when_several_arrive_at_once(tmp_path):
    """A tracker that writes in batches (trackio every 0.5 s), or a follower that looks late on a loaded machine, gets
    several logs at one look: each is judged as the history stood at it, so the finding names the log where it was
    first decided (log 7 here: five logs without spread), not the newest of the batch (log 10), and the follower
    stops there."""
    from trl_doctor.watch.judge import watch_rules
    from trl_doctor.watch.run import Watch, follow

    log = tmp_path / "train.log"
    zero = dict(ROW, frac_reward_zero_std=1.0, reward_std=0.0)
    log.write_text(printed([ROW, ROW]))
    looks = iter(range(10**6))

    def sleep(_):
        if next(looks) == 0:  # the follower's second look finds eight new logs at once
            with open(log, "a") as f:
                f.write(printed([zero] * 8))

    shown: list[str] = []
    report, history = follow(Watch(log), watch_rules(), shown.append, sleep=sleep, idle_exit=60)
    failed = [line for line in shown if "TW001 zero-advantage fail" in line]
    assert not report.ok and failed and failed[0].startswith("log 7:"), shown
    assert len(history.logs) == 7


def test_follow_ends_with_the_job_s_summary(tmp_path):
    from trl_doctor.watch.judge import watch_rules
    from trl_doctor.watch.run import Watch, follow

    log = tmp_path / "train.log"
    log.write_text(printed([ROW] * 4) + "{'train_runtime': 12.5, 'train_loss': 0.01, 'epoch': 1.0}\n")
    report, history = follow(Watch(log), watch_rules(), print, interval=0.02, idle_exit=5)
    assert report.ok and history.ended and len(history.logs) == 4


def test_watch_rules_are_not_preflight_rules():
    """`check` runs no watch rule, and a project config naming one stays valid for `check`."""
    from trl_doctor.registry import all_rules

    rules = {r.id: r for r in all_rules()}
    assert rules["TW001"].contexts == ("watch",) and rules["TD001"].contexts == ("full", "static")
    proc = run_doctor("check", "--static", str(FIXTURES / "trainer-config" / "ok_grpo.yaml"), "--format", "json")
    ids = {r["id"] for r in json.loads(proc.stdout)["results"]}
    assert ids and not any(i.startswith("TW") for i in ids)


def test_the_watch_context_is_the_declared_interface_and_reads_the_job_s_settings():
    """The watch's context implements trl_doctor.interface.CheckContext as the full and static contexts do, and
    config_value reads the job's own settings there (else the default)."""
    from trl_doctor.facts.launch.settings import config_value
    from trl_doctor.interface import CheckContext
    from trl_doctor.watch.context import WatchContext
    from trl_doctor.watch.history import read

    ctx = WatchContext(read(FIXTURES / "zero-advantage" / "ok_grpo_healthy.json"), None, {"beta": 0.0})
    assert isinstance(ctx, CheckContext) and ctx.kind == "watch" and ctx.trainer == "grpo"
    assert config_value(ctx, "beta") == 0.0 and config_value(ctx, "max_completion_length", 7) == 7


def test_follow_on_an_output_folder_moves_to_each_new_checkpoint(tmp_path):
    from trl_doctor.watch.judge import watch_rules
    from trl_doctor.watch.run import Watch, follow

    state = json.loads(ZERO.read_text())
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps(dict(state, log_history=state["log_history"][:2])))

    def job():  # the job saves a later checkpoint while the watch reads the first
        time.sleep(0.3)
        (tmp_path / "checkpoint-8").mkdir()
        (tmp_path / "checkpoint-8" / "trainer_state.json").write_text(json.dumps(state))

    writer = threading.Thread(target=job)
    writer.start()
    report, history = follow(Watch(tmp_path), watch_rules(), lambda line: None, interval=0.05, idle_exit=5)
    writer.join()
    assert not report.ok and history.source.parent.name == "checkpoint-8"


def test_a_job_s_watch_judges_a_bounded_view_of_a_long_run(tmp_path):
    """The callback judges the run's first logs and its newest 1,000, so its cost does not grow with the run; a
    failure that starts late is still flagged from where it starts."""
    from types import SimpleNamespace as NS

    from trl_doctor.watch.job import Watcher

    watcher = Watcher(on_fail="warn")
    args = NS(output_dir=str(tmp_path), beta=0.0)
    watcher.begin(args, None)
    state, control = NS(global_step=0, is_world_process_zero=True), NS(should_save=False, should_training_stop=False)
    for step in range(1, 3001):
        row = dict(ROW, frac_reward_zero_std=1.0 if step > 2990 else 0.2)
        if step <= 2980:
            watcher.history.add(row, step=step)  # the run so far, as judged before
        else:
            state.global_step = step
            watcher.on_log(args, state, control, row)
    zero = next(r for r in watcher.report.results if r.id == "TW001")
    assert zero.status.value == "fail" and zero.details["since"] == "step 2991", zero


def test_completions_mostly_cut_at_the_limit_for_100_steps_is_a_warn(tmp_path):
    """Issue 43's "mostly never terminating": 96% of completions cut for 120 steps, never 5 logs in a row at 0.99
    (two logs of 90% in every five), passed before; the windowed share is a warn. Half of them cut is not."""
    shares = [1.0, 1.0, 1.0, 0.9, 0.9] * 24
    rows = [dict(ROW, **{"completions/clipped_ratio": s}) for s in shares]
    code, results, _ = watch_json(str(state_file(tmp_path, rows, logging_steps=1)))
    found = results["never-terminating"]
    assert found["status"] == "warn", found
    # 120 logs: the 100-step window is wider than a quarter of the log, which is judged instead (issue 61)
    assert found["message"].startswith("completions/clipped_ratio averaged 0.96 from step 1 to step 30 (30 logs)")
    rows = [dict(ROW, **{"completions/clipped_ratio": s / 2}) for s in shares]
    code, results, _ = watch_json(str(state_file(tmp_path, rows, logging_steps=1)))
    assert results["never-terminating"]["status"] == "pass", results["never-terminating"]
    # at logging_steps 10, 100 steps are 10 logs (none two in a row at 0.99: no streak of 20 steps)
    rows = [dict(ROW, **{"completions/clipped_ratio": s}) for s in [1.0, 0.93] * 6]
    path = state_file(tmp_path, rows, logging_steps=10)
    code, results, _ = watch_json(str(path))
    assert results["never-terminating"]["status"] == "warn" and "(3 logs)" in results["never-terminating"]["message"]


def test_no_update_is_flagged_while_about_half_the_groups_still_have_spread(tmp_path):
    """Issue 43: grad_norm 0 while about half the groups' rewards differed (frac_reward_zero_std 0.5) was missed: the
    rule asked for most groups with spread. A quarter of them is enough for a gradient."""
    rows = [dict(ROW, grad_norm=0.0, frac_reward_zero_std=0.5) for _ in range(4)]
    code, results, _ = watch_json(str(state_file(tmp_path, rows, logging_steps=1)))
    assert code == 1 and results["no-update"]["status"] == "fail", results["no-update"]
    rows = [dict(ROW, grad_norm=0.0, frac_reward_zero_std=0.9) for _ in range(4)]  # nearly no spread: not this rule's
    code, results, _ = watch_json(str(state_file(tmp_path, rows, logging_steps=1)))
    assert results["no-update"]["status"] == "pass", results["no-update"]


def test_follow_lines_fit_the_terminal(tmp_path):
    """Issue 43, item 4: each line --follow prints fits COLUMNS (80 when unset), continuation lines indented."""
    rows = [dict(ROW, frac_reward_zero_std=1.0, reward_std=0.0) for _ in range(6)]
    log = tmp_path / "train.log"
    log.write_text(printed(rows) + "{'train_runtime': 1.0, 'train_loss': 0.0, 'epoch': 1.0}\n")
    for columns in ("80", "60"):
        proc = run_doctor("watch", str(log), "--follow", "--interval", "0.05", "--format", "json",
                          env={"COLUMNS": columns})
        lines = proc.stderr.splitlines()
        # read at once, each log judged as the history stood at it: decided at the fifth log without spread
        assert lines and lines[0].startswith("log 5: TW001 zero-advantage fail"), proc.stderr
        assert all(len(line) <= int(columns) for line in lines), proc.stderr
        assert all(line.startswith(("log ", "    ")) for line in lines), proc.stderr


def test_the_watch_lists_the_settings_in_force_as_check_does(tmp_path):
    """Issue 43, item 5: what narrows or silences the watch is in its report, with where it comes from."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(ZERO.read_text())
    (tmp_path / ".trl-doctor.toml").write_text('ignore = ["grad-spike"]\nfail-on = "warn"\n')
    proc = run_doctor("watch", str(folder), "--format", "json", "--select", "TW001,TW008,TW009")
    settings = json.loads(proc.stdout)["settings"]
    source = str(tmp_path / ".trl-doctor.toml")
    assert {"setting": "select", "rules": ["TW001", "TW008", "TW009"], "source": "command line"} in settings
    assert {"setting": "ignore", "rules": ["grad-spike"], "source": source} in settings
    assert {"setting": "fail-on", "value": "warn", "source": source} in settings
    table = run_doctor("watch", str(folder), "--isolated")
    assert "setting in force: isolated" in table.stdout


def test_the_watch_takes_the_project_config_through_checks_own_request(tmp_path):
    """Issue 43, item 5: `trl-doctor watch` resolves its settings as `check` does (trl_doctor.front.settings): the
    project's target gives a finding's cost in GPU-hours, and a project `select` of preflight rules alone does not
    narrow the watch."""
    rows = [dict(ROW, frac_reward_zero_std=1.0, reward_std=0.0, step_time=36.0) for _ in range(6)]
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({
        "log_history": [dict(r, step=10 * (i + 1)) for i, r in enumerate(rows)], "max_steps": 500,
        "logging_steps": 10}))
    (tmp_path / "pyproject.toml").write_text('[tool.trl-doctor]\ntarget = "4xH100-80GB"\nselect = ["TD001"]\n')
    proc = run_doctor("watch", str(folder), "--format", "json")
    report = json.loads(proc.stdout)
    results = {r["rule"]: r for r in report["results"]}
    source = f"{tmp_path / 'pyproject.toml'} [tool.trl-doctor]"
    assert {"setting": "target", "value": "4xH100-80GB", "source": source} in report["settings"]
    assert not [s for s in report["settings"] if s["setting"] == "select"]  # TD001 narrows check, not the watch
    assert len(results) == 13  # every watch rule
    assert "(~36 min, 2.4 GPU-hours on 4 GPUs)" in results["zero-advantage"]["details"]["cost"]
    (tmp_path / "pyproject.toml").write_text('[tool.trl-doctor]\ntarget = "4xNOSUCHGPU"\n')
    proc = run_doctor("watch", str(folder))
    assert proc.returncode == 2 and "NOSUCHGPU" in proc.stderr, proc.stderr


def test_a_finding_says_what_the_failure_cost_and_what_stopping_saves(tmp_path):
    """Issue 43, item 4: steps (and hours, from TRL's logged step_time) lost since the failure began, and the steps
    left of max_steps that stopping now saves."""
    rows = [dict(ROW, frac_reward_zero_std=1.0, reward_std=0.0, step_time=36.0) for _ in range(6)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": [dict(r, step=10 * (i + 1)) for i, r in enumerate(rows)],
                                "max_steps": 500, "logging_steps": 10}))
    code, results, _ = watch_json(str(path))
    cost = results["zero-advantage"]["details"]["cost"]
    assert cost == ("60 optimizer steps so far (the logs from step 10 on) (~36 min); stopping now saves the 440 steps "
                    "left of max_steps 500 (~4.4 h)"), cost


def test_the_cost_is_in_gpu_hours_on_the_jobs_gpus(tmp_path):
    rows = [dict(ROW, frac_reward_zero_std=1.0, reward_std=0.0, step_time=36.0) for _ in range(6)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": [dict(r, step=10 * (i + 1)) for i, r in enumerate(rows)],
                                "max_steps": 500, "logging_steps": 10}))
    code, results, _ = watch_json(str(path), "--target", "8xH100-80GB")
    cost = results["zero-advantage"]["details"]["cost"]
    assert "(~36 min, 4.8 GPU-hours on 8 GPUs)" in cost and "(~4.4 h, 35.2 GPU-hours on 8 GPUs)" in cost, cost
    proc = run_doctor("watch", str(path), "--target", "8xNOSUCHGPU")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
