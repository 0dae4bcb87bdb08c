"""The built-in rules' declarations as data (trl_doctor/rule_index.py, trl_doctor/data/rule_index.json): the
command line's own process lists, selects and reports rules without importing them and the facts they judge with;
a module whose source changed is imported as before; a worker imports every rule itself."""

from __future__ import annotations

import json
import subprocess
import sys

from trl_doctor.registry import Rule, all_rules, builtin_modules, index_data
from trl_doctor.rule_index import INDEX, Deferred, Reader


def test_the_committed_index_is_the_rules_own():
    """Written by `python tools/rule_index.py` from the rules as they are (a stale one is slower, never wrong)."""
    assert json.loads(INDEX.read_text()) == json.loads(json.dumps(index_data())), \
        "trl_doctor/data/rule_index.json is stale: python tools/rule_index.py"


def test_rules_read_from_the_index_are_the_imported_ones():
    lazy, eager = all_rules(lazy=True), all_rules()
    assert lazy == eager and len(lazy) >= 38
    for a, b in zip(lazy, eager):
        assert (a.explanation, a.module, a.static_skip, a.contexts) == (b.explanation, b.module, b.static_skip, b.contexts)
        assert (a.prepare is None) == (b.prepare is None), a.id
        assert isinstance(a.check, Deferred) and not isinstance(b.check, Deferred), a.id


def test_a_deferred_judgment_is_the_rules_own_and_names_a_vanished_rule():
    """The first call imports the module and calls the rule's own function; a rule its module no longer declares
    is a RegistryError naming the writer, never another rule's judgment."""
    import functools

    from trl_doctor.registry import RegistryError, _judgment

    eager = {r.id: r for r in all_rules()}
    pad = next(r for r in all_rules(lazy=True) if r.slug == "pad-token")
    assert pad.check.target is None  # nothing imported for it yet
    pad.check(None)  # a judgment is a generator function: the call makes the generator, the rule's own
    assert pad.check.target is eager[pad.id].check
    gone = Deferred(functools.partial(_judgment, pad.module, "TD999", "check"), "TD999")
    try:
        gone()
    except RegistryError as exc:
        assert "no longer declares TD999" in str(exc) and "tools/rule_index.py" in str(exc)
    else:
        raise AssertionError("a vanished rule must not judge")


def test_a_changed_module_or_declaring_module_is_imported_not_read(tmp_path):
    from conftest import ROOT

    data = json.loads(INDEX.read_text())
    folder = ROOT / "rules"
    assert Reader(INDEX).declared(folder / "pad_token.py", "pad_token") is not None
    changed = json.loads(json.dumps(data))
    changed["modules"]["pad_token"]["digest"] = "0" * 32
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    reader = Reader(tmp_path / "changed.json")
    assert reader.declared(folder / "pad_token.py", "pad_token") is None
    assert reader.declared(folder / "eos_termination.py", "eos_termination") is not None
    declaring = dict(data, declaring="0" * 32)
    (tmp_path / "declaring.json").write_text(json.dumps(declaring))
    assert Reader(tmp_path / "declaring.json").modules == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert Reader(tmp_path / "bad.json").modules == {}
    assert Reader(tmp_path / "missing.json").declared(folder / "pad_token.py", "pad_token") is None


def test_listing_and_resolving_rules_imports_no_rule_and_a_worker_imports_every_one():
    """A process boundary: what a fresh interpreter has imported after the front door's calls."""
    code = ("import sys\n"
            "from trl_doctor.registry import all_rules\n"
            "lazy = all_rules(lazy=True)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('trl_doctor.rules.', 'trl_doctor.facts.'))))\n"
            "all_rules()\n"
            "print(len([m for m in sys.modules if m.startswith('trl_doctor.rules.')]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.splitlines()
    assert before == "[]", before
    assert int(after) >= len(builtin_modules())
    assert all(isinstance(r, Rule) for r in all_rules(lazy=True))
