"""The watch on training logs no one here wrote (issue 33): GRPO and PPO runs that users pasted into issue threads or
committed to their repositories, each cited in fixtures/watch/public/cases.yaml with what its author or the TRL
maintainers concluded. The watch must flag what they found wrong, and nothing where the alarm was a false one (a loss
of 0 that is beta x kl, a NaN kl with beta 0)."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import FIXTURES, run_doctor

pytestmark = pytest.mark.release_free

PUBLIC = FIXTURES / "watch" / "public"
CASES = yaml.safe_load((PUBLIC / "cases.yaml").read_text())["cases"]
# the kinds cases.yaml names, as the watch rules' slugs
RULE = {"zero-advantage": "zero-advantage", "never-terminating": "never-terminating", "pg-term-gone": "policy-gradient-gone",
        "no-update": "no-update", "entropy-collapse": "entropy-collapse", "kl-blowup": "kl-blowup",
        "non-finite": "non-finite", "grad-spike": "grad-spike", "lr-zero": "learning-rate-zero",
        "reward-hacking": "reward-hacking", "ppo-no-eos": "never-terminating", "ppo-negative-kl": "kl-blowup",
        "ratio-clipping": "ratio-clipping", "length-collapse": "length-collapse"}


def test_every_case_is_cited_and_its_file_exists():
    for case in CASES:
        assert (PUBLIC / case["file"]).exists(), case["file"]
        assert case["source"].startswith("https://github.com/") and case["author_says"], case["file"]
    assert {c["file"] for c in CASES} == {p.name for p in PUBLIC.iterdir() if p.suffix in (".log", ".json")
                                          or p.is_dir()}  # a folder: a job's TensorBoard run as it committed it
    assert sum(1 for c in CASES if not c["expected"]) >= 3  # false alarms and healthy runs, judged as such


def test_the_corpus_holds_long_healthy_runs():
    """A watch that reads windows of steps must not cry wolf on a long healthy run (issue 43: 100+ logs)."""
    from trl_doctor.watch.history import read

    long_healthy = [c["file"] for c in CASES if not c["expected"] and len(read(PUBLIC / c["file"]).logs) >= 100]
    assert len(long_healthy) >= 4, long_healthy


def _param(case: dict):
    """A case the watch is known to get wrong (`known_miss` in cases.yaml, saying how) runs as a strict expected
    failure: it is counted, and a change that fixes it fails until the mark is removed."""
    marks = [pytest.mark.xfail(strict=True, reason=case["known_miss"])] if case.get("known_miss") else []
    return pytest.param(case, marks=marks, id=case["file"])


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_a_public_log_is_judged_as_its_author_describes_it(case, tmp_path):
    """A log whose lines carry no step is given its job's logging interval as its user would: --config RECIPE."""
    recipe = []
    if case.get("logging_steps"):
        (tmp_path / "recipe.yaml").write_text(f"logging_steps: {case['logging_steps']}\n")
        recipe = ["--config", str(tmp_path / "recipe.yaml")]
    proc = run_doctor("watch", str(PUBLIC / case["file"]), "--format", "json", *recipe)
    assert proc.returncode in (0, 1), proc.stderr
    results = {r["rule"]: r for r in json.loads(proc.stdout)["results"]}
    flagged = {slug for slug, r in results.items() if r["status"] in ("warn", "fail")}
    expected = {RULE[k] for k in case["expected"]}
    allowed = expected | {RULE[k] for k in case.get("acceptable_warnings", ())}
    assert expected <= flagged, f"missed {expected - flagged}: " + "; ".join(
        f"{s}: {results[s]['message']}" for s in expected - flagged)
    assert flagged <= allowed, "false alarms: " + "; ".join(f"{s}: {results[s]['message']}" for s in flagged - allowed)
    assert not flagged & {RULE[k] for k in case.get("not_expected", ())}
    for kind, text in case.get("says", {}).items():  # what the report must say: step counts, a verdict's reason
        assert text in results[RULE[kind]]["message"], results[RULE[kind]]
    for kind in case.get("evidence_short_of", ()):  # too little evidence: a skip saying how much is needed
        said = results[RULE[kind]]
        assert said["status"] == "skip" and "needed" in said["message"], said
    assert (proc.returncode == 1) == any(results[s]["status"] == "fail" for s in flagged)
    if case.get("at_first_log"):  # the job as it stood at its first log: the checkpoint of step 1
        state = json.loads((PUBLIC / case["file"]).read_text())
        state["log_history"], state["global_step"] = state["log_history"][:1], state["log_history"][0]["step"]
        (tmp_path / "trainer_state.json").write_text(json.dumps(state))
        proc = run_doctor("watch", str(tmp_path / "trainer_state.json"), "--format", "json")
        first = {r["rule"]: r for r in json.loads(proc.stdout)["results"]}
        for kind, text in case["at_first_log"].items():
            assert text in first[RULE[kind]]["message"], first[RULE[kind]]
