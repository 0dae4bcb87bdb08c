"""TD013 dataset-schema: the dataset has the columns and rows the trainer and reward functions read.

What it does
    Loads the dataset offline (one that cannot load: exit 2) and shows its columns, rows and row 0.
    Classifies every prompt as text, messages, empty, null or malformed (from the Arrow type, else
    up to 10000 rows). Each reward function's parameters without a default (read with `ast`) must be
    columns or keywords the installed trainer passes (`prompts`, `completions`; later
    `completion_ids`, `trainer_state`; 1.x `log_extra`, `log_metric`).

Why is this bad?
    The trainer reads the dataset only at the first batch, after the model (and vLLM) loaded:
    - GRPO and RLOO read a `prompt` column (so does examples/scripts/ppo/ppo.py): `question`,
      `problem` or `messages` fail the first step with "KeyError: 'prompt'" (ms-swift#5087);
    - TRL decides per batch, from its first row, whether prompts are text or messages: mixed, null
      or empty rows fail or mix formats mid-run;
    - every column but `prompt`/`completion` goes to each reward function by name: one taking
      `answer` without a default needs it ("TypeError: ... missing 1 required positional argument:
      'answer'");
    - `dataset_streaming: true` (TRL 0.19+) gives an IterableDataset: GRPO 0.17-1.8 and RLOO
      0.22-1.8 refuse it ("Iterable datasets are not yet supported"), GRPO 0.14-0.16 broke groups
      (trl#3213) or crashed (trl#2942), PPO (and RLOO < 0.22) take its length; 1.9.0+ need
      `max_steps`.

Example
    dataset_path: questions.jsonl       # columns: question, answer
    -> fail: the dataset has no `prompt` column (columns: question, answer): ... KeyError: 'prompt'

Fix safety
    No fix: the dataset is the user's. The message names the column to rename, the rows to repair,
    the column each reward function lacks, and for a stream `max_steps` or the release to use.
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from trl_doctor import Finding, InputError, Unavailable, fail, passed, rule, skip, warn
from trl_doctor.facts.trl.subclass import own_data_path

from trl_doctor.facts.inputs.chat import prompt_format, sample_indices
from trl_doctor.facts.launch.settings import config_value
from trl_doctor.facts.inputs.rows import dataset_head
from trl_doctor.facts.trl.behaviour import ppo_style, stream_support
from trl_doctor.facts.trl.installed import script_fields

SCAN_ROWS = 10000  # rows looked at one by one when the Arrow column type does not settle the format
SHOWN_ROWS = 8
# keywords TRL passes to reward functions when its source cannot be read
DEFAULT_PASSED = ("prompts", "completions")
DEFAULT_EXCLUDED = ("prompt", "completion")


# -- the words both judgments say ---------------------------------------------------------------------------

# columns a prompt is often found under, the likeliest first: the first one present is the one to rename
CANDIDATES = ("question", "problem", "query", "instruction", "input", "text", "messages", "conversations", "conversation",
              "prompts", "Prompt", "question_text", "content")


def prompt_reader(trainer: str, ppo_style: bool) -> str:
    """Who reads the `prompt` column: a PPO-style trainer's example script, else the trainer itself."""
    if ppo_style:
        return (f"{trainer.upper()}'s example script (examples/scripts/{trainer}/{trainer}.py) tokenizes "
                "`prompt` (dataset_text_field = \"prompt\") into the `input_ids` the trainer reads")
    return f"{trainer.upper()}Trainer builds every batch from it (`prompts = [x[\"prompt\"] for x in inputs]`)"


def no_prompt_column(columns: list[str], reader: str) -> str:
    """No `prompt` column; the fix names the likeliest column to rename (`reader`: prompt_reader's words)."""
    near = [c for c in CANDIDATES if c in columns]
    hint = (f"rename `{near[0]}` to `prompt`" if near else "add a `prompt` column") + \
        " (dataset.rename_column, or map the rows to {\"prompt\": ...})"
    return (f"the dataset has no `prompt` column (columns: {', '.join(columns) or 'none'}): {reader}, so the first step "
            f"fails with KeyError: 'prompt'; {hint}")


@rule(
    id="TD013",
    slug="dataset-schema",
    title="The dataset has the columns and row format the trainer and the reward functions read",
    contexts=("full", "static"),
)
def check(ctx):
    own = own_data_path(ctx)
    if own:  # a framework's trainer reads its rows its own way
        yield skip(f"{own}; the dataset's columns are read by that code, not judged by TRL's contract")
        return
    stream_problems, stream = _streaming(ctx)
    findings: list = []
    try:
        ds = ctx.dataset
    except Unavailable as exc:
        yield from (fail(m, **stream) for m in stream_problems)
        yield from _head_only(ctx, exc, stream)
        return
    except InputError as exc:
        found = _diagnose_file(ctx, exc, stream)
        if found is None:
            raise
        yield from (fail(m, **found.details) for m in stream_problems)
        yield found
        return
    columns = list(ds.column_names)
    total = len(ds)
    details = {"dataset": _where(ctx), "rows": total, "columns": columns,
               "features": {k: str(v) for k, v in ds.features.items()}, **stream}
    if total:
        details["row 0"] = _short_row(ds[0])
    findings += [fail(m, **details) for m in stream_problems]
    if not total:
        yield from findings
        yield fail(f"the dataset {_where(ctx)} has no rows", **details)
        return
    if "prompt" not in columns and ctx.live is not None and "input_ids" in columns and ppo_style(ctx):
        # a launch command's PPO-style script (PPO, RLOO before trl 0.22) tokenized the prompts itself: the
        # trainer's collator pads `input_ids` as they are and never looks for a `prompt` column
        yield from findings
        rows_read, found = _token_rows(ctx, ds, total)
        details.update(rows_read)
        yield from (replace(f, details=dict(details)) for f in found)
        return
    if "prompt" not in columns:
        yield from findings
        yield fail(no_prompt_column(columns, prompt_reader(ctx.trainer, ppo_style(ctx))), **details)
        return
    # each part's findings carry the details known when they were found
    formats, found = _formats(ctx, ds, total)
    details.update(formats)
    findings += [replace(f, details=dict(details)) for f in found]
    if ctx.trainer in ("grpo", "rloo") and ctx.config.reward_funcs:
        reward_columns, found = _reward_columns(ctx, columns)
        details.update(reward_columns)
        findings += [replace(f, details=dict(details)) for f in found]
    environments, found = _environments(ctx, ds, columns)
    details.update(environments)
    findings += [replace(f, details=dict(details)) for f in found]
    yield from findings
    if not any(f.status.value in ("fail", "warn") for f in findings):
        kinds = details.get("prompt formats", {})
        kind = "conversational (role/content messages)" if "conversational" in kinds else "plain text"
        needs = details.get("reward function columns")
        taken = sorted({c for cols in (needs or {}).values() for c in cols})
        extra = f"; the reward functions' columns ({', '.join(taken)}) are there" if taken else ""
        yield passed(f"{total} rows with columns {', '.join(columns)}: `prompt` is {kind} in {details['rows scanned']}{extra}",
                     **details)


# -- the rows ---------------------------------------------------------------------------------------------------

def _formats(ctx, ds, total) -> tuple[dict[str, Any], list[Finding]]:
    """(the details: the rows scanned and the prompt formats found; the findings, without details)."""
    found = _arrow_formats(ds)
    if found is not None:
        by_kind, scanned_rows = found, total
        scanned = f"all {total} rows (from the Arrow column)"
    else:
        indices = sample_indices(total, SCAN_ROWS)
        prompts = ds.select_columns(["prompt"])[indices]["prompt"]
        by_kind = {}
        for row, value in zip(indices, prompts):
            entry = by_kind.setdefault(prompt_format(value), [0, []])
            entry[0] += 1
            if len(entry[1]) < SHOWN_ROWS:
                entry[1].append(row)
        scanned_rows = len(indices)
        scanned = f"all {total} rows" if scanned_rows == total else f"{scanned_rows} rows evenly spaced over {total}"
    details = {"rows scanned": scanned, "prompt formats": {k: _rows(*v) for k, v in sorted(by_kind.items())}}
    out = []
    if "standard" in by_kind and "conversational" in by_kind:
        (n_std, std), (n_conv, conv) = by_kind["standard"], by_kind["conversational"]
        out.append(fail(
            f"the prompts mix plain text ({n_std} rows, first row {std[0]}) and message lists ({n_conv} rows, first row "
            f"{conv[0]}) in {scanned}: TRL takes a batch's format from its first row, so a batch holding both kinds fails "
            "(or renders some prompts wrongly); convert them to one format",
        ))
    if "missing" in by_kind:
        n, rows = by_kind["missing"]
        filled = [c for c in ds.column_names if c != "prompt" and ds[rows[0]].get(c) is not None]
        out.append(fail(
            f"{n} of {scanned_rows} rows have no prompt (null; rows {_rows(n, rows)})"
            + (f", row {rows[0]} has {', '.join(filled)} instead" if filled else "")
            + ": the batch that holds one fails; fill or drop those rows",
        ))
    if "malformed" in by_kind:
        n, rows = by_kind["malformed"]
        value = ds[rows[0]]["prompt"]
        out.append(fail(
            f"{n} of {scanned_rows} prompts are neither text nor role/content messages (rows {_rows(n, rows)}; row "
            f"{rows[0]}: {_short(value)}): {_malformed_why(value)}",
        ))
    if "empty" in by_kind:
        n, rows = by_kind["empty"]
        out.append(warn(
            f"{n} of {scanned_rows} prompts are empty (rows {_rows(n, rows)}): the model generates from nothing and the "
            "rewards score text unrelated to any task; drop those rows",
        ))
    return details, out


def _arrow_formats(ds) -> dict[str, list] | None:
    """{kind: [count, first rows]} over every row, read from the Arrow column when its type settles the format (a
    string column, or a list of role/content structs); None when rows must be looked at one by one (a JSON column
    mixing kinds, another type, a dataset with an indices mapping)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if getattr(ds, "_indices", None) is not None:
        return None
    column = ds.data.column("prompt")
    kind = column.type
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    messages = ((pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_struct(kind.value_type)
                and {"role", "content"} <= {kind.value_type.field(i).name for i in range(kind.value_type.num_fields)})
    if not (text or messages):
        return None
    flags: dict[str, list] = {}
    offset = 0
    for chunk in column.chunks:
        marks = {"missing": chunk.is_null()}
        if text:
            marks["empty"] = pc.fill_null(pc.equal(chunk, ""), False)
        else:
            marks["empty"] = pc.fill_null(pc.equal(pc.list_value_length(chunk), 0), False)
            flat = pc.list_flatten(chunk)
            bad = pc.or_(flat.field("role").is_null(), flat.field("content").is_null())
            if "tool_calls" in {flat.type.field(i).name for i in range(flat.type.num_fields)}:
                bad = pc.or_(flat.field("role").is_null(),
                             pc.and_(flat.field("content").is_null(), flat.field("tool_calls").is_null()))
            parents = pc.list_parent_indices(chunk)
            rows = sorted(set(pc.filter(parents, bad).to_pylist()))
            marks["malformed"] = pa.array([False] * len(chunk)) if not rows else \
                pc.is_in(pa.array(range(len(chunk))), value_set=pa.array(rows))
        other = pc.or_(marks["missing"], marks["empty"])
        if "malformed" in marks:
            other = pc.or_(other, marks["malformed"])
        marks["standard" if text else "conversational"] = pc.invert(other)
        for name, mask in marks.items():
            count = pc.sum(mask.cast(pa.int64())).as_py() or 0
            if not count:
                continue
            entry = flags.setdefault(name, [0, []])
            entry[0] += count
            if len(entry[1]) < SHOWN_ROWS:
                entry[1] += [offset + i for i in pc.indices_nonzero(mask)[:SHOWN_ROWS].to_pylist()]
        offset += len(chunk)
    return flags


def _malformed_why(value) -> str:
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        keys = sorted({k for m in value for k in m if m.get(k) is not None})
        return (f"its messages have the keys {keys}; TRL's chat template needs `role` and `content` in every message "
                "(rename the keys, e.g. from/value to role/content)")
    if isinstance(value, list):
        return "a list of strings is not a conversation: make each message {\"role\": ..., \"content\": ...}"
    return f"a {type(value).__name__} cannot be rendered or tokenized; store a string or a list of messages"


def _diagnose_file(ctx, exc: InputError, extra: dict):
    """A local JSON/JSONL file that datasets cannot load: find the rows that break one column's type."""
    path = ctx.config.dataset_file
    if path is None or path.suffix.lower() not in (".json", ".jsonl"):
        return None
    try:
        text = path.read_text(encoding="utf-8")
        try:
            rows = json.loads(text)
            rows = rows if isinstance(rows, list) else None
        except ValueError:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not rows or not all(isinstance(r, dict) for r in rows):
        return None
    by_kind: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_kind.setdefault(prompt_format(row.get("prompt")), []).append(i)
    details = {"dataset": str(path), "rows": len(rows), "columns": sorted({k for r in rows for k in r}),
               "loader error": str(exc), "prompt formats": {k: _rows(len(v), v) for k, v in sorted(by_kind.items())},
               "row 0": _short_row(rows[0]), **extra}
    if {"standard", "conversational"} <= set(by_kind):
        std, conv = by_kind["standard"], by_kind["conversational"]
        return fail(
            f"the dataset cannot be loaded ({exc}): its `prompt` column mixes plain text ({len(std)} rows, first row {std[0]}) "
            f"and message lists ({len(conv)} rows, first row {conv[0]}), which datasets {ctx.version('datasets')} cannot "
            "store in one column; convert the prompts to one format", **details,
        )
    return None


# -- reward functions ---------------------------------------------------------------------------------------------

def _reward_columns(ctx, columns) -> tuple[dict[str, Any], list[Finding]]:
    """(the details: the columns each reward function takes, what TRL passes; the findings, without details)."""
    passed_names, excluded, evidence = _reward_contract(ctx.trainer,
                                                        config_value(ctx, "environment_factory") is not None)
    available = set(passed_names) | (set(columns) - set(excluded))
    needs, out, notes = {}, [], {}
    for name in ctx.config.reward_funcs:
        params, where = _reward_params(name, ctx.config.base_dir)
        if params is None:
            notes[name] = where
            continue
        required = [p for p, kind, has_default in params
                    if not has_default and kind in ("positional_or_keyword", "keyword_only")]
        columns_taken = [p for p in required if p not in passed_names]
        needs[name] = columns_taken
        missing = [p for p in required if p not in available]
        if missing:
            near = {p: [c for c in columns if c.lower().startswith(p.lower()[:3]) and c not in excluded] for p in missing}
            hint = "; ".join(f"`{p}`: the dataset has {', '.join(near[p])}" for p in missing if near[p])
            out.append((name, missing, where, hint))
    details: dict[str, Any] = {"reward function columns": needs,
                               "TRL passes reward functions": (f"{', '.join(passed_names)} and every column but "
                                                               f"{', '.join(excluded)} ({evidence})")}
    if notes:
        details["reward functions not inspected"] = notes
    found = []
    for name, missing, where, hint in out:
        names = ", ".join(f"`{m}`" for m in missing)
        found.append(fail(
            f"reward function {name} ({where}) takes {names} without a default, but the dataset has no such column "
            f"(columns: {', '.join(columns)}): TRL passes only the dataset's columns and {', '.join(passed_names)} by name, so "
            f"the first reward call fails with TypeError: missing required argument {missing[0]!r}; add the column "
            f"or give the parameter a default" + (f" ({hint})" if hint else ""),
        ))
    return details, found


def _environments(ctx, ds, columns) -> tuple[dict[str, Any], list[Finding]]:
    """A dict `environment_factory` (GRPOTrainer's several environments): every row's `environment` must name one of
    them. TRL checks each batch's rows only when it generates for them and raises ValueError there, a step that may
    come hours in; every row is read here."""
    factory = config_value(ctx, "environment_factory")
    if not isinstance(factory, dict) or not factory:
        return {}, []
    names = sorted(factory)
    details: dict[str, Any] = {"environments": names}
    if "environment" not in columns:
        return details, [fail(
            f"environment_factory names several environments ({', '.join(names)}) but the dataset has no "
            "`environment` column: GRPOTrainer routes each row to its environment by that column and raises "
            "ValueError at the first batch (\"Example has `environment=None`, which is not among the environments "
            "passed to `environment_factory`\"); add the column")]
    values = ds.unique("environment") if hasattr(ds, "unique") else sorted({r.get("environment") for r in ds})
    unknown = [v for v in values if v not in factory]
    if not unknown:
        return details, []
    rows = [i for i, v in enumerate(ds["environment"]) if v in set(unknown)]
    shown = ", ".join(repr(v) for v in unknown[:5])
    return details, [fail(
        f"{len(rows)} {'row names' if len(rows) == 1 else 'rows name'} an environment environment_factory lacks "
        f"({shown}; it has {', '.join(names)}; first "
        f"at row {rows[0]}): GRPOTrainer raises ValueError (\"Example has `environment=...`, which is not among the "
        f"environments passed to `environment_factory`\") at the step whose batch reaches the first of them, "
        "minutes or hours into the run; add the environment or fix the rows", **{"rows naming no environment": rows[:20]})]


def _reward_contract(trainer: str, environments: bool) -> tuple[list[str], list[str], str]:
    """(keywords the installed trainer passes reward functions, dataset columns it keeps out, evidence), read from its
    source by the helper the reward-functions rule and the smoke step share; `environments`: the job has an
    environment_factory, whose instances TRL also passes (`environments=`)."""
    from trl_doctor.facts.rewards import reward_call

    call = reward_call(trainer)
    if call is None or not call.keywords:
        return list(DEFAULT_PASSED), list(DEFAULT_EXCLUDED), "the trainer's reward call was not found: assumed"
    return list(call.call_names(environments)), list(call.excluded_columns), call.evidence or call.source


def _reward_params(name: str, base_dir: Path):
    """([(parameter, kind, has_default)], where) of one `reward_funcs` entry, read from its source without importing
    it when it is a plain function; (None, why) when it cannot be read (the reward-functions rule reports imports)."""
    from trl_doctor.facts.rewards import live_reward

    live = live_reward(name)
    if live is not None:  # built by a launch command's script: the object itself
        try:
            return _signature(live), _source_of(live)
        except (TypeError, ValueError) as exc:
            return None, f"{name}: {exc}"
    if "." not in name:
        try:
            import trl.rewards as builtin

            return _signature(getattr(builtin, name)), f"trl.rewards.{name}"
        except (ImportError, AttributeError, TypeError, ValueError):
            return None, "not one of trl.rewards"
    module, _, attr = name.rpartition(".")
    file = _module_file(module, base_dir)
    if file is None:
        return None, f"module {module!r} not found (from {base_dir})"
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        return None, f"{file}: {type(exc).__name__}"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            return _ast_params(node.args), f"{file}:{node.lineno}"
    # not a plain def (an assignment, a class, a partial, an import): ask the object itself
    from trl_doctor.facts.rewards import RewardImportError, resolve_reward

    try:
        return _signature(resolve_reward(name, base_dir)), str(file)
    except (RewardImportError, TypeError, ValueError) as exc:
        return None, f"{file}: {exc}"


def _source_of(func) -> str:
    code = getattr(func, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(func)


def _module_file(module: str, base_dir: Path) -> Path | None:
    parts = module.split(".")
    for root in (Path(base_dir),):
        candidate = root.joinpath(*parts)
        for file in (candidate.with_suffix(".py"), candidate / "__init__.py"):
            if file.is_file():
                return file
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _ast_params(args: ast.arguments) -> list[tuple[str, str, bool]]:
    positional = [(a.arg, "positional_only") for a in args.posonlyargs] + [(a.arg, "positional_or_keyword") for a in args.args]
    first_default = len(positional) - len(args.defaults)
    out = [(n, kind, i >= first_default) for i, (n, kind) in enumerate(positional)]
    out += [(a.arg, "keyword_only", d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.vararg:
        out.append((args.vararg.arg, "var_positional", True))
    if args.kwarg:
        out.append((args.kwarg.arg, "var_keyword", True))
    return out


def _signature(func) -> list[tuple[str, str, bool]]:
    import inspect

    P = inspect.Parameter
    kinds = {P.POSITIONAL_ONLY: "positional_only", P.POSITIONAL_OR_KEYWORD: "positional_or_keyword",
             P.KEYWORD_ONLY: "keyword_only", P.VAR_POSITIONAL: "var_positional", P.VAR_KEYWORD: "var_keyword"}
    return [(p.name, kinds[p.kind], p.default is not P.empty or kinds[p.kind].startswith("var"))
            for p in inspect.signature(func).parameters.values()]


# -- streaming ------------------------------------------------------------------------------------------------------

def _head_only(ctx, why: Unavailable, stream: dict):
    """What the first rows of a local dataset file decide where the datasets library does not load it (--static);
    else `skip` with why the dataset is not here."""
    try:
        head = dataset_head(ctx)
    except Unavailable:
        yield skip(str(why), **stream)
        return
    columns = head.columns or []
    details = {"dataset": str(head.path), "columns": columns, "rows read": len(head.rows)}
    if "prompt" not in columns:
        yield fail(no_prompt_column(columns, prompt_reader(ctx.trainer, ppo_style(ctx))), **details)
        return
    kinds = sorted({prompt_format(r.get("prompt")) for r in head.rows})
    yield passed(f"columns {', '.join(columns)}: `prompt` is {', '.join(kinds)} in the first {len(head.rows)} rows "
                 "(every row's format and the reward functions' columns are read in the full check)", **details)


def _streaming(ctx) -> tuple[list[str], dict[str, Any]]:
    """(what is wrong with a streamed dataset: messages, all failures; the details: what was read)."""
    raw = ctx.config.raw
    # the key as the file writes it (TRL's script arguments, which the trainer config does not hold)
    key = next((k for k in ("dataset_streaming", "streaming") if raw.get(k)), None)
    if key is None:
        return [], {}
    support = stream_support(ctx)
    trl = ctx.version("trl") or "not installed"
    details: dict[str, Any] = {key: True, "trl": trl}
    try:
        known = key in script_fields()
    except ImportError:
        known = False
    if not known:
        details[f"{key} in trl {trl}"] = "not a field of ScriptArguments or DatasetMixtureConfig (see trainer-config)"
    if support is None:
        return [], details
    cls = {"grpo": "GRPOTrainer", "rloo": "RLOOTrainer", "ppo": "PPOTrainer"}[ctx.trainer]
    if support.kind == "repeats":
        steps = config_value(ctx, "max_steps", -1)
        details["max_steps"] = steps
        details["trainer behaviour"] = support.evidence
        if not isinstance(steps, int) or steps <= 0:
            return [
                f"`{key}: true` streams the dataset (an IterableDataset has no length) and max_steps is {steps}: "
                f"{cls} in trl {trl} accepts the stream, but the Trainer stops with 'ValueError: The train_dataset does "
                "not implement __len__, max_steps has to be specified'; set max_steps"], details
        return [], details
    details["trainer behaviour"] = support.evidence
    if support.kind == "refuses":
        return [
            f"`{key}: true` streams the dataset, but {cls} in trl {trl} refuses an IterableDataset at start-up "
            f"(NotImplementedError: {support.refusal}); drop `{key}` (the dataset loads as a map-style dataset) or "
            "upgrade trl (1.9.0 and later repeat a stream's prompts, with max_steps set)"], details
    if support.kind == "len":
        return [
            f"`{key}: true` streams the dataset, but {cls} in trl {trl} takes len(train_dataset) at start-up: "
            f"'TypeError: object of type 'IterableDataset' has no len()'; drop `{key}`"], details
    return [
        f"`{key}: true` streams the dataset, but {cls} in trl {trl} has no support for an IterableDataset: its sampler "
        "cannot repeat each prompt num_generations times, so the advantages compare completions of unrelated prompts "
        f"(trl#3213) or the first batch fails (trl#2942); drop `{key}` or upgrade trl (1.9.0 and later)"], details


# -- formatting -------------------------------------------------------------------------------------------------------

def _where(ctx) -> str:
    cfg = ctx.config
    if ctx.live is not None:
        return f"train_dataset from {ctx.live.command}"
    return str(cfg.dataset_file or cfg.dataset_dir or cfg.get("dataset_name"))


def _token_rows(ctx, ds, total) -> tuple[dict[str, Any], list[Finding]]:
    """The `input_ids` a PPO-style script tokenized: every row must hold at least one id the tokenizer knows (an empty
    row leaves the trainer nothing to generate from; an id past the tokenizer's vocabulary was made by another one).
    (the details: the rows scanned; the findings, without details)."""
    cls = f"{ctx.trainer.upper()}Trainer"
    indices = sample_indices(total, SCAN_ROWS)
    rows = ds.select_columns(["input_ids"])[indices]["input_ids"]
    try:
        size = len(ctx.tokenizer)
    except Exception:  # no tokenizer to compare with: the other rules say why
        size = None
    empty = [i for i, r in zip(indices, rows) if not r]
    foreign = [i for i, r in zip(indices, rows) if r and size is not None and max(r) >= size]
    found = []
    if empty:
        found.append(fail(f"`input_ids` is empty in rows {_rows(len(empty), empty)}: {cls} has no prompt to generate "
                          "from there; drop those rows before training"))
    if foreign:
        found.append(fail(f"`input_ids` in rows {_rows(len(foreign), foreign)} hold ids past the tokenizer's {size} "
                          "tokens: the prompts were tokenized with another tokenizer; tokenize them with the trainer's "
                          "processing_class"))
    if not empty and not foreign:
        found.append(passed(f"{total} rows of `input_ids`, tokenized by the script, as {cls} (trl "
                            f"{ctx.version('trl')}) reads them: it pads them itself and reads no `prompt` column"))
    return {"rows scanned": f"{len(indices)} of {total}"}, found


def _rows(count: int, rows: list[int]) -> str:
    return ", ".join(str(r) for r in rows[:SHOWN_ROWS]) + (f", ... ({count} rows)" if count > SHOWN_ROWS else "")


def _short(value, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _short_row(row: dict) -> dict:
    return {k: _short(v, 120) for k, v in row.items()}
