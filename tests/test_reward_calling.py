"""TD014 calls reward functions as the installed trainer does: on the main thread (math_verify, which most math
recipes score with, times its parsing with signal.alarm and refuses any other thread), with the trainer's dataset
columns taken from the same rows as the prompts, under a time limit that still stops a function that hangs, also
after the function's own signal.alarm. Real math_verify (the dev extra), real TRL, the tiny fixture model."""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

import pytest

from conftest import result_of, run_doctor

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LAUNCH = FIXTURES / "launch"
COSINE = "__main__.get_cosine_scaled_reward.<locals>.cosine_scaled_reward"


def launch_check(*command: str) -> tuple[int, dict]:
    proc = run_doctor("check", "--no-smoke", "--select", "reward-functions", "--format", "json", "--",
                      "python", *command, cwd=LAUNCH)
    assert proc.stdout, proc.stderr
    return proc.returncode, result_of(json.loads(proc.stdout), "reward-functions")


def test_cookbook_math_verify_rewards_pass_as_the_trainer_calls_them():
    pytest.importorskip("math_verify")
    code, r = launch_check("grpo_math_verify.py")
    assert code == 0 and r["status"] == "pass", r["message"]
    for name in ("__main__.format_reward", "__main__.accuracy_reward", COSINE):
        assert name in r["message"]
    assert "solution=" in r["details"]["arguments passed"]
    # the gold solutions parsed (the real `solution` values reached math_verify on the main thread): a wrong
    # synthetic answer scores in the cosine reward's "wrong" band, an unparsed gold would score 1.0 and print
    assert all(-1.0 <= s <= -0.5 for s in r["details"][f"reward {COSINE}"]), r["details"]
    assert not any(k.startswith("printed by") for k in r["details"]), r["details"]


def test_a_reward_needing_a_column_the_dataset_lacks_still_fails():
    pytest.importorskip("math_verify")
    code, r = launch_check("grpo_math_verify.py", "--broken")
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith("reward function __main__.answer_reward cannot be called the way trl")
    assert "missing a required argument: 'answer'" in r["message"]


def rule_result(config: Path, timeout: float = 60.0) -> dict:
    """The rule run by the engine in this (the main) thread, without the worker's supervisor: only the doctor's
    own time limit can stop a call here."""
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context, Options
    from trl_doctor.engine import run_rule
    from trl_doctor.report.formats import result_dict
    from trl_doctor.registry import builtin_rules

    (the_rule,) = [r for r in builtin_rules() if r.slug == "reward-functions"]
    with Context(load_config(config), Options(smoke=False, user_code_timeout=timeout)) as ctx:
        return result_dict(run_rule(the_rule, ctx))


def write_case(tmp_path: Path, module: str, source: str, funcs: list[str], data: str = "chat_answers.jsonl") -> Path:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    config = tmp_path / f"{module}.yaml"
    config.write_text(f"model_name_or_path: {FIXTURES / 'models' / 'qwen2-chat'}\n"
                      f"dataset_path: {FIXTURES / 'data' / data}\n"
                      f"reward_funcs: [{', '.join(f'{module}.{f}' for f in funcs)}]\n")
    return config


def test_columns_come_from_the_same_rows_as_the_prompts(tmp_path):
    """Each completion's `answer` is the one of the row its prompt came from, as TRL repeats inputs per completion."""
    rows = [json.loads(line) for line in (FIXTURES / "data" / "chat_answers.jsonl").read_text().splitlines()]
    expected = {r["prompt"][-1]["content"]: r["answer"] for r in rows}
    config = write_case(tmp_path, "aligned", f"""
        import threading

        EXPECTED = {expected!r}

        def aligned(prompts, completions, answer, **kwargs):
            assert threading.current_thread() is threading.main_thread()
            return [float(EXPECTED[p[-1]["content"]] == a) for p, a in zip(prompts, answer)]
    """, ["aligned"])
    r = rule_result(config)
    assert r["status"] == "pass", r["message"]
    assert r["details"]["reward aligned.aligned"] == [1.0, 1.0, 1.0, 1.0]


HANGS = """
    import signal
    import time

    def alarm_then_hang(completions, **kwargs):
        # math_verify's own timer (signal.alarm, then alarm(0)) must neither break nor disarm the doctor's limit
        from math_verify import LatexExtractionConfig, parse
        parse("$\\\\frac{1}{2}$", extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
        while True:
            time.sleep(0.05)

    def swallows_and_hangs(completions, **kwargs):
        for attempt in range(3):  # a retry loop with a bare except swallows the first interruptions
            try:
                time.sleep(10)
            except BaseException:
                pass
        while True:
            time.sleep(10)
"""


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.parametrize("func", ["alarm_then_hang", "swallows_and_hangs"])
def test_a_hanging_reward_is_stopped_on_the_main_thread(tmp_path, func):
    pytest.importorskip("math_verify")
    config = write_case(tmp_path, "hangs", HANGS, [func])
    before = (signal.getsignal(signal.SIGALRM), signal.getsignal(signal.SIGUSR2))
    r = rule_result(config, timeout=1.0)
    assert r["status"] == "fail"
    assert r["message"].startswith(f"hangs.py (calling hangs.{func}) did not finish within 1 s (--user-code-timeout)")
    assert (signal.getsignal(signal.SIGALRM), signal.getsignal(signal.SIGUSR2)) == before


def test_the_functions_own_alarm_handler_keeps_working(tmp_path):
    """A reward that times itself with a SIGALRM handler of its own gets its alarm while the doctor's limit runs."""
    config = write_case(tmp_path, "own_alarm", """
        import signal
        import time

        class Slow(Exception):
            pass

        def timed(completions, **kwargs):
            def on_alarm(signum, frame):
                raise Slow()
            old = signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            try:
                time.sleep(5)
                hit = 0.0
            except Slow:
                hit = 1.0
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
            return [hit for _ in completions]
    """, ["timed"])
    r = rule_result(config, timeout=10.0)
    assert r["status"] == "pass", r["message"]
    assert r["details"]["reward own_alarm.timed"] == [1.0, 1.0, 1.0, 1.0]


def test_an_error_only_the_doctors_thread_causes_is_not_held_against_the_function(tmp_path):
    """In-process use from another thread (an app's worker thread): math_verify refuses that thread, TRL would call
    it on the main one, so the function is not judged by that error."""
    import threading

    pytest.importorskip("math_verify")
    config = write_case(tmp_path, "mathy", """
        from math_verify import LatexExtractionConfig, parse

        def gold_parses(completions, answer, **kwargs):
            return [float(bool(parse("$" + a + "$", extraction_config=[LatexExtractionConfig()]))) for a in answer]
    """, ["gold_parses"])
    box = {}
    runner = threading.Thread(target=lambda: box.update(rule_result(config)))
    runner.start()
    runner.join(300)
    assert box["status"] == "pass", box["message"]
    assert "mathy.gold_parses (not judged: it needs the main thread" in box["message"]
    assert "doesn't support threaded environment" in box["message"]
