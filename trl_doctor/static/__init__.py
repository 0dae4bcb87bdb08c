"""`trl-doctor check --static`: the verdicts files can decide, in this process, with no torch, transformers, TRL,
datasets, accelerate or peft imported and none of the repository's code run (no reward module, no remote model
code, no dataset script; a chat template is rendered only in Jinja2's sandbox).

It reads the trainer config (trl_doctor.context.config), the model's config.json and generation_config.json, the tokenizer
files as JSON and the first rows of a local dataset file (trl_doctor.static.files), and judges them against one TRL
release's config classes, shipped as data (trl_doctor.static.fields). Each rule it can decide is judged under the
full check's id and words (trl_doctor.static.judge); every other rule is a `skip` saying why. The engine runs the
judgments as it runs rules (run_rule: timing, folding, a crash as `error`), over a StaticContext.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from pathlib import Path

from trl_doctor.errors import Unavailable


class StaticContext:
    """What a judgment reads: the config, its files and the TRL release judged against. It answers the attributes
    the light facts read of a context (config, trainer, options, live, _cache), so facts.launch.launch works on it."""

    live = None

    def __init__(self, cfg, options, trl_version: str | None = None):
        from . import fields

        self.cfg = self.config = cfg
        self.trainer = cfg.trainer
        self.options = options
        self._cache: dict = {}
        self.release, why = fields.judged_release(trl_version)
        self.release_words = self.release if why == "the installed trl" else f"{self.release} ({why})"
        self.release_why = why

    @cached_property
    def confine(self):
        from .confine import Confinement, repository_root

        return Confinement(repository_root(self.cfg.base_dir))

    def folder(self, artifact) -> Path:
        """The folder as the config names it (its links unresolved, for the confinement), else the resolved one
        (a hub id in the local cache)."""
        named = self.cfg.base_dir / Path(artifact.ref).expanduser()
        return named if named.is_dir() else artifact.path

    @cached_property
    def tok(self):
        from .files import Tokenizer

        return Tokenizer(self.folder(self.cfg.tokenizer), self.confine)

    @cached_property
    def model_json(self) -> dict:
        from .files import read_json

        return read_json(self.folder(self.cfg.model) / "config.json", self.confine, "model config") or {}

    @cached_property
    def gen_json(self) -> dict | None:
        from .files import read_json

        return read_json(self.folder(self.cfg.model) / "generation_config.json", self.confine, "generation config")

    @cached_property
    def dataset(self):
        from .files import read_dataset

        return read_dataset(self.cfg, self.confine)


def _skipped(reason: str):
    def check(ctx):
        raise Unavailable(reason)

    return check


def run_static(cfg, rules: list, options, trl_version: str | None = None) -> tuple[list, dict]:
    """(a Result per rule, what the report says of the static check) for the loaded config `cfg`."""
    from trl_doctor.worker.engine import run_rule
    from .judge import FULL, JUDGES, SKIPPED

    ctx = StaticContext(cfg, options, trl_version)
    results = []
    for rule in rules:
        judge = JUDGES.get(rule.slug)
        if judge is None:
            reason = SKIPPED.get(rule.slug) or (f"{FULL}: it reads the trainer run" if rule.group == "trainer run"
                                                else f"{FULL} (a plugin rule: --static runs only its own judgments)")
            judge = _skipped(reason)
        results.append(run_rule(replace(rule, check=judge, needs=()), ctx))
    skipped = {r.id: r.message for r in results if r.status.value == "skip"}
    info = {"trl": ctx.release, "trl_source": ctx.release_why,
            "judged": [r.id for r in results if r.id not in skipped], "skipped": len(skipped)}
    return results, info


def in_force(info: dict) -> dict:
    """The report's settings entry for a static check (every format lists the settings in force)."""
    return {"setting": "static", "value": f"files only, judged against trl {info['trl']} ({info['trl_source']}); "
                                          f"{info['skipped']} rules skipped, each with its reason",
            "source": "command line", "trl": info["trl"], "trl_source": info["trl_source"], "judged": info["judged"]}


