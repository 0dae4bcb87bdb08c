"""`trl-doctor check --static`: the verdicts files can decide, in this process, with no torch, transformers, TRL,
datasets, accelerate or peft imported and none of the repository's code run (no reward module, no remote model
code, no dataset script; a chat template is rendered only in Jinja2's sandbox).

It is a provider of the context interface (trl_doctor.interface, the `static` kind), not a set of judgments: it reads
the trainer config (trl_doctor.context.config), the model's config.json and generation_config.json, the tokenizer
files as JSON and the first rows of a local dataset file (trl_doctor.static.files), and names the TRL release whose
config classes, shipped as data (trl_doctor.facts.trl.fields), are judged against. A rule declared for it
(`contexts=("full", "static")`) runs its one judgment here, the facts answering from these files (or saying
Unavailable: the rule is `skip` with the reason); any other is a `skip` saying why (its `static_skip`). The engine
runs them as it runs rules (run_rule: timing, folding, a crash as `error`).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import cast

from trl_doctor.errors import Unavailable
from trl_doctor.interface import Lacks


FULL = "needs the full check"
TURN_MARK = "TRLDOCTORMARK"  # the assistant's content in the conversation the template renders


class StaticContext(Lacks):
    """The static context (trl_doctor.interface.CheckContext, kind `static`): the config, its files and the TRL
    release judged against. Besides the interface (config, trainer, options, live, version, the facts' cache), so
    that the light facts (facts.launch.launcher.launch, facts.launch.settings.config_value) work on it, a static
    judgment reads the files: `tok`, `model_json`, `gen_json`, `dataset_file`, and `release` / `release_words`."""

    kind = "static"
    live = None

    def __init__(self, cfg, options, trl_version: str | None = None):
        from trl_doctor.facts.trl import fields as trl_fields

        self.cfg = self.config = cfg
        self.options = options
        self._cache: dict = {}
        self.release, why = trl_fields.judged_release(trl_version)
        self.release_words = self.release if why == "the installed trl" else f"{self.release} ({why})"
        self.release_why = why

    @property
    def trainer(self) -> str:
        return self.config.trainer

    def version(self, dist: str) -> str | None:
        """The TRL release judged against; any other package's installed release (read from its metadata)."""
        if dist == "trl":
            return self.release
        if dist == "transformers":  # whose TrainingArguments are judged: the installed one's source, else a snapshot
            from trl_doctor.facts.trl import fields as trl_fields

            return trl_fields.training_arguments()[1].split()[1]
        from trl_doctor.context.env import package_version

        return package_version(dist)

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
    def dataset_file(self):
        from .files import read_dataset

        return read_dataset(self.cfg, self.confine)

    def token_ids(self):
        """`tok`, whose token ids a judgment may read; Unavailable when only the tokenizer library could read them."""
        if not self.tok.readable:
            raise Unavailable(f"{FULL}: {self.cfg.tokenizer.path} has no tokenizer.json (a sentencepiece-only "
                              "tokenizer): its token ids need the tokenizer library")
        return self.tok

    @property
    def vocab_rows(self) -> int | None:
        """The model's embedding rows as config.json names them (a vision-language model's text_config), or None."""
        text = cast(dict, self.model_json.get("text_config")) if isinstance(self.model_json.get("text_config"), dict) \
            else self.model_json
        size = text.get("vocab_size", self.model_json.get("vocab_size"))
        return size if isinstance(size, int) and not isinstance(size, bool) else None

    def turn_terminator(self) -> dict | None:
        """facts.inputs.chat.turn_terminator, read from files: the template rendered in Jinja2's sandbox (as
        transformers renders it), bounded (trl_doctor.static.template), the first special token after the assistant's content.
        None without a template."""
        from .template import NotRendered, render

        template, where = self.tok.chat_template
        if template is None:
            return None
        specials_named = {role: self.tok.token(role) for role in ("bos_token", "eos_token", "unk_token", "pad_token")}
        conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": TURN_MARK}]
        try:
            text = render(template, where, dict(messages=conversation, add_generation_prompt=False, **specials_named),
                          self.options.user_code_timeout)
        except NotRendered as exc:  # a template that cannot render is the chat-template rule's finding
            return {"error": str(exc)}
        if TURN_MARK not in text:
            return {"error": "the template does not render the assistant's content"}
        after = text.split(TURN_MARK, 1)[1]
        hits = [(after.find(name), name) for name in self.tok.specials if name and name in after]
        if hits:
            _, name = min(hits, key=lambda h: (h[0], -len(h[1])))
            return {"token": name, "id": self.tok.specials[name], "text_after_content": after}
        return {"token": None, "id": None, "text_after_content": after}


def skip_reason(rule) -> str:
    """Why `rule` has no judgment under --static, as the report says it."""
    if rule.static_skip:
        return f"{FULL}: {rule.static_skip}"
    if rule.group == "trainer run":
        return f"{FULL}: it reads the trainer run"
    return f"{FULL} (the rule is not declared for --static)"


def run_static(cfg, rules: list, options, trl_version: str | None = None) -> tuple[list, dict]:
    """(a Result per rule, what the report says of the static check) for the loaded config `cfg`: each rule declared
    for --static, built-in or a plugin's, over one StaticContext."""
    from trl_doctor.engine import run_rule

    ctx = StaticContext(cfg, options, trl_version)
    results = []
    for rule in rules:
        if "static" in rule.contexts:
            results.append(run_rule(rule, ctx))
        else:
            results.append(run_rule(rule, ctx, skipped=skip_reason(rule)))
    skipped = {r.id: r.message for r in results if r.status.value == "skip"}
    info = {"trl": ctx.release, "trl_source": ctx.release_why,
            "judged": [r.id for r in results if r.id not in skipped], "skipped": len(skipped)}
    return results, info


def in_force(info: dict) -> dict:
    """The report's settings entry for a static check (every format lists the settings in force)."""
    return {"setting": "static", "value": f"files only, judged against trl {info['trl']} ({info['trl_source']}); "
                                          f"{info['skipped']} rules skipped, each with its reason",
            "source": "command line", "trl": info["trl"], "trl_source": info["trl_source"], "judged": info["judged"]}


