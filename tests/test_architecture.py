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
from trl_doctor.registry import builtin_rules

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
            elif absolute in ("trl_doctor", "trl_doctor.") and "rules" in names and path.name != "registry.py":
                bad.append(f"{where}: imports the rules package outside the registry")
    assert not bad, "\n".join(bad)


def test_the_meta_test_catches_a_breach(tmp_path):
    # the reader must see imports inside functions and relative ones, or the tests above prove nothing
    src = tmp_path / "leaky.py"
    src.write_text("from trl_doctor import fail, _fixer\n"
                   "def check(ctx):\n"
                   "    from trl_doctor.fix.fixer import plan\n"
                   "    from .batch_geometry import launch_processes\n"
                   "    from trl_doctor.facts.launch.launcher import gpus\n"
                   "    import json\n")
    found = rule_breaches_at(src)
    assert len(found) == 3, found
    assert "_fixer" in found[0] and "trl_doctor.fix.fixer" in found[1] and "relative import" in found[2]


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

    code = ("import sys; from trl_doctor.front import cli; from trl_doctor import registry; registry.all_rules(); "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_collecting_the_tests_imports_no_heavy_package():
    """Every pytest process collects the test modules it runs (each xdist worker; CI runs one pytest per lane and
    step): a skip condition or marker that imported TRL cost each of them about 7 s (tests/conftest.py)."""
    from conftest import COLLECTED_WITH

    assert COLLECTED_WITH == [], f"collecting the tests imported {COLLECTED_WITH}: ask the installed releases when a " \
        "test is set up (a string skipif condition), or read TRL's files (trl_doctor.facts.trl.installed.trainer_source)"


def test_a_whole_check_leaves_the_printing_process_without_the_heavy_stack(built_fixtures):
    import subprocess

    config = built_fixtures / "smoke-step" / "ok_grpo_qwen2.yaml"
    code = ("import sys\nfrom click.testing import CliRunner\nfrom trl_doctor.front.cli import main\n"
            f"r = CliRunner().invoke(main, ['check', {str(config)!r}, '--format', 'json'])\n"
            # exit 1 is allowed: logits-contract fails by design on the legacy lane's pair
            "assert r.exit_code in (0, 1), r.output\nassert '\"smoke-step\"' in r.output\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


# The floors of the house, top to bottom (docs/architecture.md draws them): a module imports its own floor and
# the floors below it. The one import that runs back up is discovery: the registry finds the rules.
FLOORS = {
    "__init__": -1,  # the package's face (trl_doctor/__init__.py): the public API, which only its users import
    "front": 0, "__main__": 0, "testing": 0,  # testing: the rule harness, a door of its own (tests, plugin authors)
    "supervisor": 1, "static": 1, "report": 1, "fix": 1, "watch": 1,
    "worker": 2,
    "engine": 3, "capture": 3,  # the run loop, below the worker, --static and the API that run it
    "plugin": 4, "rules": 4,
    "facts": 5,
    "context": 6,
    "runtime": 7,
    "errors": 8, "types": 8, "registry": 8, "protocol": 8, "cache": 8, "version": 8, "wording": 8, "options": 8,
    "interface": 8, "edits": 8, "vocabulary": 8, "rule_index": 8,
}
ALLOWED_UPWARD = {("trl_doctor/registry.py", "trl_doctor.rules")}  # discovery of the built-in rules


def floor_of(module: str) -> int | None:
    parts = module.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 and parts[0] == "trl_doctor" else None


def upward_imports(package: Path) -> list[tuple[str, str]]:
    """(file, module) for every import, at any depth, of a floor above the importing module's."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        parts = rel.with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pkg = module if parts[-1] == "__init__" else module.rsplit(".", 1)[0]
        here = floor_of(module)
        if here is None:
            continue
        for _, target, names, level in imports(path):
            if level:
                base = pkg.split(".")[: len(pkg.split(".")) - (level - 1)]
                target = ".".join(base + ([target] if target else []))
            # `from trl_doctor import X`: a floor's module, or a name of the package's face (its __init__: the
            # public API, above every floor)
            targets = [f"{target}.{n}" if n in FLOORS else f"{target}.__init__" for n in names] \
                if target == "trl_doctor" else [target]
            for t in targets:
                there = floor_of(t)
                if there is not None and there < here:
                    out.append((str(rel), t))
    return out


def test_every_module_has_a_floor():
    tops = {p.stem for p in ENGINE.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in ENGINE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert tops - set(FLOORS) == set(), "a new top-level module needs a floor in FLOORS and docs/architecture.md"


def test_imports_run_down_the_floors():
    ups = set(upward_imports(ENGINE))
    assert ups <= ALLOWED_UPWARD, "\n".join(f"{f} imports {m}" for f, m in sorted(ups - ALLOWED_UPWARD))


def test_the_floor_test_sees_an_upward_import(tmp_path):
    pkg = tmp_path / "trl_doctor"
    (pkg / "facts").mkdir(parents=True)
    (pkg / "facts" / "leak.py").write_text("def f():\n    from ..front.cli import main\n    from trl_doctor import wording\n"
                                           "    from trl_doctor import Unavailable\n")
    assert upward_imports(pkg) == [("trl_doctor/facts/leak.py", "trl_doctor.front.cli"),
                                   ("trl_doctor/facts/leak.py", "trl_doctor.__init__")]


def test_the_fixtures_folder_on_the_path_shadows_no_distribution():
    # conftest puts fixtures/ on the import path for its builders; PyPI's `build` (the packaging test's) stays `build`
    import subprocess

    code = ("import sys, importlib.util; sys.path.insert(0, 'tests'); import conftest; "
            "print(importlib.util.find_spec('build').origin); print(importlib.util.find_spec('build_fixtures').origin)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    build, builders = out.stdout.split()
    assert "site-packages" in build and Path(builders) == ROOT / "fixtures" / "build_fixtures.py"


def import_cycles(package: Path, layer: str) -> list[list[str]]:
    """The import cycles among the modules of `package`'s sub-package `layer` (imports at any depth, a function's
    lazy ones included: a cycle kept apart only by laziness is still one), each as its sorted modules."""
    base = package / layer
    names = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in names}
    for module, path in names.items():
        pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for _, target, imported, level in imports(path):
            if level:
                target = ".".join(pkg.split(".")[: len(pkg.split(".")) - (level - 1)] + ([target] if target else []))
            for t in [target, *(f"{target}.{n}" for n in imported)]:
                while t and t not in names:
                    t = t.rpartition(".")[0]
                if t and t != module and not module.startswith(t + "."):  # a package's own __init__ is no cycle
                    graph[module].add(t)
    cycles, seen = [], set()
    for start in graph:  # the strongly connected part each module is in, by reachability both ways
        if start in seen:
            continue
        part = {m for m in _reachable(graph, start) if start in _reachable(graph, m)}
        seen |= part
        if len(part) > 1:
            cycles.append(sorted(part))
    return cycles


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    reach, todo = {start}, [start]
    while todo:
        for nxt in graph[todo.pop()] - reach:
            reach.add(nxt)
            todo.append(nxt)
    return reach


def test_the_facts_layer_has_no_import_cycle():
    assert import_cycles(ENGINE, "facts") == []


def test_the_package_has_no_import_cycle():
    # every module of trl_doctor, across floors and within one (the rules are leaves: tested above)
    assert import_cycles(ENGINE, ".") == []


def test_the_cycle_test_sees_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "trl_doctor"
    (pkg / "facts").mkdir(parents=True)
    (pkg / "facts" / "a.py").write_text("from .b import x\n")
    (pkg / "facts" / "b.py").write_text("def x():\n    from trl_doctor.facts import a\n")
    (pkg / "facts" / "c.py").write_text("from . import a\n")
    assert import_cycles(pkg, "facts") == [["trl_doctor.facts.a", "trl_doctor.facts.b"]]
