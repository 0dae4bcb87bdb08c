"""TD005 value-model: PPO has a value model; reward and value models are 1-label heads on its ids.

What it does
    Reads the installed PPOTrainer's source for the value-model access that fails first, and
    `reward_model_path` and `value_model_path` without weights (as TRL's example loads them, on the
    meta device): a `score` head, its shape and whether the checkpoint holds it, a vocab_size
    covering the policy's ids, a tokenizer that numbers them alike. The policy as `ref_model` (F5)
    fails.

Why is this bad?
    Without a value model PPOTrainer dies at start-up: up to TRL 0.12 with
    "AttributeError: 'NoneType' object has no attribute 'modules'", in 0.13.0-1.12.0 with
    "AttributeError: 'NoneType' object has no attribute 'base_model_prefix'". A causal LM has no
    `score` ("'Qwen2ForCausalLM' object has no attribute 'score'"); as a classifier it gets a random
    head, harmless for the value model, which trains, not the reward model (a warn: PPOConfig's
    default "EleutherAI/pythia-160m" is one). A 2-label head fails to load with num_labels=1 or at
    the first step ("output with shape [2] doesn't match the broadcast shape [2, 2]"); another
    tokenizer's ids crash past its vocab_size ("index out of range in self") or score other text.
    Releases: 0.9-0.11 `trl.PPOv2Trainer`; 0.12 `trl.PPOTrainer`; 0.26-0.28 `trl.experimental.ppo`
    plus a shim; 0.29-1.12.0 `trl.experimental.ppo` only; none in 1.13.0 and later.

Example
    reward_model_path: rm-qwen2         # a 1-label classifier; no value_model_path
    -> fail: no value model: ... PPOTrainer dies at start-up without one (AttributeError: ...); the
       reward model ../models/rm-qwen2 can be its start (the fix sets it)

Fix safety
    Safe: with no `value_model_path` and a healthy 1-label `reward_model_path`, writes
    `value_model_path: <that path>`, as examples/scripts/ppo/ppo.py does. Otherwise manual: another
    checkpoint; `pip install "trl==1.12.0"` (transformers>=4.56.2) or RLOO/GRPO; ref_model=None.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from trl_doctor import Edit, Fix, InputError, fail, manual, passed, rule, warn
from trl_doctor.facts.inputs.models import (SCRIPT_OBJECT, ScoreHead, score_rows, scorer_folder, scorer_head,
                                           scorer_tokenizer)
from trl_doctor.facts.trl.installed import (ppo_trains_value_model, ppo_without_value_model, trainer_class,
                                            trainer_source)
from trl_doctor.facts.inputs.text import load_error
from trl_doctor.facts.trl.behaviour import ppo_v1

LAST_PPO_RELEASE = "1.12.0"
PPO_REMOVED_IN = "1.13.0"
LAST_PPO_PATH = "trl.experimental.ppo.PPOTrainer"
LAST_PPO_NEEDS = "transformers>=4.56.2"
DEFAULT_REWARD_PATH = "EleutherAI/pythia-160m"  # PPOConfig.reward_model_path's default, 0.11 to 1.12
ERR_MODULES = "AttributeError: 'NoneType' object has no attribute 'modules'"
ERR_PREFIX = "AttributeError: 'NoneType' object has no attribute 'base_model_prefix'"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")
SHOWN_DIFFS = 3
KEPT_DIFFS = 10


@rule(
    id="TD005",
    slug="value-model",
    title="PPO has a value model; reward and value models are 1-label sequence classifiers on the policy's vocabulary",
    trainers=("ppo",),
    needs=("tokenizer",),
    fixable="sometimes",
    static_skip="it loads the value and reward models",
)
def check(ctx):
    v1 = ppo_v1(ctx)
    if v1:  # its own contract: the policy carries the value head
        yield _value_head_on_policy(ctx, v1)
        return
    cfg = ctx.config
    trl_version = ctx.version("trl") or "not installed"
    ppo = _installed_ppo(trl_version)
    policy = _policy_facts(ctx)
    details = {
        "trl": trl_version,
        "PPOTrainer": ppo["where"],
        "policy tokenizer": str(cfg.tokenizer.path),
        "policy tokens": policy["size"],
        "highest id PPO feeds the reward/value models": policy["top_id"],
        "policy pad_token_id": policy["pad_id"],
        "masking": (
            f"PPO masks ids equal to the policy's pad id ({policy['pad_id']}) and replaces them with 0 before the "
            "reward and value forwards; the models' own config.json pad_token_id is not used there"
            if policy["pad_id"] is not None else
            "the policy's tokenizer has no pad token, which PPO masks the reward and value forwards with (see TD001 pad-token)"
        ),
    }
    if ppo.get("evidence"):
        details["value_model=None fails at"] = ppo["evidence"]

    if ctx.live is not None and ctx.live.ref_is_policy:
        yield _same_reference(ctx)

    keys = {"reward": "reward_model_path", "value": "value_model_path"}
    refs = {role: cfg.get(key) for role, key in keys.items()}  # paths as the file writes them (relative to it)
    facts, problems, head_problems = {}, {}, {}
    inspected: dict[Path, tuple] = {}
    trained = ppo_trains_value_model()
    for role, key in keys.items():
        ref = refs[role]
        details[key] = ref
        if not isinstance(ref, str) or not ref:
            continue
        path = _resolve(cfg, key, ref).path
        if path not in inspected:
            inspected[path] = _inspect_model(ctx, path, policy)
        shared, problems[role], built = inspected[path]
        live = ctx.live.aux_models.get(key) if ctx.live is not None else None
        head = built if live is None else scorer_head(ctx, path, live)
        facts[role] = dict(shared)
        head_problems[role] = _judge_head(ctx, role, head, facts[role], trained)
        details[f"{role} model"] = facts[role]
    same = "reward" in facts and "value" in facts and facts["reward"]["path"] == facts["value"]["path"]
    reward_ok = "reward" in facts and not any(status == "fail" for status, _ in problems["reward"])
    alt = refs["reward"] if "reward" in facts else "<a reward model>"
    if ppo["problem"] is not None:
        details["pin"] = f"trl=={LAST_PPO_RELEASE}"
        details["or move to"] = f"trainer: rloo (or grpo) with reward_model_name_or_path: {alt}"

    found: list[tuple] = []  # (fail or warn, message, fix), all given the same details below
    if "value" not in facts:
        fix, hint = None, ""
        if reward_ok:
            fix = Fix(
                f"set value_model_path: {refs['reward']} in {cfg.path.name}: the value model starts from the reward "
                "model, as TRL's PPO example (examples/scripts/ppo/ppo.py) loads both from reward_model_path",
                (Edit(str(cfg.path), set=(("value_model_path", refs["reward"]),)),),
            )
            hint = f"; the reward model {refs['reward']} can be its start (the fix sets it)"
        elif "reward" in facts:
            hint = f"; the reward model {refs['reward']} cannot be its start either (see below)"
        found.append((fail, (
            f"no value model: {cfg.path.name} sets no `value_model_path`, and PPOTrainer dies at start-up without one "
            f"({ppo['none_error']}){hint}"
        ), fix))
    if "reward" not in facts:
        found.append((fail, (
            f"no reward model: {cfg.path.name} sets no `reward_model_path`, so PPOConfig falls back to "
            f"{DEFAULT_REWARD_PATH!r}, a causal LM with another tokenizer: set it to a 1-label sequence classifier "
            "that shares the policy's tokenizer"
        ), None))
    for role in ("reward", "value"):
        if role not in facts or (role == "value" and same):
            continue
        label = "reward and value model" if same else f"{role} model"
        for status, text in problems[role]:
            found.append((fail if status == "fail" else warn, f"{label} {text}", None))
    for role in ("reward", "value"):  # what each role gets from its score head differs even from one folder
        for status, text in head_problems.get(role, []):
            found.append((fail if status == "fail" else warn, f"{role} model {text}", None))
    if ppo["problem"] is not None:
        found.append((fail, ppo["problem"].replace("{alt}", alt), None))

    if not found:
        kind = {role: f"1-label {f['architectures'][0]} ({f['score head']})" if not f.get("new score head") else
                f"a {f['architectures'][0]} with a new 1-label score head ({f['score head']}) that PPOTrainer trains"
                for role, f in facts.items()}
        if same or kind["value"] == kind["reward"]:
            who = (f"value and reward model {refs['value']}" if same
                   else f"value model {refs['value']} and reward model {refs['reward']}")
            said = f"{who}: {kind['value']} covering"
        else:
            said = f"value model {refs['value']}: {kind['value']}; reward model {refs['reward']}: {kind['reward']}; both cover"
        yield passed(
            f"{said} the policy's {policy['size']} token ids; {ppo['where']} in trl {trl_version} takes them",
            **details,
        )
        return
    for make, message, fix in found:
        yield make(message, fix, **details)


# -- the installed trainer ------------------------------------------------------------------------------

def _installed_ppo(trl_version: str) -> dict:
    """Where the installed PPOTrainer is, what value_model=None makes it raise, or why there is none."""
    with warnings.catch_warnings(record=True):  # trl.experimental warns on import
        cls = trainer_class("ppo")
    found = trainer_source("ppo")
    out = {"where": None, "none_error": f"{ERR_PREFIX} from trl 0.13 to {LAST_PPO_RELEASE}, {ERR_MODULES} before",
           "problem": None}
    if trl_version == "not installed":
        out["problem"] = (f"trl is not installed: PPO needs trl<={LAST_PPO_RELEASE} (`pip install \"trl=={LAST_PPO_RELEASE}\"`), "
                          "or move to RLOO or GRPO (`trainer: rloo`, reward_model_name_or_path: {alt})")
        return out
    if cls is None:
        if found is not None:
            out["problem"] = (f"trl {trl_version} ships {found[0]} but its PPOTrainer cannot be imported "
                              f"({_import_error()}); pin `trl=={LAST_PPO_RELEASE}` or repair the installation")
        else:
            out["problem"] = (
                f"trl {trl_version} has no PPOTrainer: it was removed in trl {PPO_REMOVED_IN} (the last release with it is "
                f"trl {LAST_PPO_RELEASE}, as {LAST_PPO_PATH}). Pin `trl=={LAST_PPO_RELEASE}` (it needs {LAST_PPO_NEEDS}) "
                "to train this PPO config, or move to RLOO or GRPO (`trainer: rloo` with reward_model_name_or_path: {alt}), "
                "which need no value model"
            )
        return out
    public = LAST_PPO_PATH if cls.__module__.startswith("trl.experimental.ppo") else f"trl.{cls.__name__}"
    out["where"] = public
    import inspect

    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        params = {"value_model": None}
    if "value_model" not in params:
        out["problem"] = (
            f"trl {trl_version}'s {public} is the PPOv1 API (a value head on the policy, no reward or value model) that "
            f"these keys do not configure; pin `trl=={LAST_PPO_RELEASE}` ({LAST_PPO_PATH})"
        )
        return out
    failure = ppo_without_value_model()
    if failure is not None:
        trips_on, where = failure
        out["none_error"] = f"{ERR_MODULES if trips_on == 'modules' else ERR_PREFIX} in trl {trl_version}"
        if where is not None:
            out["evidence"] = where
    return out


def _import_error() -> str:
    import importlib

    for module in ("trl.experimental.ppo", "trl"):
        try:
            with warnings.catch_warnings(record=True):
                _ = importlib.import_module(module).PPOTrainer  # raises what importing it raises
        except Exception as exc:  # the reason is what the user needs
            last = f"{type(exc).__name__}: {load_error(exc)}"
        else:
            return "it imports here"
    return last






# -- the policy and the models --------------------------------------------------------------------------

def _policy_facts(ctx) -> dict:
    tok = ctx.tokenizer
    vocab = tok.get_vocab()
    pad = tok.pad_token_id
    ids = set(vocab.values()) | set(tok.all_special_ids)
    fed = [i for i in ids if i != pad] or [0]
    top = max(fed)
    return {"size": len(tok), "vocab": vocab, "pad_id": pad, "top_id": top, "top_token": tok.convert_ids_to_tokens(top),
            "added": set(ctx.config.added_tokens)}


def _resolve(cfg, key: str, ref: str):
    from trl_doctor.facts.inputs.models import resolve_artifact

    return resolve_artifact(ref, cfg.base_dir, str(cfg.path), key, need="config.json")


def _inspect_model(ctx, path: Path, policy: dict) -> tuple[dict, list[tuple[str, str]], ScoreHead]:
    """(facts, problems, score head as TRL's example loads it) of one reward/value model folder (the facts layer's
    `scorer_folder`): config only, a meta-device build, its tokenizer. What its score head means depends on the role: see _judge_head."""
    cfg_file = path / "config.json"
    folder = scorer_folder(ctx, path)
    mcfg = folder.config
    if mcfg is None:
        raise InputError(f"{cfg_file}: cannot load the model config: {folder.config_error}")
    text = mcfg.get_text_config() if hasattr(mcfg, "get_text_config") else mcfg
    archs = list(folder.architectures)
    vocab_size = getattr(text, "vocab_size", None)
    pad = getattr(mcfg, "pad_token_id", None)
    if pad is None:
        pad = getattr(text, "pad_token_id", None)
    facts = {
        "path": str(path),
        "config.json": str(cfg_file),
        "architectures": archs,
        "model_type": getattr(mcfg, "model_type", None),
        "num_labels": None,
        "score head": None,
        "vocab_size": vocab_size,
        "pad_token_id": pad,
    }
    shown = _shown(ctx, cfg_file)
    problems: list[tuple[str, str]] = []
    seq_cls = [a for a in archs if a.endswith("ForSequenceClassification")]
    built = scorer_head(ctx, path)
    facts["score head"] = built.head
    if not archs:
        problems.append(("warn", f"{shown} names no architectures, so it cannot be confirmed to be a 1-label sequence classifier"))
    if seq_cls:
        n = folder.num_labels
        rows = score_rows(path)
        if rows is not None and rows != n:
            # the weights decide what `num_labels=1` loads: a config left at the default 2 over a 1-row head is fine
            facts["num_labels (config.json)"] = f"{n}, but the checkpoint's score head has {rows} row(s): {rows} is what loads"
            n = rows
        facts["num_labels"] = n
        facts["id2label"] = dict(folder.id2label)
        if n != 1:
            problems.append(("fail", (
                f"{shown} is a {seq_cls[0]} with {n} labels (id2label {facts['id2label']}, score head "
                f"{built.head}): PPO takes one scalar per token, and TRL's example loads it with num_labels=1, which fails on "
                f"the score.weight size mismatch"
            )))
    if pad is None:
        facts["pad_token_id note"] = (
            "None: harmless inside PPO (it masks with the policy's pad id), but the model's own forward() refuses "
            "batches > 1 ('Cannot handle batch sizes > 1 if no padding token is defined')"
        )

    need = policy["top_id"] + 1
    if vocab_size is not None and vocab_size < need:
        problems.append(("fail", (
            f"{shown} has vocab_size {vocab_size} but the policy's tokenizer has ids up to {policy['top_id']} "
            f"({policy['top_token']!r}): PPO feeds the policy's ids to it, and the first forward fails with "
            "'index out of range in self' (a device-side assert on GPU)"
        )))

    tok_problem = _compare_tokenizer(ctx, path, policy, facts)
    if tok_problem is not None:
        problems.append(tok_problem)
    return facts, problems, built


def _judge_head(ctx, role: str, head: ScoreHead, facts: dict, trained: str | None) -> list[tuple[str, str]]:
    """What the score head the trainer gets means for this role. PPO calls `.score` on both models; a checkpoint
    without a score head (a causal LM) loaded as TRL's example loads it gets a new one: harmless for the value
    model, which PPOTrainer trains with the policy, but a reward model is never trained, so its rewards come from
    a random head."""
    shown = _shown(ctx, Path(facts["config.json"]))
    facts["loaded as"] = f"{head.loaded_as} ({head.by})" if head.loaded_as else None
    if head.error is not None:
        return [("fail", f"{shown} cannot be built as AutoModelForSequenceClassification: {head.error}")]
    if head.head is None:
        if head.by == SCRIPT_OBJECT:
            return [("fail", (
                f"{shown}: the script passes it as a {head.loaded_as}, which has no `score` head: PPO calls "
                f"model.score(...) on it ('{head.loaded_as}' object has no attribute 'score' at the first rollout); "
                "load it with AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)"))]
        other = f" (its head is `{head.other_head}`)" if head.other_head else ""
        return [("fail", (f"{shown} builds a {head.loaded_as}, which has no `score` head{other}: PPO calls "
                          "model.score(hidden_states) on the reward and value models"))]
    facts["score head"] = head.head
    if not head.fresh:
        return []
    facts["new score head"] = f"{head.checkpoint or 'the checkpoint'} holds no score head: " + (
        f"the script's {head.loaded_as} has {head.head} initialised at random" if head.by == SCRIPT_OBJECT else
        f"{head.by} initialises {head.head} at random")
    if role == "value":
        facts["value head training"] = (
            f"PPOTrainer optimises the value model with the policy ({trained})" if trained else
            "PPOTrainer optimises the value model with the policy (PolicyAndValueWrapper)")
        return []
    got = (f"the script's {head.loaded_as} has a new, randomly initialised {head.head}" if head.by == SCRIPT_OBJECT else
           f"loaded as TRL's PPO example loads it, {head.by}, it gets a new, randomly initialised {head.head}")
    return [("warn", (
        f"{shown} is a {head.checkpoint or 'checkpoint'} without a trained score head: {got}, and PPO never trains the "
        "reward model (it optimises the policy and the value model only), so every reward comes from an untrained "
        "head; use a trained 1-label "
        "*ForSequenceClassification reward model (the value model may start from a causal LM: PPO trains its head)"))]


def _compare_tokenizer(ctx, path: Path, policy: dict, facts: dict) -> tuple[str, str] | None:
    shown = _shown(ctx, path)
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        facts["tokenizer"] = f"none in {path}: token ids not compared (PPO feeds it the policy's ids)"
        return None
    tok, error = scorer_tokenizer(ctx, path)
    if tok is None:
        facts["tokenizer"] = f"cannot load the tokenizer in {path}: {error}"
        return None
    theirs = tok.get_vocab()
    diffs = []
    for token, pid in sorted(policy["vocab"].items(), key=lambda kv: kv[1]):
        if pid == policy["pad_id"]:
            continue  # masked and replaced by 0 before the forward: never fed
        rid = theirs.get(token)
        if rid != pid:
            diffs.append({"token": token, "policy id": pid, "id here": rid})
    if not diffs:
        facts["tokenizer"] = f"same ids as the policy's for all {len(policy['vocab'])} tokens"
        return None
    facts["tokenizer"] = f"{len(diffs)} of the policy's {len(policy['vocab'])} tokens have another id (or none) here"
    facts["tokenizer differences"] = diffs[:KEPT_DIFFS]
    core = [d for d in diffs if d["token"] not in policy["added"]]
    listed = ", ".join(
        f"{d['token']!r} is id {d['policy id']} for the policy and " + ("missing" if d["id here"] is None else f"{d['id here']}") + " there"
        for d in (core or diffs)[:SHOWN_DIFFS]
    )
    if core:
        return "fail", (
            f"{shown} has a tokenizer that numbers tokens differently from the policy's: {listed} ({len(diffs)} of "
            f"{len(policy['vocab'])} differ); PPO feeds it the policy's ids, so it scores other text than the policy wrote"
        )
    return "warn", (
        f"{shown} has a tokenizer without the tokens `added_tokens` gives the policy: {listed}; PPO feeds their ids to it, "
        "and its embedding rows for them were never trained"
    )


def _shown(ctx, path: Path) -> str:
    """A path as short as it can be told: relative to the config file's folder when under its parent."""
    import os

    try:
        return os.path.relpath(path, ctx.config.base_dir)
    except ValueError:
        return str(path)



def _same_reference(ctx):
    """The script passed the policy itself as `ref_model` (docs/coverage.md: F5): PPOTrainer refuses it at construction in
    every release with a value model, and a reference that is the policy would measure a KL of zero anyway."""
    where = f" ({ctx.live.where[0]}:{ctx.live.where[1]})" if ctx.live.where else ""
    return fail(
        f"the script passes the policy itself as ref_model{where}: PPOTrainer stops at construction with "
        "\"ValueError: `model` and `ref_model` cannot be the same object\" (and a reference that moves with the policy "
        "would make the KL penalty zero); pass ref_model=None to let PPOTrainer copy the policy "
        "(trl.create_reference_model), load the reference separately, or with PEFT pass None (the adapter-free "
        "base is the reference)",
        manual("load the reference model separately (AutoModelForCausalLM.from_pretrained(...) a second time) or "
               "pass ref_model=None"),
        command=ctx.live.command,
    )


def _value_head_on_policy(ctx, v1: str):
    """trl < 0.12's PPOTrainer estimates values with a head on the policy (AutoModelForCausalLMWithValueHead's
    `v_head`) and refuses any other model at construction ("model must be a PreTrainedModelWrapper")."""
    model = ctx.live.model if ctx.live is not None else None
    head = getattr(model, "v_head", None)
    name = type(model).__name__ if model is not None else "no model object"
    details = {"PPOTrainer": v1, "policy": name}
    if head is not None:
        summary = getattr(head, "summary", head)
        details["v_head"] = str(summary)[:200]
        return passed(f"{v1}: the value head is on the policy ({name}.v_head), so the job needs no value model; "
                      "value_model_path is a later API's", **details)
    return fail(f"{v1} needs the policy with a value head (AutoModelForCausalLMWithValueHead.from_pretrained(...)): "
                f"{name} has none, and the trainer refuses it at construction (\"model must be a "
                "PreTrainedModelWrapper\")", **details)
