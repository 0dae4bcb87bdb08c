"""Generate trl_doctor/data/trl_fields.json: what `check --static` knows of each TRL release, read from the released
wheels with `ast` (never imported).

For each release (the newest patch of every minor from 0.14 on): the config classes `trl <trainer> --config` parses
into (GRPOConfig, RLOOConfig, PPOConfig, ScriptArguments, ModelConfig, DatasetMixtureConfig), each with its fields
(name, annotation, default) resolved through the TRL base classes it inherits from, and the outside base it ends at
(transformers' TrainingArguments, whose fields come from the installed transformers at check time, else from the
snapshot recorded here); and per trainer whether its source sets a missing pad token to eos (the same reading the
full check makes of the installed trainer, trl_doctor.facts.trl.installed.trainer_sets_pad_to_eos).

    python tools/gen_trl_fields.py            # downloads the wheels (pip download, cached) and rewrites the file
    python tools/gen_trl_fields.py --check    # exit 1 when the file differs from what the wheels give
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trl_doctor.facts.trl.installed import _POLICY_PAD_RE, _SOURCE_FILES, TRAINER_CLASS  # noqa: E402
from trl_doctor.facts.trl.geometry import _prune  # noqa: E402
from trl_doctor.facts.trl.fields import OUT, TRAINER_CONFIG, classes_in, fields_of  # noqa: E402

RELEASES = ["0.14.0", "0.15.2", "0.16.1", "0.17.0", "0.18.2", "0.19.1", "0.20.0", "0.21.0", "0.22.2", "0.23.1",
            "0.24.0", "0.25.1", "0.26.2", "0.27.2", "0.28.0", "0.29.1", "1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0",
            "1.5.1", "1.6.0", "1.7.1", "1.8.0", "1.9.2", "1.10.0", "1.11.0", "1.12.0", "1.13.0", "1.14.2", "1.15.0",
            "1.16.0"]
# Where `trl <trainer> --config` takes each class from, newest location first (other modules may define a class of
# the same name: trl/scripts/vllm_serve.py's own ScriptArguments, experimental variants).
CLASSES = {
    "GRPOConfig": ("trl/trainer/grpo_config.py",),
    "RLOOConfig": ("trl/trainer/rloo_config.py",),
    "PPOConfig": ("trl/experimental/ppo/ppo_config.py", "trl/trainer/ppo_config.py"),
    "ScriptArguments": ("trl/scripts/utils.py", "trl/utils.py", "trl/commands/cli_utils.py"),
    "ModelConfig": ("trl/trainer/model_config.py", "trl/model_config.py"),
    "DatasetMixtureConfig": ("trl/scripts/utils.py",),
}
CACHE = Path.home() / ".cache" / "trl-doctor-gen" / "wheels"


def wheel(version: str) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"trl-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
                        "-d", str(CACHE), f"trl=={version}"], check=True)
        found = sorted(CACHE.glob(f"trl-{version}-*.whl"))
    return found[0]


def read_release(version: str) -> dict:
    sources: dict[str, str] = {}
    with zipfile.ZipFile(wheel(version)) as zf:
        for name in zf.namelist():
            if name.startswith("trl/") and name.endswith(".py"):
                sources[name] = zf.read(name).decode("utf-8")
    index = classes_in({name: ast.parse(text) for name, text in sources.items()})
    for cls, modules in CLASSES.items():
        found = [c for m in modules for c in index.get(cls, []) if c[0] == m]
        if found:
            index[cls] = found[:1]
        else:
            index.pop(cls, None)
    configs = {}
    for cls in CLASSES:
        if cls in index:
            fields, outside = fields_of(cls, index)
            configs[cls] = {"module": index[cls][0][0], "base": outside, "fields": fields}
    pad = {}
    for trainer, rels in _SOURCE_FILES.items():
        for rel in rels:
            text = sources.get(f"trl/{rel}")
            if text is None:
                continue
            hit = next((m for m in _POLICY_PAD_RE.finditer(text) if "reward" not in m.group(1)), None)
            pad[trainer] = (f"trl/{rel}:{text.count(chr(10), 0, hit.start()) + 1}: `{hit.group(0).strip()}`"
                            if hit else None)
            break
    geometry = {trainer: geometry_units(trainer, index, sources) for trainer in TRAINER_CONFIG}
    # the dataclasses `trl <trainer>`'s own script adds to its parser (GRPOScriptArguments: reward_funcs, ...)
    script = {}
    for trainer in TRAINER_CONFIG:
        module = f"trl/scripts/{trainer}.py"
        own = {name: c for name, found in index.items() for c in found[:1] if c[0] == module}
        fields = {}
        for name in own:
            fields.update(fields_of(name, index)[0])
        script[trainer] = fields
    return {"configs": configs, "sets_pad_to_eos": pad, "geometry": geometry, "script_fields": script}


def _statements(text: str, body: list) -> list:
    """[[line, source]] of the geometry statements of a function body (trl_doctor.facts.trl.geometry's pruning)."""
    return [[s.lineno, textwrap.dedent(ast.get_source_segment(text, s, padded=True))] for s in _prune(body)]


def geometry_units(trainer: str, index: dict, sources: dict) -> dict:
    """The batch-geometry statements static evaluates, as the full check reads them from the installed TRL: the
    config class's `__post_init__` chain (the class first, then each TRL base that has one) and the trainer's
    `__init__`."""
    chain, name, seen = [], TRAINER_CONFIG[trainer], set()
    while name in index and name not in seen:
        seen.add(name)
        module, node = index[name][0]
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__post_init__":
                chain.append({"file": module, "line": item.lineno, "statements": _statements(sources[module], item.body)})
        name = next((b for b in (getattr(b, "id", None) or getattr(b, "attr", None) for b in node.bases) if b in index), None)
    out = {"config": chain, "trainer": None}
    for rel in _SOURCE_FILES[trainer]:
        text = sources.get(f"trl/{rel}")
        if text is None:
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and node.name == TRAINER_CLASS[trainer]:
                init = next((i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"), None)
                if init is not None and _prune(init.body):
                    out["trainer"] = {"file": f"trl/{rel}", "line": init.lineno,
                                      "statements": _statements(text, init.body)}
        break
    return out


def training_arguments() -> dict:
    """transformers' TrainingArguments fields, from the installed transformers' source (found, not imported)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    path = Path(list(spec.submodule_search_locations)[0]) / "training_args.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fields, _ = fields_of("TrainingArguments", classes_in({"transformers/training_args.py": tree}))
    return {"transformers": importlib.metadata.version("transformers"), "fields": fields}


def build() -> dict:
    releases = {}
    for version in RELEASES:
        print(f"trl {version}", file=sys.stderr)
        releases[version] = read_release(version)
    return {"generated_by": "tools/gen_trl_fields.py", "releases": releases, "TrainingArguments": training_arguments()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = json.dumps(build(), indent=1, sort_keys=True) + "\n"
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUT} differs from the wheels: rerun tools/gen_trl_fields.py")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
