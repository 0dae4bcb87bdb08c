"""The files `check --static` reads, read as files: the model's config.json and generation_config.json, the
tokenizer's tokenizer_config.json, special_tokens_map.json and tokenizer.json (as JSON: no `tokenizers`, no
transformers), the chat template, and the first rows of a local dataset file. Nothing here imports the ML stack or
runs the repository's code; a file that is not valid JSON, or too large to read here, or not shaped as its kind
is, is an input error naming it (exit 2, one line), as is one a symbolic link takes out of the checked repository
(trl_doctor.static.confine)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from trl_doctor.context.inputs import read_json_file, utf8_text
from trl_doctor.errors import InputError
from .confine import Confinement

HEAD_ROWS = 2  # dataset rows read: the columns and the prompt format of the first row decide what static can
MAX_JSON_BYTES = 64 * 1024 * 1024  # a JSON file past this is not read (a whole-file .json dataset: the full check)
MAX_JSON_VALUES = 5_000_000  # nor one of more values (a 64 MiB file of `{},` would take 1.6 GB and 9 s to parse)
MAX_TEMPLATE_BYTES = 4 * 1024 * 1024  # chat_template.jinja: real ones are a few KB
UNDER_STATIC = " under --static"


def read_json(path: Path, confine: Confinement | None = None, what: str = "JSON") -> dict | None:
    """The JSON object in `path`, or None when there is no such file; read within --static's bounds."""
    if confine is not None:
        confine.check(path)
    if not path.is_file() and not os.path.lexists(path):
        return None
    value = read_json_file(path, what, limit=MAX_JSON_BYTES, max_values=MAX_JSON_VALUES, why=UNDER_STATIC)
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def read_text(path: Path, confine: Confinement | None, what: str, limit: int = MAX_TEMPLATE_BYTES) -> str:
    """A text file (a chat template) as UTF-8, within --static's bounds; InputError naming the file otherwise."""
    from trl_doctor.context.inputs import read_bounded

    if confine is not None:
        confine.check(path)
    return utf8_text(read_bounded(path, what, limit, UNDER_STATIC), str(path))


def _content(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


@dataclass
class Tokenizer:
    """A tokenizer folder read as files (each within `confine`, the checked repository, where given)."""

    folder: Path
    confine: Confinement | None = None

    def _json(self, name: str) -> dict | None:
        return read_json(self.folder / name, self.confine, "tokenizer")

    @cached_property
    def config(self) -> dict:
        return self._json("tokenizer_config.json") or {}

    @cached_property
    def special_map(self) -> dict:
        return self._json("special_tokens_map.json") or {}

    @cached_property
    def tokenizer_json(self) -> dict | None:
        """tokenizer.json parsed whole: only where a token is not found in its head and its vocabulary's text."""
        value = self._json("tokenizer.json")
        if value is not None:
            _shaped(self.folder / "tokenizer.json", value, {"model": dict, "added_tokens": list})
        return value

    @cached_property
    def _parts(self) -> tuple[dict, bytes, int] | None:
        """(tokenizer.json's keys before `model`, parsed; the file's bytes; where `model`'s object starts in them), or
        None without the file: a real vocabulary's model is megabytes of JSON (Qwen's: 7 MB, 0.3 s to parse) of which
        --static needs a token or two, found in its bytes. A file not laid out as the tokenizers library writes it (an
        object whose last key is `model`, an object) is parsed whole."""
        path = self.folder / "tokenizer.json"
        if self.confine is not None:
            self.confine.check(path)
        if not path.is_file() and not os.path.lexists(path):
            return None
        from trl_doctor.context.inputs import read_bounded

        data = read_bounded(path, "tokenizer", MAX_JSON_BYTES, UNDER_STATIC)
        found = _split_model(data)
        if found is None:  # the whole file, with its errors named as a parse names them
            whole = self.tokenizer_json
            return ({k: v for k, v in whole.items() if k != "model"}, b"", 0) if whole is not None else None
        head, at = found
        _shaped(path, head, {"added_tokens": list})
        return head, data, at

    @cached_property
    def _vocab_span(self) -> tuple[int, int] | None:
        """Where tokenizer.json's model.vocab object (a BPE or WordPiece dict) lies in its bytes, or None."""
        parts = self._parts
        if parts is None or not parts[1]:
            return None
        _, data, at = parts
        start = _VOCAB.search(data, at)
        if start is None:
            return None
        end = _MERGES.search(data, start.end())
        return start.end(), end.start() if end else len(data)

    def token(self, role: str) -> str | None:
        """`pad_token`, `eos_token`, ...: tokenizer_config.json's, else special_tokens_map.json's."""
        return _content(self.config.get(role)) or _content(self.special_map.get(role))

    @cached_property
    def added(self) -> dict[str, tuple[int, bool]]:
        """Added tokens: content -> (id, special), from tokenizer.json and tokenizer_config.json."""
        out: dict[str, tuple[int, bool]] = {}
        _shaped(self.folder / "tokenizer_config.json", self.config, {"added_tokens_decoder": dict})
        head = self._parts[0] if self._parts is not None else {}
        for entry in head.get("added_tokens") or []:
            if isinstance(entry, dict) and isinstance(entry.get("content"), str) and isinstance(entry.get("id"), int):
                out[entry["content"]] = (entry["id"], bool(entry.get("special")))
        for tid, entry in (self.config.get("added_tokens_decoder") or {}).items():
            if isinstance(entry, dict) and isinstance(entry.get("content"), str) and str(tid).isdigit():
                out.setdefault(entry["content"], (int(tid), bool(entry.get("special"))))
        return out

    @cached_property
    def vocab(self) -> dict[str, int] | None:
        """The model vocabulary of tokenizer.json (BPE/WordPiece dict, Unigram list), or None without one."""
        model = (self.tokenizer_json or {}).get("model") or {}
        vocab = model.get("vocab")
        if isinstance(vocab, dict):
            return vocab
        if isinstance(vocab, list):
            return {entry[0]: i for i, entry in enumerate(vocab) if isinstance(entry, list) and entry}
        return None

    @property
    def readable(self) -> bool:
        """Whether token ids can be read from the files (tokenizer.json, or added tokens in tokenizer_config.json)."""
        return self._vocab_span is not None or bool(self.added) or self.vocab is not None

    def id_of(self, token: str | None) -> int | None:
        if token is None:
            return None
        if token in self.added:
            return self.added[token][0]
        span = self._vocab_span
        if span is not None and self._parts is not None:  # `"token": id` in the vocabulary's bytes, as written
            key = re.escape(json.dumps(token, ensure_ascii=False).encode("utf-8"))
            found = re.compile(key + rb"\s*:\s*(\d+)\s*[,}]").search(self._parts[1], *span)
            if found:
                return int(found.group(1))
        return (self.vocab or {}).get(token)

    def name_of(self, token_id: int) -> str | None:
        for name, (tid, _) in self.added.items():
            if tid == token_id:
                return name
        span = self._vocab_span
        if span is not None and self._parts is not None:
            number = str(int(token_id)).encode()
            found = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*' + number + rb"\s*[,}]").search(self._parts[1], *span)
            if found:
                return json.loads(b'"' + found.group(1) + b'"')
        return next((name for name, tid in (self.vocab or {}).items() if tid == token_id), None)

    @cached_property
    def specials(self) -> dict[str, int]:
        """Special tokens and their ids: the added tokens marked special, and the named roles'."""
        out = {name: tid for name, (tid, special) in self.added.items() if special}
        for role in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
            name = self.token(role)
            if name is not None and (found := self.id_of(name)) is not None:
                out.setdefault(name, found)
        return out

    @cached_property
    def chat_template(self) -> tuple[str | None, str | None]:
        """(the default chat template, the file it is in): chat_template.jinja, chat_template.json or
        tokenizer_config.json's `chat_template` (a string, or a list of named templates: `default`)."""
        jinja = self.folder / "chat_template.jinja"
        if os.path.lexists(jinja):
            return read_text(jinja, self.confine, "chat template"), str(jinja)
        for name, source in (("chat_template.json", self._json("chat_template.json") or {}),
                             ("tokenizer_config.json", self.config)):
            value = _default_template(self.folder / name, source.get("chat_template"))
            if value is not None:
                return value, str(self.folder / name)
        return None, None


_VOCAB = re.compile(rb'"vocab"\s*:\s*\{')
_MERGES = re.compile(rb'"merges"\s*:')
_SPACE = b" \t\r\n"


def _split_model(data: bytes) -> tuple[dict, int] | None:
    """(the top-level keys before `model`, parsed; where `model`'s object starts in `data`), where tokenizer.json is
    laid out as the tokenizers library writes it (an object whose last key is `model`, an object, to the file's end);
    None otherwise, or where the part before `model` is not valid JSON (the whole file's parse then names the fault).
    Only the part before `model` is decoded."""
    end = len(data.rstrip(_SPACE))
    if data[end - 1:end] != b"}":
        return None
    at = data.find(b'"model"')
    while at >= 0:  # the first `"model"` that is the top-level key (a token's text may hold the word)
        try:
            head = _split_head(data[:at].decode("utf-8") + '"model":')
        except UnicodeDecodeError:
            return None
        if head is not None:
            start = data.find(b":", at + 7) + 1
            while start < len(data) and data[start] in _SPACE:
                start += 1
            return (head, start) if data.startswith(b"{", start) else None
        at = data.find(b'"model"', at + 1)
    return None


def _split_head(text: str) -> dict | None:
    """The keys of a JSON object's text that ends at its `"model":` key, or None where it does not parse so."""
    decoder = json.JSONDecoder()
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return None
    head: dict[str, Any]
    pos, head = _skip(text, pos + 1), {}
    try:
        while text.startswith('"', pos):
            key, pos = decoder.raw_decode(text, pos)
            pos = _skip(text, pos)
            if not text.startswith(":", pos):
                return None
            pos = _skip(text, pos + 1)
            if key == "model":
                return head if pos == len(text) else None
            head[key], pos = decoder.raw_decode(text, pos)
            pos = _skip(text, pos)
            if text.startswith(",", pos):
                pos = _skip(text, pos + 1)
            elif not text.startswith('"', pos):
                return None
    except (ValueError, RecursionError):
        return None
    return None


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _default_template(path: Path, value: Any) -> str | None:
    """`chat_template` as a file holds it: a string, or a list of {"name", "template"} (the one named `default`)."""
    if isinstance(value, list):
        for entry in value:
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                    and isinstance(entry.get("template"), str)):
                raise InputError(f"{path}: `chat_template`: each named template is an object with a string `name` "
                                 f"and a string `template`, not {_shown(entry)}")
        value = next((t["template"] for t in value if t["name"] == "default"), None)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{path}: `chat_template` must be a string or a list of named templates, not "
                         f"{type(value).__name__}")
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def _shaped(path: Path, value: dict, kinds: dict[str, type]) -> None:
    """InputError when a key of `value` holds another kind of JSON value than `kinds` says (null is absence)."""
    for key, kind in kinds.items():
        found = value.get(key)
        if found is not None and not isinstance(found, kind):
            names: dict[type, str] = {dict: "an object", list: "a list"}
            words = names[kind]
            raise InputError(f"{path}: `{key}` must be {words}, not {type(found).__name__}")


@dataclass
class Dataset:
    """The first rows of a local dataset file, or why they were not read."""

    path: Path | None
    rows: list[dict] = field(default_factory=list)
    columns: list[str] | None = None
    unread: str | None = None  # why no columns were read ("needs the full check", pyarrow not installed, ...)


def read_dataset(cfg, confine: Confinement | None = None) -> Dataset:
    """The columns and first rows of the config's dataset, where a file read cheaply gives them."""
    path = cfg.dataset_file
    if path is not None and confine is not None:
        confine.check(cfg.base_dir / Path(str(cfg.raw.get("dataset_path"))).expanduser())
    if path is None:
        what = "a dataset folder or hub dataset" if cfg.raw.get("dataset_name") is not None else "no dataset named"
        return Dataset(None, unread=f"{what}: loading it needs the full check" if cfg.raw.get("dataset_name") else what)
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl" or (suffix == ".json" and _first_char(path) == "{" and _jsonl(path)):
            rows = _jsonl_head(path)
        elif suffix == ".json":
            if path.stat().st_size > MAX_JSON_BYTES:
                return Dataset(path, unread=f"{path.name} is a large JSON array: reading it needs the full check")
            value = read_json_file(path, "dataset", limit=MAX_JSON_BYTES, max_values=MAX_JSON_VALUES, why=UNDER_STATIC)
            rows = value[:HEAD_ROWS] if isinstance(value, list) else _columnar(value)
        elif suffix == ".csv":
            import csv

            with path.open(newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                rows = [row for _, row in zip(range(HEAD_ROWS), reader)]
                if not rows:
                    return Dataset(path, [], list(reader.fieldnames or []))
        elif suffix == ".parquet":
            return _parquet(path)
        else:
            return Dataset(path, unread=f"{path.name}: a {suffix} file needs the full check")
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a dataset") from None
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        raise InputError(f"{path}: cannot be read as a dataset ({type(exc).__name__}: {str(exc)[:200]})") from None
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return Dataset(path, unread=f"{path.name} has no rows")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return Dataset(path, rows, columns)


def _first_char(path: Path) -> str:
    with path.open(encoding="utf-8") as f:
        return f.read(4096).lstrip()[:1]


def _jsonl(path: Path) -> bool:
    """A .json file holding one object per line (datasets reads it as JSON Lines)."""
    with path.open(encoding="utf-8") as f:
        first = _line(f, path)
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def _jsonl_head(path: Path) -> list:
    rows = []
    with path.open(encoding="utf-8") as f:
        while line := _line(f, path):
            if line.strip():
                rows.append(json.loads(line))
                if len(rows) == HEAD_ROWS:
                    break
    return rows


MAX_LINE = 8 * 1024 * 1024  # characters of one JSON line read (the full check parses the first 8 MiB of lines)


def _line(f, path: Path) -> str:
    line = f.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise InputError(f"{path}: a line longer than {MAX_LINE // 2**20} MiB{UNDER_STATIC}: the full check reads it")
    return line


def _columnar(value: Any) -> list:
    """{"column": [values]} (or {"data": [rows]}) as rows."""
    if isinstance(value, dict) and isinstance(value.get("data"), list):
        return value["data"][:HEAD_ROWS]
    if isinstance(value, dict) and value and all(isinstance(v, list) for v in value.values()):
        n = min(HEAD_ROWS, *(len(v) for v in value.values()))
        return [{k: v[i] for k, v in value.items()} for i in range(n)]
    return []


def _parquet(path: Path) -> Dataset:
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        return Dataset(path, unread=f"{path.name} is parquet and pyarrow is not installed here: the full check reads it")
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    columns = list(f.schema_arrow.names)
    rows = f.read_row_group(0).slice(0, HEAD_ROWS).to_pylist() if f.num_row_groups else []
    return Dataset(path, rows, columns)
