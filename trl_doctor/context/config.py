"""Reading a trl-doctor config: a TRL CLI config (JSON or YAML) plus the few keys the doctor adds.

Only cheap work happens here (parsing, resolving paths, deciding the trainer), so that input errors are
reported at once, before any heavy import. Building TRL's own config object happens in the context.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl_doctor.errors import InputError
from trl_doctor.context.hubcache import in_hub_cache

PPO_ONLY_KEYS = ("reward_model_path", "sft_model_path", "value_model_path", "response_length", "stop_token", "stop_token_id")
DOCTOR_KEYS = (
    "trainer",
    "model_name_or_path",
    "tokenizer_name_or_path",
    "added_tokens",
    "reward_funcs",
    "reward_model_name_or_path",
    "reward_model_path",
    "value_model_path",
    "dataset_path",
    # GRPOTrainer's agent arguments (trl >= 1.x), as dotted names or a script's live callables (trl_doctor.capture)
    "tools",
    "environment_factory",
    "rollout_func",
)
# keys TRL's CLI scripts (trl/scripts/grpo.py, rloo.py, ppo.py) and TrlParser's `env` block take besides the
# dataclass fields; num_processes, accelerate_config and config_file go to `accelerate launch`
SCRIPT_EXTRA_KEYS = ("reward_funcs", "reward_model_name_or_path", "env", "sft_model_path", "num_processes",
                     "accelerate_config", "config_file")
DATASET_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class Artifact:
    """A model or tokenizer location: the string the user wrote and the local folder it resolves to."""

    ref: str
    path: Path
    in_cache: bool  # a Hugging Face cache snapshot: readable, but never to be rewritten by --fix


@dataclass
class DoctorConfig:
    path: Path
    format: str  # "json" or "yaml"
    raw: dict[str, Any]
    trainer: str
    trainer_inferred: bool
    model: Artifact
    tokenizer: Artifact
    added_tokens: list[str] = field(default_factory=list)
    reward_funcs: list[str] = field(default_factory=list)
    dataset_file: Path | None = None
    dataset_dir: Path | None = None
    # what TRL's parser made of `raw` (facts.trl.parsing.Parsed), set by facts.trl.trainer_config.typed_as_trl
    parsed: Any = None

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)


# the trainer kind of a launch whose script built a transformers.Trainer that is not GRPO, RLOO or PPO (or a subclass)

MAX_CONFIG_BYTES = 10 * 1024 * 1024  # a TRL recipe is a few KB; past this it is not a config (and YAML would crawl)
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux; one name at most 255 bytes


def checked_path(text: str, shown: str, key: str | None = None) -> Path:
    """`text` as a path, `~` expanded; InputError naming the file (and the key) when no system could open it:
    a NUL byte, a name past the system's limits, or a `~user` that is not a user here."""
    what = f"{shown}: `{key}`" if key else shown
    if "\0" in text:
        raise InputError(f"{what}: the path contains a NUL byte")
    if len(text) > MAX_PATH_CHARS or any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in text.split("/")):
        raise InputError(f"{what}: the path is too long ({len(text)} characters; a name may have 255 bytes, a path 4096)")
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise InputError(f"{what}: {text.split('/')[0]!r} is not a user on this machine") from None


def load_raw(path: str | os.PathLike) -> dict[str, Any]:
    """The mapping a JSON or YAML config file holds; InputError naming the file otherwise."""
    import stat

    shown = str(path)
    p = checked_path(shown, shown)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{shown}: is a folder; give the config file (JSON or YAML)")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{shown}: not a regular file (a pipe, socket or device); give the config file (JSON or YAML)")
    if st.st_size > MAX_CONFIG_BYTES:
        raise InputError(f"{shown}: {st.st_size / 2**20:.0f} MiB is too large for a config file (the limit is "
                         f"{MAX_CONFIG_BYTES // 2**20} MiB)")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    raw = _parse(_text(data, shown), "json" if p.suffix.lower() == ".json" else "yaml", shown)
    if not isinstance(raw, dict):
        raise InputError(f"{shown}: the config must be a mapping of keys to values, not {_kind(raw)}")
    bad = next((k for k in raw if not isinstance(k, str)), None)
    if bad is not None:
        raise InputError(f"{shown}: every key must be a name; {bad!r} is {type(bad).__name__}")
    return raw


def _text(data: bytes, shown: str) -> str:
    """UTF-8 text without NUL bytes; InputError naming the problem otherwise."""
    from trl_doctor.context.inputs import utf8_text

    text = utf8_text(data, shown)
    if "\0" in text:
        raise InputError(f"{shown}: not a text file (it holds NUL bytes)")
    return text


def _kind(value: Any) -> str:
    return "empty" if value is None else f"a {type(value).__name__}" if not isinstance(value, str) else "a plain string"


def load_config(path: str | os.PathLike) -> DoctorConfig:
    shown = str(path)
    raw = load_raw(path)
    p = Path(path).expanduser().resolve()
    fmt = "json" if p.suffix.lower() == ".json" else "yaml"

    trainer, inferred = _trainer(raw, shown)
    model_ref = raw.get("model_name_or_path")
    if not isinstance(model_ref, str) or not model_ref.strip():
        raise InputError(f"{shown}: `model_name_or_path` is required (a local folder or a cached hub id)")
    checked_path(model_ref, shown, "model_name_or_path")
    model = resolve_artifact(model_ref, p.parent, shown, "model_name_or_path", need="config.json")
    tok_ref = raw.get("tokenizer_name_or_path")
    if tok_ref is None:
        tokenizer = model
    else:
        if not isinstance(tok_ref, str):
            raise InputError(f"{shown}: `tokenizer_name_or_path` must be a string")
        checked_path(tok_ref, shown, "tokenizer_name_or_path")
        tokenizer = resolve_artifact(tok_ref, p.parent, shown, "tokenizer_name_or_path", need="tokenizer_config.json")

    added = _str_list(raw, "added_tokens", shown)
    rewards = _str_list(raw, "reward_funcs", shown)
    cfg = DoctorConfig(p, fmt, raw, trainer, inferred, model, tokenizer, added, rewards)
    _resolve_dataset(cfg, shown)
    for key in ("reward_model_name_or_path", "reward_model_path", "value_model_path", "sft_model_path"):
        ref = raw.get(key)
        if isinstance(ref, str) and ref:
            checked_path(ref, shown, key)
            resolve_artifact(ref, p.parent, shown, key, need="config.json")
    return cfg


def _parse(text: str, fmt: str, shown: str) -> Any:
    try:
        return _parse_text(text, fmt, shown)
    except RecursionError:
        raise InputError(f"{shown}: nested too deeply to be a config (lists or mappings hundreds of levels deep)") from None


def _parse_text(text: str, fmt: str, shown: str) -> Any:
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{shown}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{shown}: invalid YAML{where}: {problem}") from None


def _trainer(raw: dict, shown: str) -> tuple[str, bool]:
    t = raw.get("trainer")
    if t is None:
        return ("ppo" if any(k in raw for k in PPO_ONLY_KEYS) else "grpo"), True
    if not isinstance(t, str) or t.lower() not in ("grpo", "ppo", "rloo"):
        raise InputError(f"{shown}: `trainer` must be grpo, ppo or rloo, not {t!r}")
    return t.lower(), False


def _str_list(raw: dict, key: str, shown: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InputError(f"{shown}: `{key}` must be a list of strings")
    return list(value)


def local_path(ref: str, base: Path) -> str:
    """`ref` as an absolute path when it names something that exists (relative to `base`), else unchanged: a hub
    id or a builder name (`json`) stays one."""
    p = Path(ref).expanduser()
    q = p if p.is_absolute() else Path(base) / p
    return str(q.resolve()) if q.exists() else ref


def _looks_like_hub_id(ref: str) -> bool:
    parts = ref.split("/")
    return len(parts) <= 2 and all(parts) and not ref.startswith((".", "~")) and "\\" not in ref


def resolve_artifact(ref: str, base: Path, shown: str, key: str, need: str) -> Artifact:
    """A local folder (relative to the config file) or a hub id already in the local cache; never a download."""
    candidate = Path(ref).expanduser()
    if not candidate.is_absolute():
        candidate = base / candidate
    if candidate.is_dir():  # a snapshot folder of a hub cache, or a link to one, is still the cache
        return Artifact(ref, candidate.resolve(), in_cache=in_hub_cache(candidate))
    if candidate.exists():
        raise InputError(f"{shown}: `{key}` {ref!r} is a file; it must be a folder or a hub id")
    if _looks_like_hub_id(ref):
        snapshot = _cached_snapshot(ref, need)
        if snapshot is not None:
            return Artifact(ref, snapshot, in_cache=True)
        raise InputError(
            f"{shown}: `{key}` {ref!r} is not a folder (looked for {candidate}) and is not in the local "
            "Hugging Face cache; trl-doctor never downloads"
        )
    raise InputError(f"{shown}: `{key}`: no such folder {candidate}")


def _cached_snapshot(repo_id: str, filename: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for name in (filename, "config.json", "tokenizer_config.json", "tokenizer.json"):
        try:
            hit = try_to_load_from_cache(repo_id, name)
        except Exception:  # not a valid repo id (huggingface_hub validates it): not in the cache either
            return None
        if isinstance(hit, str):
            return Path(hit).parent
    return None


def _path_key(cfg: DoctorConfig, shown: str, key: str) -> tuple[str, Path]:
    """(the string a path key holds, the path it names, relative to the config's folder)."""
    ref = cfg.raw[key]
    if not isinstance(ref, str):
        raise InputError(f"{shown}: `{key}` must be a string")
    path = checked_path(ref, shown, key)
    return ref, path if path.is_absolute() else cfg.base_dir / path


def _resolve_dataset(cfg: DoctorConfig, shown: str) -> None:
    raw = cfg.raw
    if raw.get("dataset_path") is not None:
        ref, f = _path_key(cfg, shown, "dataset_path")
        if not f.is_file():
            from trl_doctor.context.inputs import not_a_file

            odd = not_a_file(f)
            raise InputError(f"{f}: {odd}, not a dataset file (`dataset_path` in {shown})" if odd
                             else f"{shown}: `dataset_path`: no such file {f}")
        if f.suffix.lower() not in DATASET_SUFFIXES:
            raise InputError(f"{shown}: `dataset_path` {ref!r}: expected a .json, .jsonl or .parquet file")
        cfg.dataset_file = f.resolve()
    elif raw.get("dataset_name") is not None:
        ref, d = _path_key(cfg, shown, "dataset_name")
        if d.is_dir():
            cfg.dataset_dir = d.resolve()
        elif not _looks_like_hub_id(ref):
            raise InputError(f"{shown}: `dataset_name`: no such folder {d}")
        # otherwise a hub id: the dataset loader resolves it offline, from the cache only
