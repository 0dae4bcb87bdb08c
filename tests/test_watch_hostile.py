"""The watch under hostile logs (issue 44): every file it reads is the job's, so anyone's. Through the real command
line, each case of the classes that broke: values no float holds, folder names `int()` refuses, lone surrogates and
escape sequences in metric names (the table's sparklines, --follow's lines, the picture), devices, FIFOs and nesting
given as --config/--preflight, a log rotated or truncated under --follow, a line that never ends. Each is either a
report or one line naming the file (exit 2): never a traceback, never text a terminal or a CI runner acts on."""

from __future__ import annotations

import json
import os
import threading
import time
import xml.dom.minidom
from pathlib import Path

import pytest

from conftest import run_doctor

pytestmark = pytest.mark.release_free  # the watch reads files: no installed release changes what it says

ROW = {"loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": 0.5, "reward_std": 0.3,
       "frac_reward_zero_std": 0.25, "completions/clipped_ratio": 0.1, "kl": 0.2}
# what a reward function's __name__ may hold (`rewards/<name>/mean`): a workflow command after a newline, the older
# command syntax mid-line, a terminal title (OSC) and a colour (CSI), a lone surrogate
EVIL_UP = "fmt\n::error file=x::pwned ##[add-mask]secret \x1b]0;title\x07\x1b[31m\ud800"
EVIL_DOWN = "acc::warning::x\r##[group]g"


def _raw(text: str) -> list[str]:
    """What of `text` a terminal or a CI runner would act on: escape/control characters, a surrogate, `::`, `##[`."""
    found = [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f or 0xd800 <= ord(c) <= 0xdfff]
    found += [m for m in ("::", "##[") if m in text]
    return found


def hacking_rows(n: int = 30) -> list[dict]:
    """A reward-hacking log (TW010 warns, naming the functions' metrics): one reward up, one down, lengths falling."""
    return [dict(ROW, step=i + 1, **{f"rewards/{EVIL_UP}/mean": 0.1 + 0.03 * i, f"rewards/{EVIL_DOWN}/mean": 0.9 - 0.03 * i,
                                     "completions/mean_length": 300.0 - 9 * i}) for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")  # json.dumps writes a lone surrogate as its \ud800 escape
    return path


def one_line(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def test_a_value_no_float_holds_and_a_none_are_read_as_no_value(tmp_path):
    rows = [dict(ROW, step=i + 1, big=10 ** 400 if i == 3 else 1.0, none=None, bigstep=10 ** 30) for i in range(12)]
    log = tmp_path / "log_history.json"
    log.write_text(json.dumps(rows))
    proc = run_doctor("watch", str(log), "--format", "json", env={})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["summary"]["error"] == 0


def test_a_checkpoint_folder_int_refuses_is_no_checkpoint(tmp_path):
    state = {"log_history": [dict(ROW, step=i + 1) for i in range(6)], "max_steps": 6}
    for name in ("checkpoint-\u2462", "checkpoint-6", "checkpoint-" + "9" * 40):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text(json.dumps(state))
    proc = run_doctor("watch", str(tmp_path), "--format", "json", env={})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["config"].endswith("checkpoint-6/trainer_state.json")


def test_escape_sequences_in_metric_names_reach_no_terminal_and_no_picture_raw(tmp_path):
    log = write_jsonl(tmp_path / "train.jsonl", hacking_rows())
    svg = tmp_path / "curves.svg"
    proc = run_doctor("watch", str(log), "--plot", str(svg), env={"COLUMNS": "200"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "TW010  reward-hacking" in proc.stdout and "warn" in proc.stdout
    sparks = proc.stdout[proc.stdout.index("metrics over"):]
    assert "rewards/fmt\\x0a:\\:error" in sparks  # the flagged metric's sparkline, its name escaped
    assert _raw(proc.stdout) == [], _raw(proc.stdout)
    document = xml.dom.minidom.parse(str(svg))  # a valid XML document
    labels = [t.firstChild.data for t in document.getElementsByTagName("text") if t.firstChild]
    assert any(label.startswith("rewards/fmt\\x0a::error") for label in labels), labels
    for fmt in ("github", "table", "junit", "json"):
        out = run_doctor("watch", str(log), "--format", fmt, env={}).stdout
        assert [c for c in _raw(out) if c != "::" or fmt != "github"] == [] or fmt == "github"
        if fmt == "github":  # the runner's commands are the report's own, at a line's start, never the log's
            assert all(line.startswith("::") or "::" not in line for line in out.splitlines())
            assert "::error file=x" not in out and "##[add-mask]" not in out


def test_follow_lines_carry_no_escape_of_the_log(tmp_path):
    from trl_doctor.watch import fitted

    line = f"step 30: TW010 reward-hacking warn: rewards/{EVIL_UP}/mean rose"
    shown = fitted(line)
    assert _raw(shown) == [], _raw(shown)
    assert "\\x1b]0;title\\x07" in shown and "\\ud800" in shown
    log = write_jsonl(tmp_path / "train.jsonl", hacking_rows() + [{"train_runtime": 9.0, "train_loss": 0.1}])
    proc = run_doctor("watch", str(log), "--follow", "--interval", "0.05", env={}, timeout=120)
    assert proc.returncode == 0 and "TW010 reward-hacking warn" in proc.stderr, proc.stderr
    assert _raw(proc.stderr) == [], _raw(proc.stderr)


@pytest.mark.parametrize("option, path, words", [
    ("--config", "/dev/zero", "not a regular file"),
    ("--preflight", "/dev/zero", "a character device"),
    ("--config", "FIFO", "not a regular file"),
    ("--preflight", "FIFO", "a named pipe"),
    ("--config", "NESTED_YAML", "nested too deeply"),
    ("--preflight", "NESTED_JSON", "nested too deeply"),
    ("--plot", "FOLDER", "a folder; --plot writes an SVG picture"),
    ("", "/dev/zero", "not a regular file"),
    ("", "FIFO", "not a regular file"),
])
def test_devices_pipes_and_nesting_are_one_line_exit_2(tmp_path, option, path, words):
    log = tmp_path / "log_history.json"
    log.write_text(json.dumps([dict(ROW, step=i + 1) for i in range(6)]))
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "nested.yaml").write_text("a: " + "[" * 50_000 + "]" * 50_000)
    (tmp_path / "nested.json").write_text("[" * 50_000 + "]" * 50_000)
    given = {"FIFO": str(tmp_path / "fifo"), "NESTED_YAML": str(tmp_path / "nested.yaml"),
             "NESTED_JSON": str(tmp_path / "nested.json"), "FOLDER": str(tmp_path)}.get(path, path)
    args = [str(log), option, given] if option else [given]
    stderr = one_line(run_doctor("watch", *args, env={}, timeout=60))
    assert words in stderr and given in stderr


def test_a_threshold_of_inf_or_nan_is_refused_with_the_file_and_key(tmp_path):
    log = tmp_path / "log_history.json"
    log.write_text(json.dumps([dict(ROW, step=i + 1) for i in range(6)]))
    for value in ("inf", "nan", "-inf"):
        (tmp_path / ".trl-doctor.toml").write_text(f"[watch.zero-advantage]\npatience = {value}\n")
        stderr = one_line(run_doctor("watch", str(log), env={}))
        assert ".trl-doctor.toml" in stderr and "watch.zero-advantage.patience must be a finite number" in stderr


def test_the_callback_refuses_inf_thresholds_where_they_are_given():
    from trl_doctor import DoctorCallback

    for bad in ({"zero-advantage": {"patience": float("inf")}}, {"no-update": {"share": float("nan")}},
                {"zero-advantage": {"patience": "5"}}, {"zero-advantage": 5}):
        with pytest.raises(ValueError, match=r"DoctorCallback\(watch=...\): watch\.(zero-advantage|no-update)"):
            DoctorCallback(preflight=False, watch=bad)


def _follow_in_thread(path: Path):
    from trl_doctor.watch.judge import watch_rules
    from trl_doctor.watch.run import Watch, follow

    out: dict = {}

    def run():
        out["report"], out["history"] = follow(Watch(path), watch_rules(), lambda line: None, interval=0.02,
                                               idle_exit=3)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _printed(rows) -> str:
    return "".join(f"{r}\n" for r in rows)


def test_follow_reads_a_log_rotated_by_rename_as_tail_F_does(tmp_path):
    """logrotate's default: the log renamed aside, a new one made at its path. The old file's last lines are read,
    then the new file from its start: a NaN row there (shorter than the old file's offset) is not missed."""
    log = tmp_path / "train.log"
    log.write_text(_printed([ROW] * 40))
    thread, out = _follow_in_thread(log)
    time.sleep(0.5)
    with open(log, "a") as f:
        f.write(_printed([ROW] * 2))
    os.rename(log, tmp_path / "train.log.1")
    log.write_text(_printed([dict(ROW, loss=float("nan"), grad_norm=float("nan"))]))
    thread.join(30)
    report = out["report"]
    assert not report.ok, [(r.rule, r.status.value) for r in report.results]
    assert {r.rule for r in report.results if r.status.value == "fail"} == {"non-finite"}
    assert len(out["history"].logs) == 43  # the 42 of the old file, then the new one's


def test_follow_reads_a_log_truncated_in_place_from_its_start(tmp_path):
    """copytruncate: the same file cut to 0 and written on."""
    log = tmp_path / "train.log"
    log.write_text(_printed([ROW] * 40))
    thread, out = _follow_in_thread(log)
    time.sleep(0.5)
    with open(log, "r+") as f:
        f.truncate(0)
        f.write(_printed([dict(ROW, loss=float("nan"), grad_norm=float("nan"))]))
    thread.join(30)
    assert {r.rule for r in out["report"].results if r.status.value == "fail"} == {"non-finite"}


def test_follow_memory_stays_bounded_on_a_line_without_end_and_a_fast_log(tmp_path):
    """A writer that never ends its line (192 MiB), then 64 MiB of progress-bar lines at once, then rows: the follower
    reads the file in chunks and keeps no more than a line's worth of it, and judges the rows after both."""
    import subprocess
    import sys

    log = tmp_path / "train.log"
    with open(log, "w") as f:
        chunk = "x" * (1 << 20)
        for _ in range(192):
            f.write(chunk)  # no newline
        f.write("\n")
        bar = "Training:  42%|####      | 42/100 [00:10<00:14,  4.1it/s]\n"
        f.write(bar * ((64 << 20) // len(bar)))
        f.write(_printed([ROW] * 4))
        f.write("{'train_runtime': 1.0, 'train_loss': 0.1, 'epoch': 1.0}\n")
    code = ("import resource\nfrom pathlib import Path\nfrom trl_doctor.watch.judge import watch_rules\n"
            "from trl_doctor.watch.run import Watch, follow\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"report, history = follow(Watch(Path({str(log)!r})), watch_rules(), print, interval=0.02, idle_exit=5)\n"
            "print('logs', len(history.logs), 'ended', history.ended, 'grew_kib',"
            " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = proc.stdout.split()
    assert words[words.index("logs") + 1] == "4" and words[words.index("ended") + 1] == "True", proc.stdout
    grew_kib = int(words[words.index("grew_kib") + 1])
    assert grew_kib < 64 * 1024, grew_kib  # read whole, the endless line alone is 192 MiB of bytes and as much of str


def test_the_watch_s_own_trouble_at_the_first_log_never_ends_the_job(tmp_path, monkeypatch):
    """The watch's own trouble at a log (here: its history cannot take the row) is one line in the job's log and the
    job goes on, also at the first log, before any report exists (mypy found the report read as None there: the
    AttributeError escaped the callback and ended the training job)."""
    import io
    from types import SimpleNamespace

    from trl_doctor.watch.history import History
    from trl_doctor.watch.job import Watcher

    stream = io.StringIO()
    watcher = Watcher(stream=stream)
    args = SimpleNamespace(output_dir=str(tmp_path), logging_steps=1)
    watcher.begin(args, None)

    def broken(self, raw, step=None):
        raise ValueError("a row the watch cannot read")

    monkeypatch.setattr(History, "add", broken)
    state = SimpleNamespace(global_step=1, is_world_process_zero=True)
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    watcher.on_log(args, state, control, {"loss": 0.1})
    said = " ".join(stream.getvalue().split())  # the line is wrapped to the terminal
    assert "the watch could not judge this log (ValueError: a row the watch cannot read); the job goes on" in said
    assert not control.should_training_stop
