"""TD007 version-skew: the requirement check on real Requires-Dist lines copied from the released wheels'
METADATA, every known-issues entry against real version strings (one set that triggers it, others that
do not), the rule through the CLI on its fixtures, and the findings section of `trl-doctor env`."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import pytest
import yaml
from packaging.version import Version

from conftest import FIXTURES, check_here, result_of, rule_in_this_process, run_doctor, run_json
from trl_doctor.facts.trl import versions as _skew
from trl_doctor.facts.trl.versions import (
    entry_matches_config,
    known_issue_findings,
    load_table,
    normalize,
    requirement_findings,
    validate_table,
    version_in,
)

# -- Requires-Dist lines, copied from the METADATA of the released wheels ------------------------------------

TRL_1_16_0 = [
    "accelerate>=1.10.1", "datasets>=4.7.0", "huggingface_hub>=0.34.0", "jinja2", "numpy>=1.26.0", "packaging>20.0",
    "pandas>=2.1.1", "psutil>=5.9.4", "pyarrow>=21.0.0", "pyyaml>=6.0.1", "transformers>=4.56.2",
    'deepspeed>=0.18.6; extra == "deepspeed"', 'transformers!=5.1.0; extra == "deepspeed"',
    'transformers[kernels]; extra == "kernels"', 'liger-kernel>=0.8.2; extra == "liger"',
    'peft>=0.13.0; extra == "peft"', 'pytest; extra == "test"', 'vllm<=0.31.0,>=0.22.0; extra == "vllm"',
    'aiohttp>=3.13.3; extra == "vllm"', 'requests; extra == "vllm"', 'torchvision; extra == "vlm"',
    'deepspeed>=0.18.6; extra == "dev"', 'peft>=0.13.0; extra == "dev"', 'torchvision; extra == "dev"',
]
TRL_0_15_2 = [
    "accelerate>=0.34.0", "datasets>=2.21.0", "rich", "transformers>=4.46.0",
    'deepspeed>=0.14.4; sys_platform != "win32" and extra == "deepspeed"', 'mergekit>=0.0.5.1; extra == "mergekit"',
    'peft>=0.8.0; extra == "peft"', 'vllm==0.7.2; sys_platform != "win32" and extra == "vllm"',
    'deepspeed>=0.14.4; sys_platform != "win32" and extra == "dev"', 'vllm==0.7.2; sys_platform != "win32" and extra == "dev"',
]
TRL_0_18_2_VLLM = 'vllm>=0.8.3; python_version < "3.13" and extra == "vllm"'
VLLM_0_31_0 = [
    "regex", "requests>=2.26.0", "transformers<5.18.0,>=5.10.4", "huggingface_hub>=1.31.0", "tokenizers>=0.21.1",
    'protobuf==7.36.1; platform_machine == "s390x"', "torch==2.13.0", "torchaudio==2.11.0", "torchvision==0.28.0",
    "torchcodec>=0.14", 'zentorch==2.13.0.1; extra == "zen"', 'pandas; extra == "bench"',
]
TRANSFORMERS_5_23_0 = [
    "huggingface-hub<3.0,>=1.31.0", "tokenizers<0.24.0,>=0.23.1", 'torch>=2.6; extra == "torch"',
    'accelerate>=1.1.0; extra == "torch"', 'deepspeed>=0.9.3; extra == "deepspeed"', 'accelerate>=1.1.0; extra == "deepspeed"',
    'torch>=2.6; extra == "testing"', 'datasets>=2.15.0; extra == "testing"', 'accelerate>=1.1.0; extra == "accelerate"',
]
ACCELERATE_1_15_0 = ["numpy>=1.17", "torch>=2.0.0", 'deepspeed; extra == "deepspeed"', 'transformers; extra == "testing"']
ACCELERATE_1_3_0 = ["numpy<3.0.0,>=1.17", "torch>=2.0.0", 'deepspeed; extra == "deepspeed"']
PEFT_0_21_2 = ["torch>=1.13.0", "transformers", "accelerate>=0.21.0", 'datasets; extra == "test"']
PEFT_0_14_0 = ["torch >=1.13.0", "transformers", "accelerate >=0.21.0"]  # old metadata keeps the spaces
DATASETS_5_2_0 = [
    "pyarrow>=24.0.0", 'torch>=2.8.0; extra == "audio"', 'torch; extra == "torch"', 'torch==2.0.1; extra == "benchmarks"',
    'transformers==4.30.1; extra == "benchmarks"', 'transformers>=4.42.0; extra == "dev"',
]
DATASETS_3_3_2 = ["pyarrow>=15.0.0", 'torch; extra == "torch"', 'transformers; extra == "dev"']

DEFAULT_LANE = {"trl": "1.16.0", "transformers": "5.23.0", "torch": "2.13.0+cpu", "accelerate": "1.15.0",
                "datasets": "5.2.0", "peft": "0.21.2", "vllm": None, "deepspeed": None}
DEFAULT_REQUIRES = {"trl": TRL_1_16_0, "transformers": TRANSFORMERS_5_23_0, "accelerate": ACCELERATE_1_15_0,
                    "peft": PEFT_0_21_2, "datasets": DATASETS_5_2_0, "torch": ["filelock", 'optree>=0.13.0; extra == "optree"']}
LEGACY_LANE = {"trl": "0.15.2", "transformers": "4.48.3", "torch": "2.13.0+cpu", "accelerate": "1.3.0",
               "datasets": "3.3.2", "peft": "0.14.0", "vllm": None, "deepspeed": None}
TRANSFORMERS_4_48_3 = [  # the old metadata style: spaces and single quotes
    "tokenizers <0.22,>=0.21", "accelerate >=0.26.0 ; extra == 'accelerate'", "torch >=2.0 ; extra == 'agents'",
    "accelerate >=0.26.0 ; extra == 'deepspeed'", "torch >=2.0 ; extra == 'dev'", "accelerate >=0.26.0 ; extra == 'torch'",
    "torch >=2.0 ; extra == 'torch'",
]
LEGACY_REQUIRES = {"trl": TRL_0_15_2, "transformers": TRANSFORMERS_4_48_3,
                   "accelerate": ACCELERATE_1_3_0, "peft": PEFT_0_14_0, "datasets": DATASETS_3_3_2}
VLLM_LANE = {**DEFAULT_LANE, "transformers": "5.17.0", "vllm": "0.31.0", "peft": None}
VLLM_REQUIRES = {**DEFAULT_REQUIRES, "vllm": VLLM_0_31_0}
LINUX = {"sys_platform": "linux", "python_version": "3.11", "platform_machine": "x86_64"}


def messages(findings):
    return [f.message for f in findings]


# -- declared requirements ---------------------------------------------------------------------------------


def test_the_three_ci_lanes_satisfy_their_declared_ranges():
    found, checked = requirement_findings(DEFAULT_LANE, DEFAULT_REQUIRES, LINUX)
    # trl 3 + trl[peft] 1 (peft is installed), transformers[torch] 2 + [accelerate] 1, accelerate 1, peft 3, datasets[torch] 1
    assert found == [] and checked == 12
    found, checked = requirement_findings(LEGACY_LANE, LEGACY_REQUIRES, LINUX)
    assert found == [] and checked == 12
    found, checked = requirement_findings(VLLM_LANE, VLLM_REQUIRES, LINUX)
    assert found == []  # vllm 0.31.0 pins torch==2.13.0 and transformers<5.18: 2.13.0+cpu and 5.17.0 fit
    assert checked == 11  # no peft; vllm's torch and transformers, trl[vllm]'s vllm
    # an old-style line is read: transformers 4.48.3's torch extra wants torch>=2.0
    found, _ = requirement_findings({**LEGACY_LANE, "torch": "1.13.1"}, LEGACY_REQUIRES, LINUX)
    assert "torch 1.13.1 is outside transformers[torch]'s range torch>=2.0 declared by transformers 4.48.3" in messages(found)


def test_vllm_outside_trls_vllm_extra_is_reported_with_the_extra_and_the_declarer():
    found, _ = requirement_findings({**VLLM_LANE, "vllm": "0.32.0"}, VLLM_REQUIRES, LINUX)
    assert messages(found) == ["vllm 0.32.0 is outside trl[vllm]'s range vllm<=0.31.0,>=0.22.0 declared by trl 1.16.0"]
    assert found[0].status == "fail" and found[0].fix.startswith('pip install "vllm<=0.31.0,>=0.22.0"')
    assert found[0].details["declared by"] == "trl[vllm] 1.16.0"
    found, _ = requirement_findings({**LEGACY_LANE, "vllm": "0.8.0"}, LEGACY_REQUIRES, LINUX)
    assert messages(found) == ["vllm 0.8.0 is outside trl[vllm]'s range vllm==0.7.2 declared by trl 0.15.2"]
    # the extra's markers are evaluated: not on Windows, not for trl 0.18.2's vllm on Python 3.13
    assert requirement_findings({**LEGACY_LANE, "vllm": "0.8.0"}, LEGACY_REQUIRES, {**LINUX, "sys_platform": "win32"})[0] == []
    requires = {"trl": [TRL_0_18_2_VLLM]}
    installed = {"trl": "0.18.2", "vllm": "0.7.3"}
    assert messages(requirement_findings(installed, requires, LINUX)[0]) == [
        "vllm 0.7.3 is outside trl[vllm]'s range vllm>=0.8.3 declared by trl 0.18.2"]
    assert requirement_findings(installed, requires, {**LINUX, "python_version": "3.13"})[0] == []


def test_vllm_pins_torch_and_transformers_local_builds_satisfy_the_pin():
    for torch in ("2.13.0+cpu", "2.13.0+cu130", "2.13.0"):
        assert requirement_findings({**VLLM_LANE, "torch": torch}, VLLM_REQUIRES, LINUX)[0] == []
    found, _ = requirement_findings({**VLLM_LANE, "torch": "2.12.1+cpu"}, VLLM_REQUIRES, LINUX)
    assert messages(found) == ["torch 2.12.1+cpu is outside vllm's range torch==2.13.0 declared by vllm 0.31.0"]
    # vllm 0.31.0 next to the default lane's transformers 5.23.0 (pip only warns when a later install does this)
    found, _ = requirement_findings({**DEFAULT_LANE, "vllm": "0.31.0"}, VLLM_REQUIRES, LINUX)
    assert messages(found) == ["transformers 5.23.0 is outside vllm's range transformers<5.18.0,>=5.10.4 declared by vllm 0.31.0"]


def test_pre_releases_count_and_dev_builds_sort_before_their_release():
    # a release candidate of transformers 5 is inside trl 1.16's transformers>=4.56.2 (SpecifierSet alone says no)
    assert requirement_findings({**DEFAULT_LANE, "transformers": "5.0.0rc1"}, DEFAULT_REQUIRES, LINUX)[0] == []
    found, _ = requirement_findings({**LEGACY_LANE, "transformers": "4.46.0.dev0"}, LEGACY_REQUIRES, LINUX)
    assert messages(found) == ["transformers 4.46.0.dev0 is outside trl's range transformers>=4.46.0 declared by trl 0.15.2"]
    assert version_in("2.13.0+cpu", "==2.13.0") and not version_in("4.49.0", "<4.49")
    # PEP 440: a release candidate of 0.19 is not "<0.19", but it is ">=0.18"
    assert version_in("0.19.0rc1", ">=0.18") and not version_in("0.19.0rc1", "<0.19")


def test_a_missing_base_requirement_fails_and_a_missing_extra_target_does_not():
    found, _ = requirement_findings({**DEFAULT_LANE, "accelerate": None}, DEFAULT_REQUIRES, LINUX)
    assert "accelerate is not installed, but trl 1.16.0 requires accelerate>=1.10.1" in messages(found)
    assert all(f.status == "fail" for f in found)
    # peft is only in trl's `peft` extra: not installed is fine
    assert requirement_findings({**DEFAULT_LANE, "peft": None}, {"trl": TRL_1_16_0}, LINUX)[0] == []


def test_extras_apply_only_when_the_package_they_are_named_after_is_installed():
    # datasets[benchmarks] pins torch==2.0.1 and transformers==4.30.1: no package is called benchmarks
    assert requirement_findings(DEFAULT_LANE, {"datasets": DATASETS_5_2_0}, LINUX)[0] == []
    # trl[deepspeed] excludes transformers 5.1.0, which counts once deepspeed is installed
    installed = {**DEFAULT_LANE, "transformers": "5.1.0"}
    assert requirement_findings(installed, {"trl": TRL_1_16_0}, LINUX)[0] == []
    found, _ = requirement_findings({**installed, "deepspeed": "0.18.6"}, {"trl": TRL_1_16_0}, LINUX)
    assert messages(found) == ["transformers 5.1.0 is outside trl[deepspeed]'s range transformers!=5.1.0 declared by trl 1.16.0"]
    found, _ = requirement_findings({**DEFAULT_LANE, "deepspeed": "0.17.0"}, {"trl": TRL_1_16_0}, LINUX)
    assert messages(found) == ["deepspeed 0.17.0 is outside trl[deepspeed]'s range deepspeed>=0.18.6 declared by trl 1.16.0"]


def test_names_are_normalized():
    assert normalize("Deep_Speed") == normalize("deep.speed") == "deep-speed"
    found, _ = requirement_findings({"TRL": "0.15.2", "Transformers": "4.45.0"}, {"Trl": ["Transformers>=4.46.0"]}, LINUX)
    assert messages(found) == ["transformers 4.45.0 is outside trl's range transformers>=4.46.0 declared by trl 0.15.2"]


# -- the known-issues table ---------------------------------------------------------------------------------

TABLE = load_table()
GRPO, PPO, RLOO = {"trainer": "grpo"}, {"trainer": "ppo"}, {"trainer": "rloo"}
VLLM_GRPO = {"trainer": "grpo", "use_vllm": True}

# id -> (a real version set and config that trigger it, [real sets that must not])
REAL_CASES = {
    "KI001": (({"trl": "0.15.2", "transformers": "4.48.3"}, GRPO),
              [({"trl": "0.15.2", "transformers": "4.49.0"}, GRPO), ({"trl": "0.18.2", "transformers": "4.48.3"}, GRPO),
               ({"trl": "0.15.2", "transformers": "4.48.3"}, PPO)]),
    "KI002": (({"trl": "0.14.0", "transformers": "4.52.1"}, GRPO),
              [({"trl": "0.14.0", "transformers": "4.51.3"}, GRPO), ({"trl": "0.15.2", "transformers": "4.52.1"}, GRPO)]),
    "KI003": (({"trl": "0.16.1"}, GRPO), [({"trl": "0.17.0"}, GRPO), ({"trl": "0.16.1"}, PPO)]),
    "KI004": (({"trl": "0.18.2"}, VLLM_GRPO), [({"trl": "0.19.0"}, VLLM_GRPO), ({"trl": "0.18.2"}, GRPO)]),
    "KI005": (({"trl": "0.13.0"}, GRPO), [({"trl": "0.14.0"}, GRPO)]),
    "KI006": (({"trl": "0.21.0"}, RLOO), [({"trl": "0.22.0"}, RLOO), ({"trl": "0.21.0"}, GRPO),
                                          ({"trl": "0.15.2"}, {**RLOO, "reward_model_path": "rm", "rloo_k": 2})]),
    "KI007": (({"trl": "0.11.4"}, PPO), [({"trl": "0.12.0"}, PPO)]),
    "KI008": (({"trl": "1.13.0"}, PPO), [({"trl": "1.12.0"}, PPO), ({"trl": "1.16.0"}, GRPO)]),
    "KI009": (({"trl": "0.16.1"}, {**VLLM_GRPO, "vllm_device": "cuda:1"}),
              [({"trl": "0.15.2"}, {**VLLM_GRPO, "vllm_device": "cuda:1"}), ({"trl": "0.18.2"}, {**VLLM_GRPO, "vllm_device": "cuda:1"}),
               ({"trl": "0.16.1"}, VLLM_GRPO)]),
    "KI010": (({"trl": "0.18.2"}, {**GRPO, "vllm_device": "auto"}), [({"trl": "0.17.0"}, {**GRPO, "vllm_device": "auto"})]),
    "KI011": (({"trl": "0.29.1"}, VLLM_GRPO),
              [({"trl": "1.0.0"}, VLLM_GRPO), ({"trl": "0.29.1"}, {**VLLM_GRPO, "vllm_mode": "colocate"}), ({"trl": "0.15.2"}, VLLM_GRPO)]),
    "KI012": (({"trl": "0.28.0"}, {**GRPO, "max_prompt_length": 512}),
              [({"trl": "0.27.2"}, {**GRPO, "max_prompt_length": 512}), ({"trl": "0.28.0"}, GRPO)]),
    "KI013": (({"trl": "0.28.0", "transformers": "5.3.0"}, GRPO),
              [({"trl": "0.28.0", "transformers": "5.2.0"}, GRPO), ({"trl": "0.29.0", "transformers": "5.23.0"}, GRPO),
               ({"trl": "0.28.0", "transformers": "5.23.0"}, PPO)]),
    "KI014": (({"trl": "1.14.1", "requests": None}, RLOO),
              [({"trl": "1.14.2", "requests": None}, GRPO), ({"trl": "1.14.1", "requests": "2.32.3"}, GRPO),
               ({"trl": "1.12.0", "requests": None}, PPO)]),
    "KI015": (({"deepspeed": "0.19.2", "peft": "0.17.1"}, {**GRPO, "use_peft": True}),
              [({"deepspeed": "0.19.3", "peft": "0.17.1"}, {**GRPO, "use_peft": True}),
               ({"deepspeed": "0.19.1", "peft": "0.17.1"}, {**GRPO, "use_peft": True}),
               ({"deepspeed": "0.19.2", "peft": "0.11.1"}, {**GRPO, "use_peft": True}),
               ({"deepspeed": "0.19.2", "peft": "0.17.1"}, GRPO)]),
}


def ids(found):
    return [f.details["known issue"] for f in found]


def test_every_entry_has_real_version_cases():
    assert sorted(REAL_CASES) == sorted(e["id"] for e in TABLE)


@pytest.mark.parametrize("entry_id", sorted(REAL_CASES))
def test_entry_against_real_versions(entry_id):
    entry = next(e for e in TABLE if e["id"] == entry_id)
    (installed, facts), misses = REAL_CASES[entry_id]
    found = known_issue_findings(installed, facts, [entry])
    assert ids(found) == [entry_id]
    expected = "info" if entry.get("decided_by") else entry["severity"]
    assert found[0].status == expected
    assert found[0].fix and entry_id in found[0].message
    for installed, facts in misses:
        assert known_issue_findings(installed, facts, [entry]) == [], (installed, facts)


def test_the_table_is_well_formed():
    from trl_doctor.registry import builtin_rules

    slugs = {r.slug for r in builtin_rules()}
    assert [e["id"] for e in TABLE] == [f"KI{i:03d}" for i in range(1, len(TABLE) + 1)]
    for entry in TABLE:
        assert entry.get("decided_by") in slugs | {None}, entry["id"]
        assert entry["severity"] in ("fail", "warn")
        assert "http" not in entry["description"] and len(entry["evidence"]) > 40
    # the seed cases of the issue
    titles = " ".join(e["title"] for e in TABLE)
    assert "logits_to_keep" in titles and "PPOTrainer" in titles and "stop token ids" in titles


@pytest.mark.parametrize("bad, error", [
    ({"severity": "maybe"}, "severity"),
    ({"when": {"trl": ">=banana"}}, "invalid version range"),
    ({"description": "see https://github.com/huggingface/trl/issues/2770"}, "link-free"),
    ({"fix": None}, "missing"),
    ({"surprise": 1}, "unknown"),
])
def test_validation_rejects_malformed_entries(bad, error):
    entry = {**TABLE[0], **bad}
    with pytest.raises(_skew.TableError, match=error):
        validate_table([entry])


def test_config_conditions():
    entry = {"config": {"use_vllm": True, "vllm_mode": None, "vllm_device": "*", "trainer": ["grpo", "rloo"]}}
    facts = {"trainer": "rloo", "use_vllm": True, "vllm_device": "cuda:1"}
    assert entry_matches_config(entry, facts)
    assert not entry_matches_config(entry, {**facts, "vllm_mode": "server"})
    assert not entry_matches_config(entry, {**facts, "vllm_device": None})
    assert not entry_matches_config(entry, {**facts, "trainer": "ppo"})
    assert not entry_matches_config(entry, {**facts, "use_vllm": False})
    # without a config (trl-doctor env) only trainer conditions can match
    assert not entry_matches_config(entry, None)
    assert entry_matches_config({"config": {"trainer": "ppo"}}, None) and entry_matches_config({}, None)


def test_known_issues_in_the_three_lanes_for_a_grpo_config():
    assert known_issue_findings(DEFAULT_LANE, GRPO, TABLE) == []
    assert known_issue_findings(VLLM_LANE, {**VLLM_GRPO, "vllm_mode": "colocate"}, TABLE) == []
    legacy = known_issue_findings(LEGACY_LANE, GRPO, TABLE)
    assert ids(legacy) == ["KI001", "KI003"] and {f.status for f in legacy} == {"info"}
    assert [f.details["decided by"] for f in legacy] == ["logits-contract", "pad-token"]


# -- the rule through the command line ----------------------------------------------------------------------

SKEW = FIXTURES / "version-skew"
TRL = Version(version("trl"))


def check(name):
    code, report = check_here(str(SKEW / name), "--select", "version-skew", "--no-smoke")
    return code, result_of(report, "version-skew")


def in_process(*args):
    """The command run in this process, so that a monkeypatched environment reaches it."""
    from click.testing import CliRunner

    from trl_doctor.front.cli import main

    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


def test_ppo_on_a_trl_without_ppo(built_fixtures):
    code, result = check("bad_ppo_on_recent_trl.yaml")
    if TRL < Version("1.13"):
        assert result["status"] == "pass" and code == 0
        return
    assert code == 1 and result["status"] == "fail"
    assert result["message"].startswith(f"KI008 trl 1.13 and later have no PPOTrainer (trl {TRL})")
    assert 'pip install "trl==1.12.0"' in result["fix"]["description"] and result["fix"]["applicability"] == "manual"
    assert result["details"]["installed"]["trl"] == str(TRL)


def test_healthy_grpo_passes_and_lists_what_probes_decide(built_fixtures):
    code, result = check("ok_grpo.yaml")
    assert code == 0 and result["status"] == "pass", result["message"]
    _, checked = requirement_findings(*_skew.installed_requirements())
    assert result["details"]["requirements checked"] == checked > 0
    assert f"trl {TRL}" in result["message"]
    decided = result["details"].get("known issues decided by other rules", [])
    if TRL < Version("0.17"):  # the legacy lane: logits_to_keep and the pad token are the probes' to decide
        assert any(d.startswith("KI003 ") and "decided by pad-token" in d for d in decided), decided
    else:
        assert decided == [] and "no known issue applies to this grpo config" in result["message"]


def test_a_removed_key_is_left_to_trainer_config(built_fixtures):
    code, result = check("bad_vllm_device.yaml")
    if Version("0.16") <= TRL < Version("0.18"):  # a warn: a launch that starts `trl vllm-serve` itself trains
        assert result["status"] == "warn" and "KI009" in result["message"], result
    elif TRL >= Version("0.18"):
        assert result["status"] == "pass" and code == 0
        assert "KI010" in result["message"] and "trainer-config" in result["message"]
        assert any("decided by trainer-config" in d for d in result["details"]["known issues decided by other rules"])


def test_every_fixture_case_is_listed_with_a_status():
    spec = yaml.safe_load((SKEW / "expected.yaml").read_text())
    assert spec["rule"] == "TD007"
    assert set(spec["cases"]) == {p.name for p in SKEW.glob("*.yaml") if p.name != "expected.yaml"}


def test_a_skewed_environment_fails_the_rule(built_fixtures, monkeypatch):
    installed, requires = _skew.installed_requirements()
    skewed = {**installed, "vllm": "0.99.0"}
    monkeypatch.setattr(_skew, "installed_requirements", lambda names=(): (skewed, requires))
    import trl_doctor.rules.version_skew as module

    monkeypatch.setattr(module, "installed_requirements", _skew.installed_requirements)
    code, result = rule_in_this_process(SKEW / "ok_grpo.yaml", "version-skew")
    assert code == 1 and result["status"] == "fail"
    assert result["message"].startswith("vllm 0.99.0 is outside trl[vllm]'s range vllm")
    assert result["details"]["declared by"] == f"trl[vllm] {TRL}"


# -- trl-doctor env -----------------------------------------------------------------------------------------


def test_env_prints_the_skew_section_and_json_findings(monkeypatch):
    proc = run_doctor("env")
    assert proc.returncode == 0
    assert "version skew: " in proc.stdout and "requirements the installed packages declare on each other checked" in proc.stdout
    doc = json.loads(run_doctor("env", "--format", "json").stdout)
    assert isinstance(doc["findings"], list) and doc["requirements_checked"] > 0
    assert doc["packages"]["trl"] == str(TRL)
    if TRL >= Version("1.13"):  # PPO is gone: a trainer-scoped known issue, shown for ppo configs
        ki8 = [f for f in doc["findings"] if f.get("known issue") == "KI008"]
        assert ki8 and ki8[0]["applies to"] == "ppo configs" and ki8[0]["status"] == "fail"
        assert "fail (ppo configs): KI008" in proc.stdout

    installed, requires = _skew.installed_requirements()
    monkeypatch.setattr(_skew, "installed_requirements",
                        lambda names=(): ({**installed, "vllm": "0.99.0"}, requires))
    code, out = in_process("env")
    assert code == 0 and "1 violated" in out
    assert "fail: vllm 0.99.0 is outside trl[vllm]'s range" in out
    doc = json.loads(in_process("env", "--format", "json")[1])
    assert doc["findings"][0]["kind"] == "requirement" and doc["findings"][0]["installed"] == "0.99.0"


def test_env_and_the_rule_import_nothing_heavy():
    code = (
        "import sys\n"
        "from trl_doctor.front.cli import main\n"
        "try:\n    main(['env'])\nexcept SystemExit:\n    pass\n"
        "try:\n"
        f"    main(['check', {str(SKEW / 'ok_grpo.yaml')!r}, '--select', 'version-skew', '--no-smoke'])\n"
        "except SystemExit:\n    pass\n"
        "print('HEAVY', [m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "version skew:" in out and "TD007" in out
    assert "HEAVY []" in out


def test_env_still_reports_when_the_table_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(_skew, "TABLE_PATH", tmp_path / "known_issues.yaml")
    code, out = in_process("env")
    assert code == 0 and "trl" in out
    assert "known issues: the table could not be read (FileNotFoundError" in out


# -- liger-kernel against trl[liger] (docs/coverage.md A9) ---------------------------------------------------------------

def _liger_range() -> str | None:
    """What the installed trl's METADATA declares on liger-kernel under its `liger` extra (read here with packaging)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    for line in requires("trl") or []:
        req = Requirement(line)
        if req.name == "liger-kernel" and req.marker is not None and "liger" in str(req.marker) \
                and req.marker.evaluate({"extra": "liger"}):
            return str(req.specifier)
    return None


def _liger_standin(root, ver: str):
    """liger-kernel as the rule sees it: a name and a version in dist-info metadata, nothing it could run."""
    info = root / f"liger_kernel-{ver}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: liger-kernel\nVersion: {ver}\n")
    (info / "top_level.txt").write_text("liger_kernel\n")
    return root


def _on_gpus(gpus: str, *paths) -> dict:
    import os

    fake = FIXTURES.parent / "tests" / "fake_nvml"
    return {"PYTHONPATH": os.pathsep.join([str(fake), *map(str, paths)]),
            "TRL_DOCTOR_FAKE_GPUS": str(FIXTURES / "precision-and-attention" / "gpus" / gpus)}


def test_liger_kernel_against_trls_liger_extra(built_fixtures, tmp_path):
    from packaging.specifiers import SpecifierSet

    config = built_fixtures / "version-skew" / "bad_liger_kernel_missing.yaml"
    wanted = _liger_range()
    assert wanted, "the installed trl declares no liger-kernel range under its liger extra"
    pin = f'pip install "liger-kernel{wanted}"'
    # not installed, on the launch machine: the trainer stops before the first step
    code, report = run_json("check", str(config), "--select", "version-skew", "--no-smoke", env=_on_gpus("a100-80g.json"))
    r = result_of(report, "TD007")
    assert code == 1 and r["status"] == "fail", r
    assert r["message"].startswith("use_liger_kernel: true but liger-kernel is not installed"), r["message"]
    assert f"{pin} (the range trl {version('trl')}[liger] declares)" in r["message"]
    assert r["fix"]["applicability"] == "manual" and r["fix"]["description"] == pin
    # not the launch machine: no verdict from what this one lacks, only what the launch machine needs
    code, report = run_json("check", str(config), "--select", "version-skew", "--no-smoke", env=_on_gpus("no-driver.json"))
    r = result_of(report, "TD007")
    assert r["status"] == "pass" and f"it must be installed there ({pin})" in r["details"]["liger-kernel"], r
    # installed outside the extra's range: a warning naming both; inside it: a pass that says so
    spec = SpecifierSet(wanted)
    outside = next(v for v in ("0.1.0", "0.3.1", "9.9.9") if not spec.contains(v))
    inside = next(v for v in ("0.5.3", "0.8.2", "0.9.0", "1.0.0") if spec.contains(v))
    code, report = run_json("check", str(config), "--select", "version-skew", "--no-smoke",
                            env=_on_gpus("a100-80g.json", _liger_standin(tmp_path / "old", outside)))
    r = result_of(report, "TD007")
    assert r["status"] == "warn", r
    assert (f"use_liger_kernel: true with liger-kernel {outside}, outside liger-kernel{wanted} that trl {version('trl')} "
            "declares for its liger extra") in r["message"]
    code, report = run_json("check", str(config), "--select", "version-skew", "--no-smoke",
                            env=_on_gpus("a100-80g.json", _liger_standin(tmp_path / "new", inside)))
    r = result_of(report, "TD007")
    assert r["status"] == "pass", r
    assert r["details"]["liger-kernel"] == f"use_liger_kernel: true: liger-kernel {inside} fits trl {version('trl')}[liger]'s liger-kernel{wanted}"


def test_liger_range_is_read_from_an_extra_named_after_no_package():
    """trl[liger] names liger-kernel: the requirement scan never applies that extra, the liger check reads it."""
    lines = ['liger-kernel>=0.8.2; extra == "liger"', 'liger-kernel>=0.8.2; extra == "dev"', "torch>=2.0",
             'liger-kernel==0.5.3; sys_platform != "win32" and extra == "liger"']
    assert _skew.extra_requirement(lines[:3], "liger", "liger-kernel") == ">=0.8.2"
    assert _skew.extra_requirement(lines[1:], "liger", "liger-kernel") == ("==0.5.3" if sys.platform != "win32" else None)
    assert _skew.extra_requirement(lines[1:3], "liger", "liger-kernel") is None



@pytest.mark.other_trl
@pytest.mark.parametrize("release, status", [("1.12.0", "warn"), ("1.14.2", "pass")])
def test_liger_on_an_moe_policy_against_real_trl_releases(built_fixtures, release, status):
    """docs/coverage.md A9, trl#7009: GRPO with use_liger_kernel on a Mixture-of-Experts policy. trl 1.9-1.13's
    GRPOTrainer.compute_loss sends Liger's fused loss down compute_liger_loss, which adds no load-balancing loss, while
    its own loss adds router_aux_loss_coef x aux_loss (GRPOConfig's default 0.001): the router trains without it and
    nothing says so. trl 1.14 computes the aux loss on its full-logits path. Read from each real release's source, as
    installed from PyPI; the installed TRL (1.16) is the fixture's own case (fixtures/version-skew/expected.yaml)."""
    from conftest import real_trl

    config = built_fixtures / "version-skew" / "bad_liger_moe_aux_loss.yaml"
    env = real_trl(release, "grpo")
    code, report = run_json("check", str(config), "--select", "version-skew", "--no-smoke", env=env)
    r = result_of(report, "TD007")
    assert r["status"] == status, r
    if status == "warn":
        assert code == 0
        assert r["message"].startswith("use_liger_kernel: true on a Mixture-of-Experts policy (qwen2_moe): trl 1.12.0 "
                                       "computes the loss with Liger's fused GRPO loss (trl/trainer/grpo_trainer.py:"), r
        assert "router_aux_loss_coef (0.001)" in r["message"] and 'pip install "trl>=1.14"' in r["message"], r
        # a dense policy with the same settings on the same release: nothing to drop
        dense = built_fixtures / "version-skew" / "bad_liger_kernel_missing.yaml"
        _, report = run_json("check", str(dense), "--select", "version-skew", "--no-smoke", env=env)
        assert "Mixture-of-Experts" not in json.dumps(result_of(report, "TD007"))
    else:
        assert "Mixture-of-Experts" not in json.dumps(r), r
