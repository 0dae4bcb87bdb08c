"""The house rules, read from the source with ast: `rules/` holds rules only, each a leaf over the public
API (`trl_doctor`) and the facts layer (`trl_doctor.facts`); no rule imports another rule or a private
module; the engine, the facts layer and the trainer run never import a rule."""

from __future__ import annotations

import pytest

import ast
import sys
from pathlib import Path

import trl_doctor
from conftest import ROOT
from trl_doctor._registry import builtin_rules

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

RULES = ROOT / "rules"
ENGINE = ROOT / "trl_doctor"


def imports(path: Path) -> list[tuple[int, str, tuple[str, ...], int]]:
    """(line, module, names, relative level) of every import in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, (), 0) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append((node.lineno, node.module or "", tuple(a.name for a in node.names), node.level))
    return out


def rule_breaches(path: Path) -> list[str]:
    public = set(trl_doctor.__all__)
    bad = []
    for line, module, names, level in imports(path):
        where = f"{path.relative_to(ROOT)}:{line}"
        if level:
            bad.append(f"{where}: relative import `from {'.' * level}{module} import ...` (another rule or a helper)")
        elif module == "trl_doctor":
            private = [n for n in names if n not in public]
            if private or not names:
                bad.append(f"{where}: `trl_doctor` names outside the public API: {private or 'import trl_doctor'}")
        elif module == "trl_doctor.facts" or module.startswith("trl_doctor.facts."):
            continue
        elif module.startswith("trl_doctor"):
            bad.append(f"{where}: imports `{module}` (neither the public API nor the facts layer)")
    return bad


def test_rules_folder_holds_rules_only():
    modules = sorted(p.stem for p in RULES.glob("*.py") if p.name != "__init__.py")
    assert all(not m.startswith("_") for m in modules), modules
    with_rules = {r.module.rsplit(".", 1)[1] for r in builtin_rules()}
    assert set(modules) == with_rules, set(modules) ^ with_rules
    assert not [p for p in RULES.iterdir() if p.is_dir() and p.name != "__pycache__"]


def test_every_rule_is_a_leaf_over_the_public_api_and_the_facts_layer():
    bad = [b for p in sorted(RULES.glob("*.py")) for b in rule_breaches(p)]
    assert not bad, "\n".join(bad)


def test_engine_facts_and_trainer_run_never_import_a_rule():
    bad = []
    for path in sorted(ENGINE.rglob("*.py")):
        for line, module, names, level in imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            absolute = module if not level else "trl_doctor." + module  # good enough for trl_doctor/*.py
            if absolute.startswith("trl_doctor.rules.") or module.startswith("rules"):
                bad.append(f"{where}: imports the rule module `{module}`")
            elif absolute in ("trl_doctor", "trl_doctor.") and "rules" in names and path.name != "_registry.py":
                bad.append(f"{where}: imports the rules package outside the registry")
    assert not bad, "\n".join(bad)


def test_the_meta_test_catches_a_breach(tmp_path):
    # the reader must see imports inside functions and relative ones, or the tests above prove nothing
    src = tmp_path / "leaky.py"
    src.write_text("from trl_doctor import fail, _fixer\n"
                   "def check(ctx):\n"
                   "    from trl_doctor._memory import estimate\n"
                   "    from .batch_geometry import launch_processes\n"
                   "    from trl_doctor.facts.launch import gpus\n"
                   "    import json\n")
    found = rule_breaches_at(src)
    assert len(found) == 3, found
    assert "_fixer" in found[0] and "trl_doctor._memory" in found[1] and "relative import" in found[2]


def rule_breaches_at(path: Path) -> list[str]:
    # rule_breaches() shows paths relative to the repository; a temporary file is shown as it is
    public = set(trl_doctor.__all__)
    out = []
    for line, module, names, level in imports(path):
        if level:
            out.append(f"{line}: relative import")
        elif module == "trl_doctor" and [n for n in names if n not in public]:
            out.append(f"{line}: {[n for n in names if n not in public]}")
        elif module.startswith("trl_doctor") and not (module == "trl_doctor" or module.startswith("trl_doctor.facts")):
            out.append(f"{line}: {module}")
    return out


def test_the_printing_process_imports_no_heavy_package():
    import subprocess

    code = ("import sys; from trl_doctor import _cli, _registry; _registry.all_rules(); "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_whole_check_leaves_the_printing_process_without_the_heavy_stack(built_fixtures):
    import subprocess

    config = built_fixtures / "smoke-step" / "ok_grpo_qwen2.yaml"
    code = ("import sys\nfrom click.testing import CliRunner\nfrom trl_doctor._cli import main\n"
            f"r = CliRunner().invoke(main, ['check', {str(config)!r}, '--format', 'json'])\n"
            # exit 1 is allowed: logits-contract fails by design on the legacy lane's pair
            "assert r.exit_code in (0, 1), r.output\nassert '\"smoke-step\"' in r.output\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
