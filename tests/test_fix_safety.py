"""--fix never loses or half-writes a file: nothing in a Hugging Face hub cache is written (however the model is
named), a kill at any step of the transaction leaves each file old or new and the next run finishes the set,
concurrent runs take turns, and a file that cannot be written stops the fix before anything changes (or rolls
back what was renamed). Real files, the real rule's fix, real transformers loading and the real command."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, result_of, run_doctor, run_json
from trl_doctor import Edit, Fix, InputError
from trl_doctor.fix import fixer as _fixer
from trl_doctor.context.hubcache import in_hub_cache

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

MODEL = "gpt2-nopad"  # bad_gpt2_nopad.yaml's fix writes tokenizer_config.json, config.json, generation_config.json
CONFIG = "pad-token/bad_gpt2_nopad.yaml"
TOUCHED = ("tokenizer_config.json", "config.json", "generation_config.json")
LEFTOVER = re.compile(r"(\.tmp|\.journal)$")
SELECT = ("--no-smoke", "--select", "pad-token")

APPLY = """
import json, sys
from trl_doctor import Edit, Fix
from trl_doctor.fix import fixer as _fixer
fix = Fix("pad", tuple(Edit(path, set=tuple(map(tuple, pairs))) for path, pairs in json.loads(sys.argv[1])))
print(json.dumps([[str(p), str(b)] for p, b in _fixer.apply(_fixer.plan([fix]), [fix])]))
"""


def tree(root: Path) -> dict:
    """Every entry under `root`: a symlink's target, a file's sha256 (so a rewrite, a new .bak or a link turned into
    a file all show)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if rel == "version.txt":
            continue  # transformers 4.x marks the cache's layout version at import: not the doctor's write
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
        else:
            out[rel] = ("dir",)
    return out


def leftovers(*folders: Path) -> list[str]:
    return sorted(p.name for f in folders for p in f.iterdir() if LEFTOVER.search(p.name))


def backups(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"{name}.trl-doctor.bak*"))


def pad_fix(config: Path) -> Fix:
    """The pad-token rule's own fix for `config`, from the engine in this process."""
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context, Options
    from trl_doctor.engine import run_rule
    from trl_doctor.registry import builtin_rules

    (rule,) = [r for r in builtin_rules() if r.slug == "pad-token"]
    with Context(load_config(config), Options(smoke=False)) as ctx:
        fix = run_rule(rule, ctx).fix
    assert fix is not None and fix.applicability == "safe"
    names = sorted(Path(e.path).name for e in fix.edits)
    assert names in (sorted(TOUCHED), sorted(TOUCHED + ("special_tokens_map.json",)))  # the latter: transformers 4.x
    return fix


# -- the hub cache -----------------------------------------------------------------------------------------------

def fake_hub_cache(cache: Path, model: Path, repo: str = "models--org--gpt2-nopad") -> Path:
    """`cache/models--org--name/{blobs,snapshots/<rev>,refs/main}` as huggingface_hub lays it out; the snapshot."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    root = cache / repo
    snapshot = root / "snapshots" / rev
    (root / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(rev)
    for f in model.iterdir():
        blob = root / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


def test_in_hub_cache_by_location_and_by_layout(built_fixtures, tmp_path, monkeypatch):
    snapshot = fake_hub_cache(tmp_path / "elsewhere", built_fixtures / "models" / MODEL)
    link = tmp_path / "my-model"
    link.symlink_to(snapshot)
    own = tmp_path / "own"
    own.mkdir()
    (own / "config.json").symlink_to(next((snapshot.parent.parent / "blobs").iterdir()))
    for var in ("HF_HUB_CACHE", "HF_HOME", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    # by layout, wherever it is: the snapshot, its files, a file not there yet, a local link, links into blobs/
    for path in (snapshot, snapshot / "config.json", snapshot / "new.json", link, link / "config.json", own, own / "x"):
        assert in_hub_cache(path), path
    assert not in_hub_cache(built_fixtures / "models" / MODEL) and not in_hub_cache(tmp_path)
    # by location: anything under a cache root the environment names
    plain = tmp_path / "hfhome" / "hub" / "plain"
    plain.mkdir(parents=True)
    assert not in_hub_cache(plain)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert in_hub_cache(plain) and in_hub_cache(plain / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "own"))
    assert in_hub_cache(own / "anything.json")


HOWS = ["snapshot path (HF_HUB_CACHE)", "local symlink (HF_HOME)", "layout only", "hub id"]
CACHE_CASES = [(CONFIG, MODEL, "pad-token", how) for how in HOWS] + [
    ("eos-termination/bad_llama3_eot_missing.yaml", "llama3-eosbug", "eos-termination", HOWS[0]),
    ("vllm-tokenizer-drift/bad_stop_string_added_tokens.yaml", "qwen2-search", "vllm-tokenizer-drift", HOWS[0]),
]


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.parametrize("config, name, slug, how", CACHE_CASES, ids=[f"{c[2]}/{c[3]}" for c in CACHE_CASES])
def test_fix_never_writes_a_hub_cache(built_fixtures, tmp_path, config, name, slug, how):
    layout_only = how == "layout only"
    cache = tmp_path / ("somewhere/else" if layout_only else "hf/hub")
    snapshot = fake_hub_cache(cache, built_fixtures / "models" / name, f"models--org--{name}")
    env = {"HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HOME": str(tmp_path / "empty-home"), "HF_HUB_OFFLINE": "1"}
    if how.startswith("snapshot") or how == "hub id":
        env["HF_HUB_CACHE"] = str(cache)
    elif how.startswith("local symlink"):
        env["HF_HOME"] = str(tmp_path / "hf")
        env.pop("HF_HUB_CACHE")
    model = {"hub id": f"org/{name}", "local symlink (HF_HOME)": "./my-model"}.get(how, str(snapshot))
    (tmp_path / "my-model").symlink_to(snapshot)
    cfg = tmp_path / "run.yaml"
    cfg.write_text((FIXTURES / config).read_text().replace(f"../models/{name}", model)
                   .replace("../data/", f"{FIXTURES / 'data'}/"))
    shutil.copy(FIXTURES / Path(config).parent / "rewards.py", tmp_path / "rewards.py")
    before = tree(cache)

    proc = run_doctor("check", str(cfg), "--no-smoke", "--select", slug, "--fix", "--format", "json", env=env)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    assert tree(cache) == before  # no file rewritten, every symlink still a symlink, no .bak, no temporary
    assert [a["file"] for a in report["applied"]] in ([], [str(cfg)])  # vllm-tokenizer-drift also edits the config
    fix = result_of(report, slug)["fix"]
    assert fix["applicability"] == "manual" and not fix["applied"] and fix["files"] == []
    assert "Hugging Face cache" in fix["description"] and f"cp -rL {snapshot} <dest>" in fix["description"]
    assert "point `model_name_or_path` at it and rerun --fix" in fix["description"]


def test_the_fixer_refuses_a_cache_file_or_a_symlink_even_if_a_rule_asks(built_fixtures, tmp_path):
    snapshot = fake_hub_cache(tmp_path / "cache", built_fixtures / "models" / MODEL)
    mine = tmp_path / "mine.json"
    mine.write_text('{"a": 1}\n')
    link = tmp_path / "link.json"
    link.symlink_to(mine)
    before = tree(tmp_path)
    for target, why in ((snapshot / "config.json", "Hugging Face hub cache"), (link, "symbolic link")):
        fix = Fix("x", (Edit(str(mine), set=(("a", 2),)), Edit(str(target), set=(("pad_token_id", 0),))))
        with pytest.raises(InputError, match=f"^{re.escape(str(target))}: cannot apply the fix: .*{why}.*; nothing was changed$"):
            _fixer.apply(_fixer.plan([fix]), [fix])
        assert tree(tmp_path) == before


# -- kills at every step -----------------------------------------------------------------------------------------

def _apply_killed_at(edits: list, n: int | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRL_DOCTOR_FIX_KILL_AT"}
    if n is not None:
        env["TRL_DOCTOR_FIX_KILL_AT"] = str(n)
    return subprocess.run([sys.executable, "-c", APPLY, json.dumps(edits)], env=env, capture_output=True, text=True,
                          timeout=120)


def _assert_each_file_old_or_new(files: dict, model: Path, tok: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    for path, (old, new) in files.items():
        now = path.read_bytes()
        assert now in (old, new), path
        json.loads(now)
        for b in backups(path.parent, path.name):
            assert b.read_bytes() == old, b  # never empty, never partial
        assert len(backups(path.parent, path.name)) <= 1
    assert AutoConfig.from_pretrained(str(model), local_files_only=True).vocab_size == 320
    assert AutoTokenizer.from_pretrained(str(tok), local_files_only=True).eos_token == "<|endoftext|>"


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.parametrize("folders", [1, 2], ids=["one folder", "tokenizer in a folder of its own"])
def test_a_kill_at_any_step_leaves_old_or_new_files_and_the_next_run_finishes(fixture_copy, tmp_path, folders):
    fix = pad_fix(fixture_copy / CONFIG)
    pristine = fixture_copy / "models" / MODEL
    n, kills = 0, 0
    while True:
        n += 1
        model = tmp_path / f"run{n}" / "model"
        tok = model if folders == 1 else tmp_path / f"run{n}" / "tokenizer"
        for dest in {model, tok}:
            shutil.copytree(pristine, dest)
        tok_files = ("tokenizer_config.json", "special_tokens_map.json")  # the latter where transformers 4 wrote one
        edits = [[str((tok if Path(e.path).name in tok_files else model) / Path(e.path).name), list(e.set)]
                 for e in fix.edits]
        planned = _fixer.plan([Fix("pad", tuple(Edit(p, set=tuple(map(tuple, s))) for p, s in edits))])
        files = {c.path: (c.old, c.new) for c in planned}
        assert len(files) in (3, 4)  # tokenizer_config, config, generation_config (+ special_tokens_map)
        proc = _apply_killed_at(edits, n)
        if proc.returncode == 0:  # n is past the last step: the transaction ran whole
            break
        assert proc.returncode == -9, proc.stderr
        kills += 1
        _assert_each_file_old_or_new(files, model, tok)
        # the next run is killed too, at its second step (its recovery's, or its own transaction's) ...
        assert _apply_killed_at(edits, 2).returncode in (-9, 0)
        _assert_each_file_old_or_new(files, model, tok)
        # ... and the one after finishes the set
        assert _apply_killed_at(edits, None).returncode == 0
        for path, (old, new) in files.items():
            assert path.read_bytes() == new, (n, path)
            assert [b.read_bytes() for b in backups(path.parent, path.name)] == [old], (n, path)
        assert leftovers(model, tok) == [], n
        assert json.loads(_apply_killed_at(edits, None).stdout) == []  # converged: nothing left to change
    # a backup and a new content written per file, a journal per folder, two renames per file, the journals removed
    assert kills == 2 * len(files) + folders + 2 * len(files) + folders
    assert [p.read_bytes() for p in files] == [new for _, new in files.values()] and leftovers(model, tok) == []


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 7, 9, 12, 14])
def test_check_fix_killed_then_rerun_converges(fixture_copy, n):
    """Through the command: 3 = a temporary written, 7 = every temporary written, no journal yet, 9 = one backup in
    place, 12 = tokenizer_config.json new and config.json old (the re-check alone would pass), 14 = all renamed."""
    config = fixture_copy / CONFIG
    model = fixture_copy / "models" / MODEL
    original = {f: (model / f).read_bytes() for f in TOUCHED}
    final = {c.path.name: c.new for c in _fixer.plan([pad_fix(config)])}
    killed = run_doctor("check", str(config), *SELECT, "--fix", env={"TRL_DOCTOR_FIX_KILL_AT": str(n)})
    assert killed.returncode == -9, killed.stderr
    code, report = run_json("check", str(config), *SELECT, "--fix", env={})
    assert code == 0 and result_of(report, "pad-token")["status"] == "pass", report
    for f in TOUCHED:
        assert (model / f).read_bytes() == final[f], f
        assert [b.read_bytes() for b in backups(model, f)] == [original[f]], f
    assert leftovers(model) == []


@pytest.mark.slow
def test_four_concurrent_fixes_on_one_folder_take_turns(fixture_copy):
    config = fixture_copy / CONFIG
    model = fixture_copy / "models" / MODEL
    original = {f: (model / f).read_bytes() for f in TOUCHED}
    final = {c.path.name: c.new for c in _fixer.plan([pad_fix(config)])}
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    from conftest import trl_doctor_exe

    procs = [subprocess.Popen([trl_doctor_exe(), "check", str(config), *SELECT, "--fix", "--format", "json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert result_of(json.loads(out), "pad-token")["status"] == "pass"
    assert sum(len(json.loads(out)["applied"]) > 0 for out, _ in outs) == 1  # the others found nothing left
    for f in TOUCHED:
        assert (model / f).read_bytes() == final[f], f
        assert [b.read_bytes() for b in backups(model, f)] == [original[f]], f
    assert leftovers(model) == []


# -- files that cannot be written --------------------------------------------------------------------------------

def _one_error_line(proc: subprocess.CompletedProcess, file: Path, reason: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"trl-doctor: error: {file}: cannot apply the fix: {reason}"), lines[0]
    assert "nothing was changed" in lines[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a chmod 444 file anyway")
def test_a_read_only_file_stops_the_fix_before_any_write(fixture_copy):
    model = fixture_copy / "models" / MODEL
    (model / "config.json").chmod(0o444)
    before = tree(model)
    proc = run_doctor("check", str(fixture_copy / CONFIG), *SELECT, "--fix", env={})
    _one_error_line(proc, model / "config.json", "the file cannot be opened for writing")
    assert tree(model) == before


def _chattr(flag: str, path: Path) -> bool:
    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("flag, reason", [
    ("+i", "the file cannot be opened for writing"),  # immutable: refused before any write, even to root
    ("+a", "Operation not permitted"),  # append-only: opens for append, but the rename over it fails mid-commit
])
def test_an_unwritable_file_changes_nothing_even_for_root(fixture_copy, flag, reason):
    model = fixture_copy / "models" / MODEL
    target = model / "config.json"  # renamed after tokenizer_config.json: the append-only case rolls that one back
    before = tree(model)
    if not _chattr(flag, target):
        pytest.skip(f"chattr {flag} is not available or not permitted here")
    try:
        proc = run_doctor("check", str(fixture_copy / CONFIG), *SELECT, "--fix", env={})
    finally:
        _chattr(flag.replace("+", "-"), target)
    _one_error_line(proc, target, reason)
    assert tree(model) == before


def test_a_folder_that_cannot_take_a_file_changes_nothing(tmp_path):
    """Root-proof: the second target's folder is a file, so no new file can be made there."""
    good = tmp_path / "config.json"
    good.write_text('{"pad_token_id": null}\n')
    (tmp_path / "not-a-folder").write_text("x")
    bad = tmp_path / "not-a-folder" / "generation_config.json"
    fix = Fix("x", (Edit(str(good), set=(("pad_token_id", 0),)), Edit(str(bad), set=(("pad_token_id", 0),))))
    before = tree(tmp_path)
    with pytest.raises(InputError, match=r"generation_config.json: cannot apply the fix: .*Not a directory.*; nothing was changed$"):
        _fixer.apply(_fixer.plan([fix]), [fix])
    assert tree(tmp_path) == before
