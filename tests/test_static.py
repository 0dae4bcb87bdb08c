"""`check --static` (trl_doctor/static/): verdicts from files, in one process, with torch, transformers and TRL
unimportable, none of the repository's code run, every format and exit status; and no false alarm on any healthy
fixture where the full check passes (data-driven from the folders' expected.yaml)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import FIXTURES, result_of, run_doctor, trl_doctor_exe
from test_fixture_cases import NOT_RUN, RANK, case_fake_gpus, expected_statuses, fake_nvml


HEAVY = ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "tokenizers", "vllm")
PADLESS = FIXTURES / "pad-token" / "bad_gpt2_nopad.yaml"
NEVER_STOPS = FIXTURES / "eos-termination" / "bad_llama3_eot_missing.yaml"
BAD_GEOMETRY = FIXTURES / "batch-geometry" / "bad_grpo_one_process.yaml"
HEALTHY = (FIXTURES / "trainer-config" / "ok_grpo.yaml", FIXTURES / "smoke-step" / "ok_grpo_qwen2.yaml")


@pytest.fixture(scope="module")
def no_stack(tmp_path_factory) -> Path:
    """A PYTHONPATH folder where torch, transformers, TRL, datasets, accelerate and peft raise ImportError, with a
    sitecustomize that writes the modules loaded at exit to $TRL_DOCTOR_TEST_MODULES."""
    folder = tmp_path_factory.mktemp("no-stack")
    for name in HEAVY[:-2]:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name} is not importable in this test')\n")
    (folder / "sitecustomize.py").write_text(textwrap.dedent("""
        import atexit, os, sys
        def _dump():
            path = os.environ.get("TRL_DOCTOR_TEST_MODULES")
            if path:
                with open(path, "w") as f:
                    f.write("\\n".join(sorted(sys.modules)))
        atexit.register(_dump)
    """))
    return folder


def _static(no_stack: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """The real console script, in a fresh process that cannot import the ML stack: (its run, the modules loaded)."""
    dump = tmp_path / "modules.txt"
    env = dict(os.environ, PYTHONPATH=str(no_stack), TRL_DOCTOR_TEST_MODULES=str(dump))
    proc = subprocess.run([trl_doctor_exe(), "check", "--static", *args], capture_output=True, text=True, env=env,
                          timeout=120)
    return proc, set(dump.read_text().split()) if dump.exists() else set()


def _loaded_heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_the_headline_bugs_fail_and_healthy_configs_pass_without_the_ml_stack(built_fixtures, no_stack, tmp_path):
    pytest.importorskip("jinja2")  # the template's terminator renders only in its sandbox (the CI python lane: none)
    proc, modules = _static(no_stack, tmp_path, "--format", "json", str(NEVER_STOPS))
    assert proc.returncode == 1, proc.stderr
    assert modules and not _loaded_heavy(modules), _loaded_heavy(modules)
    assert "trl_doctor.supervisor.forkserver" not in modules and "trl_doctor.facts.trainer_run.execute" not in modules  # no worker
    td004 = result_of(json.loads(proc.stdout), "eos-termination")
    assert td004["status"] == "fail" and "'<|eot_id|>'" in td004["message"] and "will not stop" in td004["message"]

    proc, modules = _static(no_stack, tmp_path, "--format", "json", str(BAD_GEOMETRY))
    assert proc.returncode == 1 and not _loaded_heavy(modules)
    td010 = result_of(json.loads(proc.stdout), "batch-geometry")
    assert td010["status"] == "fail"
    assert "generation_batch_size (2) must be divisible by num_generations (8)" in td010["message"] or \
        "evenly divisible by the number of generations per prompt" in td010["message"]

    # a pad-less GRPO tokenizer: a warning where the judged TRL sets pad = eos itself (0.17 on), a failure before
    proc, modules = _static(no_stack, tmp_path, "--format", "json", "--fail-on", "warn", str(PADLESS))
    assert proc.returncode == 1 and not _loaded_heavy(modules)
    td001 = result_of(json.loads(proc.stdout), "pad-token")
    assert "the tokenizer has no pad token" in td001["message"]
    proc, _ = _static(no_stack, tmp_path, "--format", "json", "--trl-version", "0.16.1", str(PADLESS))
    assert proc.returncode == 1
    td001 = result_of(json.loads(proc.stdout), "pad-token")
    assert td001["status"] == "fail" and "Asking to pad" in td001["message"]

    for config in HEALTHY:
        proc, modules = _static(no_stack, tmp_path, str(config))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert not _loaded_heavy(modules)


def test_the_report_says_static_and_lists_each_skip_once(built_fixtures, no_stack, tmp_path):
    proc, _ = _static(no_stack, tmp_path, "--format", "json", str(HEALTHY[1]))
    doc = json.loads(proc.stdout)
    (entry,) = [s for s in doc["settings"] if s["setting"] == "static"]
    assert "judged against trl" in entry["value"] and entry["source"] == "command line"
    assert doc["static"]["trl"] and doc["static"]["judged"]
    skipped = [r for r in doc["results"] if r["status"] == "skip"]
    assert skipped and len({r["id"] for r in skipped}) == len(skipped)
    assert all(r["message"] for r in skipped)
    assert "imports and calls the repository's reward functions" in result_of(doc, "reward-functions")["message"]
    assert result_of(doc, "smoke-step")["status"] == "skip"


@pytest.mark.parametrize("fmt", ["table", "json", "sarif", "junit", "github"])
def test_every_format_and_exit_status(built_fixtures, no_stack, tmp_path, fmt):
    proc, modules = _static(no_stack, tmp_path, "--format", fmt, str(BAD_GEOMETRY))
    assert proc.returncode == 1 and proc.stdout and not _loaded_heavy(modules), proc.stderr
    assert "batch-geometry" in proc.stdout or "TD010" in proc.stdout
    assert fmt == "github" or "static" in proc.stdout  # github annotates only settings from project files
    proc, _ = _static(no_stack, tmp_path, "--format", fmt, str(HEALTHY[0]))
    assert proc.returncode == 0, proc.stdout


def test_bad_input_is_one_line_naming_the_file(built_fixtures, no_stack, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("model_name_or_path: [unclosed\n")
    proc, _ = _static(no_stack, tmp_path, str(broken))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and str(broken) in proc.stderr
    bad_json = tmp_path / "model"
    bad_json.mkdir()
    (bad_json / "config.json").write_text("{not json")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model_name_or_path: {bad_json}\nnum_generations: 2\n")
    proc, _ = _static(no_stack, tmp_path, str(cfg))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and str(bad_json / "config.json") in proc.stderr
    for args in (("--fix", str(HEALTHY[0])), ("--", "python", "train.py"), ("--trl-version", "banana", str(HEALTHY[0]))):
        proc, _ = _static(no_stack, tmp_path, *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (args, proc.stderr)
    proc = run_doctor("check", "--trl-version", "0.17.0", str(HEALTHY[0]))
    assert proc.returncode == 2 and "give --static too" in proc.stderr


def test_a_reward_module_in_the_repository_is_never_imported(built_fixtures, no_stack, tmp_path):
    marker = tmp_path / "imported"
    (tmp_path / "marker_rewards.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\ndef reward(completions, **kw):\n    return [0.0] * len(completions)\n")
    config = tmp_path / "recipe.yaml"
    config.write_text(HEALTHY[1].read_text().replace("../", f"{FIXTURES}/").replace("rewards.", "marker_rewards."))
    assert "marker_rewards." in config.read_text()
    proc, _ = _static(no_stack, tmp_path, str(config))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()
    # the marker works: importing the module (what the full check's reward-functions does) writes it
    subprocess.run([sys.executable, "-c", "import marker_rewards"], cwd=tmp_path, check=True)
    assert marker.exists()


def test_precision_is_judged_against_the_target_gpus(built_fixtures, no_stack, tmp_path):
    recipe = FIXTURES / "launch-machine" / "recipe_r1_math.yaml"
    proc, _ = _static(no_stack, tmp_path, "--format", "json", "--target", "1xT4", "--select", "precision-and-attention",
                      str(recipe))
    td015 = result_of(json.loads(proc.stdout), "precision-and-attention")
    assert proc.returncode == 1 and td015["status"] == "fail" and "bfloat16" in td015["message"]
    proc, _ = _static(no_stack, tmp_path, "--format", "json", "--target", "1xA100-80GB", "--select",
                      "precision-and-attention", str(recipe))
    assert result_of(json.loads(proc.stdout), "precision-and-attention")["status"] == "pass"


def test_a_chat_template_is_only_rendered_in_the_sandbox(built_fixtures, tmp_path):
    """A template that reaches for Python's internals stops in Jinja2's sandbox: a warning, never code run."""
    pytest.importorskip("jinja2")
    import shutil

    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "models" / "qwen2-chat", model)
    (model / "chat_template.jinja").write_text(
        "{{ ''.__class__.__mro__[1].__subclasses__() }}{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}")
    config = tmp_path / "c.yaml"
    config.write_text(NEVER_STOPS.read_text().replace("../models/llama3-eosbug", str(model))
                      .replace("../", f"{FIXTURES}/"))
    proc = run_doctor("check", "--static", "--format", "json", "--select", "eos-termination", str(config))
    td004 = result_of(json.loads(proc.stdout), "eos-termination")
    assert td004["status"] == "warn" and "SecurityError" in td004["message"], td004


# -- no false alarm: every fixture case, the full check's expectation from its folder's expected.yaml ------------

def _cases():
    for expected_file in sorted(FIXTURES.glob("*/expected.yaml")):
        spec = yaml.safe_load(expected_file.read_text())
        for case, status in spec["cases"].items():
            yield pytest.param(expected_file.parent / case, spec["rule"], status, id=f"{expected_file.parent.name}/{case}")




@pytest.mark.sweep  # every fixture case (a few hundred checks): the default CI lane
@pytest.mark.parametrize("config, rule, expected", list(_cases()))
def test_static_raises_no_alarm_the_full_check_does_not(built_fixtures, config, rule, expected):
    """Static's verdict on the folder's rule is never worse than the full check's (expected.yaml, for the installed
    release); on an ok_ case no other rule fails either, except trainer-config where the installed TRL has no
    config class for the trainer (PPO from trl 1.13), which the full check fails too."""
    if expected_statuses(expected)[0] == [NOT_RUN]:
        pytest.skip(f"{config.name}: not run with the installed releases")
    from trl_doctor.errors import InputError
    from trl_doctor.testing import judge_rules

    with fake_nvml(case_fake_gpus(config)):  # in this process: the rule harness, NVML answering for the case's GPUs
        try:
            judged = judge_rules(config, (), context="static")
        except InputError as exc:  # exit 2: a script, a watch rule's log, a config --static refuses (one line)
            assert str(exc) and "\n" not in str(exc), str(exc)
            return
    report = {"results": [j.as_dict() for j in judged]}
    allowed, _ = expected_statuses(expected)
    mine = result_of(report, rule)
    assert RANK[mine["status"]] <= max(RANK[s] for s in allowed), (mine["status"], mine["message"])
    if config.name.startswith("ok_"):
        for r in report["results"]:
            if r["status"] in ("fail", "error") and r["id"] != rule:
                assert r["rule"] == "trainer-config" and "rejects the config: trl" in r["message"] and \
                    "has no PPOConfig" in r["message"], (r["rule"], r["message"])


# -- one wording: where --static and the full check judge a case alike, they say it word for word ---------------

# Cases whose --static verdict and message equal the full check's (the snapshot records the full check's words): each
# rule's module holds both its judgments and the words they share.
SAME_WORDS = ("pad-token/bad_gpt2_nopad.yaml", "pad-token/bad_llama3_nopad.yaml", "pad-token/bad_pad_mismatch.yaml",
              "pad-token/bad_pad_outside_vocab.yaml", "pad-token/bad_ppo_pad_is_eos.yaml", "pad-token/ok_qwen2_chat.json",
              "pad-token/ok_grpo_pad_is_eos.yaml", "pad-token/ok_grpo_generation_pad_differs.yaml",
              "pad-token/bad_ppo_generation_pad_differs.yaml", "precision-and-attention/bad_bf16_t4.yaml",
              "precision-and-attention/bad_vllm_bf16_checkpoint_t4.yaml", "trainer-config/bad_unknown_key.yaml",
              "trainer-config/bad_renamed_torch_dtype.yaml", "trainer-config/bad_removed_max_prompt_length.yaml",
              "trainer-config/bad_ppov1_keys.yaml", "trainer-config/ok_ppo.yaml",
              "batch-geometry/bad_num_generations_text.yaml", "dataset-schema/bad_no_prompt_column.yaml")


@pytest.mark.trl_pair
@pytest.mark.parametrize("case_id", SAME_WORDS)
def test_static_says_what_the_full_check_says(built_fixtures, case_id):
    import case_snapshots

    case = FIXTURES / case_id
    fields, body = case_snapshots.split(case_snapshots.snapshot_path(case).read_text())
    # the words name the releases: compared where the fixture snapshot itself is (this lane, or a newer one)
    if not case_snapshots.comparable(fields.get("lane", "")):
        pytest.skip(f"the snapshot was recorded with {fields.get('lane')}, this is {case_snapshots.lane()}")
    status_line, message, *_ = body.split("\n")
    from trl_doctor.testing import judge

    with fake_nvml(case_fake_gpus(case)):
        mine = judge(case, case.parent.name, context="static").as_dict()
    assert f"{mine['id']} {mine['rule']}: {mine['status']}" == status_line
    assert case_snapshots.normalise(mine["message"], {FIXTURES: "<fixtures>"}) == message


@pytest.mark.release_free
def test_one_way_to_read_a_value_in_every_context(built_fixtures):
    """facts.launch.settings.config_value answers in the static context too, without TRL: the value as written, else the
    judged release's default; TRL's own config object is a fact the static context has not (Unavailable)."""
    from trl_doctor.context.config import load_config
    from trl_doctor.errors import Unavailable
    from trl_doctor.facts.trl import fields as trl_fields
    from trl_doctor.facts.launch.settings import config_value
    from trl_doctor.facts.trl.trainer_config import trainer_config
    from trl_doctor.interface import CheckContext
    from trl_doctor.options import Options
    from trl_doctor.static import StaticContext

    s = StaticContext(load_config(HEALTHY[0]), Options(), "0.17.0")
    assert isinstance(s, CheckContext) and s.kind == "static" and s.version("trl") == "0.17.0"
    assert config_value(s, "max_completion_length") == 32  # written
    own, _ = trl_fields.config_fields("0.17.0", "grpo")
    assert config_value(s, "beta") == own["beta"]["default"]  # the judged release's default
    assert config_value(s, "no_such_key", "fallback") == "fallback"
    with pytest.raises(Unavailable, match="needs the full check"):
        trainer_config(s)
