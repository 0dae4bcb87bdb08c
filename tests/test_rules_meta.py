"""Meta-tests over every built-in rule: unique ids and slugs, module named after the slug, explanation
with the fixed headings, and a fixture folder with at least one broken and one healthy case."""

from __future__ import annotations

import yaml

from conftest import FIXTURES, run_doctor
from trl_doctor.registry import all_rules, builtin_rules

HEADINGS = ("What it does", "Why is this bad?", "Example", "Fix safety")  # ruff's rule-doc shape, in this order
MAX_LINES = 30  # an explanation's length, its summary line included


def test_ids_and_slugs_unique():
    rules = all_rules()
    assert len({r.id for r in rules}) == len(rules)
    assert len({r.slug for r in rules}) == len(rules)


def test_builtin_rules_present():
    ids = {r.id: r.slug for r in builtin_rules()}
    assert ids["TD001"] == "pad-token"
    assert ids["TD006"] == "smoke-step"
    assert ids["TD009"] == "trainer-config"


def test_module_named_after_slug_and_documented():
    for r in builtin_rules():
        assert r.module == "trl_doctor.rules." + r.slug.replace("-", "_"), r
        assert r.explanation.startswith(f"{r.id} {r.slug}:"), r.id
        summary, blank, *body = r.explanation.splitlines()
        assert blank == "", f"{r.id}: the summary is one line"
        headings = [line for line in body if line and not line.startswith(" ")]
        assert [h for h in headings if h != "Versions"] == list(HEADINGS), f"{r.id} explanation's headings: {headings}"
        assert "Versions" not in headings or headings.index("Versions") == 2, f"{r.id}: Versions follows 'Why is this bad?'"
        assert all(len(line) <= 100 for line in (summary, *body)), f"{r.id} explain is wider than 100 columns"


def test_every_explanation_fits_30_lines():
    """`explain` reads on one screen: each rule says what it checks, the failure and its versions, an example and
    the fix in at most 30 lines (docs/writing-a-rule.md)."""
    long = {r.id: n for r in builtin_rules() if (n := len(r.explanation.strip("\n").splitlines())) > MAX_LINES}
    assert not long, f"explanations longer than {MAX_LINES} lines: {long}"


def test_every_rule_has_broken_and_healthy_fixtures():
    for r in builtin_rules():
        folder = FIXTURES / r.slug
        assert folder.is_dir(), f"no fixtures/{r.slug}/"
        spec = yaml.safe_load((folder / "expected.yaml").read_text())
        assert spec["rule"] == r.id
        assert any(c.startswith("bad_") for c in spec["cases"]), r.slug
        assert any(c.startswith("ok_") and (s == "pass" or isinstance(s, list) and {"status": "pass"} in s)
                   for c, s in spec["cases"].items()), r.slug


def test_rules_command_lists_every_rule():
    proc = run_doctor("rules")
    assert proc.returncode == 0, proc.stderr
    for r in builtin_rules():
        assert r.id in proc.stdout and r.slug in proc.stdout and r.title in proc.stdout


def test_explain_prints_the_module_docstring():
    proc = run_doctor("explain", "pad-token")
    assert proc.returncode == 0
    assert "TD001 pad-token" in proc.stdout
    assert "PR #3290" in proc.stdout  # from the rule module's own docstring
    assert run_doctor("explain", "td001").stdout == proc.stdout
    bad = run_doctor("explain", "TD999")
    assert bad.returncode == 2 and "unknown rule 'TD999'" in bad.stderr and "Traceback" not in bad.stderr


def test_readme_lists_every_rule():
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    for r in builtin_rules():
        assert f"| {r.id} | `{r.slug}` |" in readme, f"README's rule table lacks {r.id} {r.slug}"
