"""Version skew between the installed ML packages, read from their metadata without importing them.

Two sources of findings, both pure functions over injected data so that they can be tested with real
version strings from any release:

- `requirement_findings`: every `Requires-Dist` that one of the watched packages (trl, transformers,
  accelerate, torch, vllm, peft, deepspeed, datasets) declares on another one. A requirement under an extra
  counts when the package the extra is named after is installed (`trl[vllm]`'s vLLM range once vllm is
  there, `trl[deepspeed]`'s `transformers!=5.1.0` once deepspeed is); extras such as `dev`, `test` or
  `benchmarks` name no package and are never applied.
- `known_issue_findings`: the entries of the known-issues table (trl_doctor/data/known_issues.yaml) whose
  package ranges and config conditions all match. An entry with `decided_by` names the rule whose probe
  runs the installed code to decide the same question: it is reported as an explanation, never as a
  failure of its own (the table explains, the probe decides).

Used by the version-skew rule (TD007) and by `trl-doctor env`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, cast
from trl_doctor.wording import one_line

WATCHED = ("trl", "transformers", "accelerate", "torch", "vllm", "peft", "deepspeed", "datasets")
TABLE_PATH = Path(__file__).resolve().parents[2] / "data" / "known_issues.yaml"
SEVERITIES = ("fail", "warn")
ENTRY_KEYS = ("id", "title", "when", "config", "severity", "breaks", "description", "fix", "decided_by", "evidence")
REQUIRED_KEYS = ("id", "title", "when", "severity", "breaks", "description", "fix", "evidence")
ANY_VALUE = "*"  # a config condition that only asks for the key to be set
_EXTRA_RE = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")
_NAME_RE = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class SkewFinding:
    """One version-skew observation. status: fail, warn, or info (a known issue another rule decides)."""

    kind: str  # "requirement" or "known-issue"
    status: str
    message: str
    fix: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status, "message": self.message, "fix": self.fix, **self.details}


def normalize(name: str) -> str:
    """PEP 503 name normalization (Torch, torch_x and torch.x are the same project)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_in(version: str, spec: str) -> bool:
    """Whether an installed version (pre-releases and local builds like 2.13.0+cpu included) is in `spec`."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return SpecifierSet(spec).contains(v, prereleases=True)


# -- declared requirements -------------------------------------------------------------------------------


def requirement_findings(
    installed: Mapping[str, str | None],
    requires: Mapping[str, Iterable[str]],
    environment: Mapping[str, str] | None = None,
    watched: Iterable[str] = WATCHED,
) -> tuple[list[SkewFinding], int]:
    """(violations, number of requirements checked) for the requirements the watched packages declare on
    each other. `installed` maps names to versions (None: not installed); `requires` maps a package to its
    `Requires-Dist` strings as importlib.metadata.requires() gives them; `environment` overrides the marker
    environment (python_version, sys_platform, ...) of this interpreter."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    watch = {normalize(w) for w in watched}
    have = {normalize(k): v for k, v in installed.items()}
    out: list[SkewFinding] = []
    seen: set[tuple[str, str, str, str]] = set()
    checked = 0
    for declarer_raw, lines in requires.items():
        declarer = normalize(declarer_raw)
        declarer_version = have.get(declarer)
        if declarer not in watch or declarer_version is None:
            continue
        for line in lines or ():
            if not _worth_parsing(line, watch, have):
                continue
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            target = normalize(req.name)
            if target not in watch or target == declarer:
                continue
            extra = _applicable_extra(req, have, watch, environment)
            if extra is None:
                continue
            key = (declarer, target, str(req.specifier), extra)
            if key in seen:
                continue
            seen.add(key)
            target_version = have.get(target)
            who = f"{declarer}[{extra}]" if extra else declarer
            spec = str(req.specifier)
            wanted = f"{target}{spec}" if spec else target
            if target_version is None:
                if extra:  # an extra's requirement only counts for what is installed
                    continue
                checked += 1
                out.append(SkewFinding(
                    "requirement", "fail",
                    f"{target} is not installed, but {declarer} {declarer_version} requires {wanted}",
                    f'pip install "{wanted}"',
                    {"package": target, "installed": None, "required": wanted, "declared by": f"{who} {declarer_version}"},
                ))
                continue
            checked += 1
            try:
                ok = req.specifier.contains(Version(target_version), prereleases=True)
            except InvalidVersion:
                continue
            if not ok:
                out.append(SkewFinding(
                    "requirement", "fail",
                    f"{target} {target_version} is outside {who}'s range {wanted} declared by {declarer} {declarer_version}",
                    f'pip install "{wanted}" (or a {declarer} release whose range includes {target} {target_version})',
                    {"package": target, "installed": target_version, "required": wanted,
                     "declared by": f"{who} {declarer_version}"},
                ))
    return out, checked


def _worth_parsing(line: str, watch: set[str], have: Mapping[str, str | None]) -> bool:
    """A cheap look before the full parse: metadata lists hundreds of test and docs extras."""
    m = _NAME_RE.match(line)
    if m is None or normalize(m.group(1)) not in watch:
        return False
    extras = _EXTRA_RE.findall(line)
    return not extras or any(have.get(normalize(e)) is not None for e in extras)


def _applicable_extra(req, have: Mapping[str, str | None], watch: set[str], environment) -> str | None:
    """'' for a requirement that always applies here, the extra's name for one that applies because the
    package the extra is named after is installed, None when it does not apply."""
    marker = req.marker
    if marker is None:
        return ""
    env = dict(environment or {})
    extras = _EXTRA_RE.findall(str(marker))
    if not extras:
        return "" if marker.evaluate({**env, "extra": ""}) else None
    for extra in extras:
        namesake = normalize(extra)
        if namesake in watch and have.get(namesake) is not None and marker.evaluate({**env, "extra": extra}):
            return extra
    return None


def installed_requirements(names: Iterable[str] = WATCHED) -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """The installed versions and Requires-Dist strings, from metadata (no package is imported)."""
    from importlib.metadata import PackageNotFoundError, distribution

    installed: dict[str, str | None] = {}
    requires: dict[str, list[str]] = {}
    for name in names:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            installed[name] = None
            continue
        version, lines = _read_metadata(dist)
        installed[name] = version
        requires[name] = lines
    return installed, requires


def _read_metadata(dist) -> tuple[str, list[str]]:
    """Version and Requires-Dist from the METADATA headers. A regex over the header block is several times
    faster than the email parser behind `dist.version` and `dist.requires` (torch's METADATA is large)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    head = text.split("\n\n", 1)[0]
    m = re.search(r"^Version:[ \t]*(\S+)", head, re.M)
    if m is None:
        return dist.version, list(dist.requires or [])
    return m.group(1), [r.strip() for r in re.findall(r"^Requires-Dist:[ \t]*(.+)$", head, re.M)]


# -- known issues ------------------------------------------------------------------------------------------


class TableError(ValueError):
    """The known-issues table is malformed."""


def load_table(path: Path | str | None = None) -> list[dict[str, Any]]:
    import yaml

    p = Path(path) if path is not None else TABLE_PATH
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(p.read_text(encoding="utf-8"), Loader=loader)
    entries = data.get("issues") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise TableError(f"{p}: expected a mapping with an `issues` list")
    validate_table(entries, str(p))
    return entries


def validate_table(entries: list[dict[str, Any]], where: str = "known issues") -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    ids = set()
    for entry in entries:
        name = entry.get("id", "?") if isinstance(entry, dict) else "?"
        if not isinstance(entry, dict):
            raise TableError(f"{where}: entry {name} is not a mapping")
        missing = [k for k in REQUIRED_KEYS if not entry.get(k)]
        unknown = [k for k in entry if k not in ENTRY_KEYS]
        if missing or unknown:
            raise TableError(f"{where}: {name}: missing {missing}, unknown {unknown}")
        if name in ids:
            raise TableError(f"{where}: {name} is listed twice")
        ids.add(name)
        if entry["severity"] not in SEVERITIES:
            raise TableError(f"{where}: {name}: severity must be one of {SEVERITIES}")
        if not isinstance(entry["when"], dict):
            raise TableError(f"{where}: {name}: `when` must map packages to version ranges")
        for pkg, spec in entry["when"].items():
            if spec is None:
                continue  # the package must be absent
            try:
                SpecifierSet(str(spec))
            except InvalidSpecifier:
                raise TableError(f"{where}: {name}: {pkg}: invalid version range {spec!r}") from None
        if not isinstance(entry.get("config", {}), dict):
            raise TableError(f"{where}: {name}: `config` must be a mapping")
        if re.search(r"https?://|www\.", str(entry["description"]) + str(entry["fix"]) + str(entry["breaks"])):
            raise TableError(f"{where}: {name}: breaks, description and fix are link-free")


def table_packages(table: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every package some entry's `when` names (so the caller reads their versions too)."""
    names: list[str] = []
    for entry in table:
        for pkg in entry.get("when", {}):
            if pkg not in names:
                names.append(pkg)
    return names


def entry_matches_versions(entry: Mapping[str, Any], installed: Mapping[str, str | None]) -> bool:
    have = {normalize(k): v for k, v in installed.items()}
    for pkg, spec in entry["when"].items():
        version = have.get(normalize(pkg))
        if spec is None:
            if version is not None:
                return False
            continue
        if version is None or not version_in(version, str(spec)):
            return False
    return True


def entry_matches_config(entry: Mapping[str, Any], facts: Mapping[str, Any] | None) -> bool:
    """Config conditions: a value must equal the config's (`null`: the key is unset, "*": set to anything,
    a list: any of these). Without config facts (`trl-doctor env`) an entry matches when its only condition
    is the trainer: the finding then says which trainers it concerns."""
    conditions = entry.get("config") or {}
    if not conditions:
        return True
    if facts is None:  # the trainer alone, and keys that must be unset, hold for any config of that trainer
        return {k for k, want in conditions.items() if want is not None} <= {"trainer"}
    for key, want in conditions.items():
        got = facts.get(key)
        if want == ANY_VALUE:
            ok = got is not None
        elif isinstance(want, list):
            ok = got in want
        else:
            ok = got == want
        if not ok:
            return False
    return True


def known_issue_findings(
    installed: Mapping[str, str | None],
    config_facts: Mapping[str, Any] | None,
    table: Iterable[Mapping[str, Any]],
) -> list[SkewFinding]:
    out = []
    have = {normalize(k): v for k, v in installed.items()}
    for entry in table:
        if not (entry_matches_versions(entry, installed) and entry_matches_config(entry, config_facts)):
            continue
        versions = ", ".join(
            f"{pkg} {have.get(normalize(pkg))}" if spec is not None else f"{pkg} not installed"
            for pkg, spec in entry["when"].items()
        )
        details = {
            "known issue": entry["id"],
            "title": entry["title"],
            "versions": versions,
            "matches": _describe_when(entry),
            "breaks": one_line(entry["breaks"], None),
            "description": one_line(entry["description"], None),
            "evidence": one_line(entry["evidence"], None),
        }
        trainers = (entry.get("config") or {}).get("trainer")
        if config_facts is None and trainers is not None:
            scope = ", ".join(trainers) if isinstance(trainers, list) else trainers
            details["applies to"] = f"{scope} configs"
        decided = entry.get("decided_by")
        if decided:
            details["decided by"] = decided
            message = (f"{entry['id']} {entry['title']} ({versions}): the {decided} rule runs the installed code "
                       "and decides it; the table only explains")
            out.append(SkewFinding("known-issue", "info", message, one_line(entry["fix"], None), details))
        else:
            message = f"{entry['id']} {entry['title']} ({versions}): {one_line(entry['breaks'], None)}"
            out.append(SkewFinding("known-issue", entry["severity"], message, one_line(entry["fix"], None), details))
    return out


def _describe_when(entry: Mapping[str, Any]) -> str:
    parts = [f"{pkg}{spec}" if spec is not None else f"{pkg} absent" for pkg, spec in entry["when"].items()]
    for key, want in (entry.get("config") or {}).items():
        parts.append(f"{key}: {'set' if want == ANY_VALUE else 'unset' if want is None else want}")
    return "; ".join(parts)



# -- the environment as a whole ----------------------------------------------------------------------------


def environment_findings(config_facts: Mapping[str, Any] | None = None, table: list | None = None) -> dict[str, Any]:
    """Requirement violations and matching known issues for this interpreter's installed packages.
    Without config facts (`trl-doctor env`), only the known issues that need no config, or only the trainer,
    are considered."""
    table_error = None
    if table is None:
        try:
            table = load_table()
        except (OSError, TableError) as exc:  # a broken install must not stop the version report
            table, table_error = [], f"{type(exc).__name__}: {exc}"
    names = list(WATCHED) + [p for p in table_packages(table) if normalize(p) not in WATCHED]
    installed, requires = installed_requirements(names)
    reqs, checked = requirement_findings(installed, requires)
    issues = known_issue_findings(installed, config_facts, table)
    out = {"installed": installed, "requirements_checked": checked, "findings": reqs + issues}
    if table_error:
        out["table_error"] = table_error
    return out


def env_section(result: Mapping[str, Any]) -> list[str]:
    """The version-skew part of `trl-doctor env`, as text lines for a bug report."""
    findings = result["findings"]
    reqs = [f for f in findings if f.kind == "requirement"]
    issues = [f for f in findings if f.kind == "known-issue"]
    lines = [f"version skew: {result['requirements_checked']} requirements the installed packages declare on each "
             f"other checked, {len(reqs) or 'none'} violated"]
    for f in reqs:
        lines += [f"  {f.status}: {f.message}", f"    fix: {f.fix}"]
    if result.get("table_error"):
        lines.append(f"known issues: the table could not be read ({result['table_error']})")
    elif not issues:
        lines.append("known issues: none matches these versions")
        return lines
    lines.append("known issues that match these versions:")
    for f in issues:
        scope = f.details.get("applies to", "every config")
        lines += [f"  {f.status} ({scope}): {f.message}", f"    fix: {f.fix}"]
    return lines


# -- an extra named after no package: trl[liger] ----------------------------------------------------------------

LIGER_KEYS = ("use_liger_kernel", "use_liger_loss")  # TrainingArguments' flag; GRPOConfig's own in trl 0.17-0.2x


def extra_requirement(requires: Iterable[str], extra: str, target: str) -> str | None:
    """The version range the `extra` of a package declares on `target` in its Requires-Dist lines (`trl[liger]` on
    liger-kernel), markers other than the extra evaluated for this interpreter; None when it declares none. Only
    for extras named after no package (`liger` is not `liger-kernel`), which requirement_findings never applies."""
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement

    env = cast("dict[str, str]", default_environment())  # a TypedDict of str values
    for line in requires:
        if normalize(m.group(1) if (m := _NAME_RE.match(line)) else "") != normalize(target):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or extra not in _EXTRA_RE.findall(str(req.marker)):
            continue
        if req.marker.evaluate({**env, "extra": extra}):
            return str(req.specifier) or None
    return None
