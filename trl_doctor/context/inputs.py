"""Cheap checks of the files a check reads, before any library parses them: a broken input is one line naming the
file and what is wrong with it (InputError, exit status 2), never a library's own message about something else
(transformers reports a bad config.json as "cannot load the tokenizer") and never a crash in a rule.

Only the standard library is used here."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from trl_doctor.errors import InputError

MAX_JSON_BYTES = 256 * 2**20  # a config or tokenizer file past this is not one (a real tokenizer.json is a few MB)

# a model config's sizes: each must be a positive integer; the bound is far past any released model
_SIZES = {
    "vocab_size": 10_000_000,
    "hidden_size": 1_000_000,
    "intermediate_size": 10_000_000,
    "num_hidden_layers": 10_000,
    "num_attention_heads": 100_000,
    "num_key_value_heads": 100_000,
    "max_position_embeddings": 100_000_000,
    "head_dim": 100_000,
    "n_embd": 1_000_000,
    "n_layer": 10_000,
    "n_head": 100_000,
    "n_positions": 100_000_000,
}
# the files a tokenizer's vocabulary can live in (any one is enough)
VOCAB_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model", "spiece.model",
               "sentencepiece.bpe.model", "vocab.model", "tekken.json")


def utf8_text(data: bytes, shown: str) -> str:
    """`data` as UTF-8 text (a byte-order mark is allowed); InputError naming the byte, its offset and line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{shown}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line})") from None


def not_a_file(path: Path) -> str | None:
    """What `path` is when it exists but is no regular file ('a symbolic link loop', 'a character device', ...), or
    None (a regular file, or nothing there)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "a symbolic link loop (the link leads back to itself)" if exc.errno == errno.ELOOP else None
    for test, words in ((stat.S_ISREG, None), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a regular file"


def read_bounded(path: Path, what: str, limit: int, why: str = "") -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; InputError naming the file otherwise (`why` ends
    the refusal: " under --static")."""
    odd = not_a_file(path)
    if odd:  # a device would be read without end, a loop cannot be read at all
        raise InputError(f"{path}: {odd}, not a {what} file")
    try:
        size = path.stat().st_size
        if size > limit:
            raise InputError(f"{path}: {size / 2**20:.1f} MiB is too large for a {what} file{why} (the limit is "
                             f"{limit // 2**20} MiB)")
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_json_file(path: Path, what: str = "JSON", limit: int = MAX_JSON_BYTES, max_values: int | None = None,
                   why: str = "") -> Any:
    """The JSON value in `path`; InputError naming the file, the line and the problem otherwise. `limit` bytes and
    `max_values` values (counted from the commas and brackets before parsing, an upper bound: Python's objects take
    far more memory than their text) bound what parsing costs; `why` ends the refusal (" under --static")."""
    data = read_bounded(path, what, limit, why)
    if max_values is not None:
        count = data.count(b",") + data.count(b"[") + data.count(b"{")
        if count > max_values:
            raise InputError(f"{path}: about {count:,} JSON values is too many for a {what} file{why} (the limit is "
                             f"{max_values:,})")
    text = utf8_text(data, str(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a {what} file") from None
    except ValueError as exc:  # Python's int-string limit: a number of more than 4300 digits
        raise InputError(f"{path}: {_long_number(text)}{what} file cannot hold: {exc}") from None


def _long_number(text: str) -> str:
    """'a 5000-digit number at line 3, which a ' for the longest run of digits in `text`, or ''."""
    found = max(re.finditer(r"\d+", text), key=lambda m: m.end() - m.start(), default=None)
    if found is None:
        return ""
    return f"a {found.end() - found.start()}-digit number at line {text.count(chr(10), 0, found.start()) + 1}, which a "


def check_model_config(folder: Path) -> dict:
    """config.json of a model folder, read and sanity-checked: a JSON object with a `model_type` and sizes that
    are positive integers of a real model (a negative or 10**12 vocab_size would be allocated by the probes)."""
    path = folder / "config.json"
    odd = not_a_file(path)
    if odd:
        raise InputError(f"{path}: {odd}, not a model config file")
    if not path.is_file():
        if (folder / "adapter_config.json").is_file():
            return {}  # a PEFT adapter: the context says what to do with it
        raise InputError(f"{path}: no such file (a model folder holds config.json)")
    cfg = read_json_file(path, "model config")
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: expected a JSON object of settings, not a {type(cfg).__name__}")
    if not isinstance(cfg.get("model_type"), str) or not cfg["model_type"]:
        raise InputError(f"{path}: has no `model_type` (every transformers model config names its architecture)")
    for section, values in _sections(cfg):
        for key, limit in _SIZES.items():
            value = values.get(key)
            if value is None:
                continue
            where = f"{section}.{key}" if section else key
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
                raise InputError(f"{path}: `{where}` is {value!r}; it must be a positive integer"
                                 + (f" (at most {limit:,})" if isinstance(value, int) and value > limit else ""))
        check_token_ids(path, values, section)
        heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
        if isinstance(heads, int) and isinstance(hidden, int) and values.get("head_dim") is None and hidden % heads:
            raise InputError(f"{path}: `hidden_size` {hidden} is not divisible by `num_attention_heads` {heads}")
    return cfg


TOKEN_ID_KEYS = ("eos_token_id", "bos_token_id", "pad_token_id", "decoder_start_token_id")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "min_p", "max_new_tokens", "max_length")


def check_token_ids(path: Path, values: dict, section: str = "") -> None:
    """Token ids are integers or lists of them, inside any vocabulary: a string or a negative eos id would reach
    the tokenizer's decode and the trainer's stop test. (pad_token_id -1 is how early Llama configs said "none".)"""
    for key in TOKEN_ID_KEYS:
        value = values.get(key)
        if value is None:
            continue
        ids = value if isinstance(value, list) else [value]
        lowest = -1 if key == "pad_token_id" else 0
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not lowest <= i < 2**31:
                where = f"{section}.{key}" if section else key
                raise InputError(f"{path}: `{where}` is {value!r}; a token id is an integer from 0 "
                                 "(or a list of them)")


def check_generation_config(path: Path) -> dict:
    """generation_config.json: a JSON object whose token ids are ids and whose sampling settings are numbers."""
    cfg = read_json_file(path, "generation config")
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: expected a JSON object of settings, not a {type(cfg).__name__}")
    check_token_ids(path, cfg)
    for key in SAMPLING_KEYS:
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                                  or value != value):
            raise InputError(f"{path}: `{key}` is {value!r}; it must be a number of at least 0")
    return cfg


def _sections(cfg: dict):
    yield "", cfg
    for name in ("text_config", "llm_config", "language_config"):
        if isinstance(cfg.get(name), dict):
            yield name, cfg[name]


def check_tokenizer_files(folder: Path, remote_code: bool = False, large: bool = False) -> None:
    """The tokenizer's small JSON files parse (and tokenizer.json, megabytes, with `large`: after a failed load, to
    name the file at fault), and some vocabulary file is there (transformers would otherwise build an empty
    tokenizer of three special tokens and every rule would judge it)."""
    for name in VOCAB_FILES + ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"):
        odd = not_a_file(folder / name)
        if odd:  # transformers would read a device without end, or call a loop a missing file
            raise InputError(f"{folder / name}: {odd}, not a tokenizer file")
    for name in ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json") + (("tokenizer.json",) if large else ()):
        path = folder / name
        if path.is_file():
            value = read_json_file(path, "tokenizer")
            if not isinstance(value, dict):
                raise InputError(f"{path}: expected a JSON object, not a {type(value).__name__}")
    if remote_code or any((folder / name).is_file() for name in VOCAB_FILES) or any(folder.glob("*.tiktoken")):
        return
    raise InputError(f"{folder}: no tokenizer vocabulary (none of {', '.join(VOCAB_FILES[:4])}, ...): the tokenizer "
                     "cannot be loaded as trained")


PARSED_BYTES = 8 * 2**20  # JSON lines parsed here: the first 8 MiB (the dataset library parses the whole file)
CHUNK = 16 * 2**20


def check_dataset_file(path: Path) -> None:
    """A parquet file's magic bytes; a .json / .jsonl dataset file: UTF-8 throughout (checked in large chunks), not
    empty, and JSON (one object per line, or one JSON document) in its first 8 MiB; the first problem is named
    with its line (and byte offset for an encoding error). A 100 MB file costs a fraction of a second."""
    if path.suffix.lower() == ".parquet":
        return _check_parquet(path)
    if path.suffix.lower() not in (".json", ".jsonl"):
        return
    first = _check_utf8(path)
    if first is None:
        raise InputError(f"{path}: is empty (no rows)")
    if path.suffix.lower() == ".json" and first == ord("["):
        if path.stat().st_size <= PARSED_BYTES:
            read_json_file(path, "dataset")  # one JSON array of rows
        return
    _check_json_lines(path)


def _check_utf8(path: Path) -> int | None:
    """The first byte that is not white space (None for a blank file); InputError at the first byte that is not
    UTF-8, with its offset and line."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines, first = 0, 0, None
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                bad = min(max(exc.start, 0), len(chunk) - 1)  # at a chunk boundary, within 3 bytes of it
                at = offset + bad
                line = lines + chunk[:bad].count(b"\n") + 1
                raise InputError(f"{path}: not UTF-8 text: byte 0x{chunk[bad]:02x} at offset {at} (line {line})") from None
            if not chunk:
                return first
            if first is None:
                stripped = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")
                first = stripped[0] if stripped else None
            lines += chunk.count(b"\n")
            offset += len(chunk)


def _check_json_lines(path: Path) -> None:
    parsed = 0
    with open(path, encoding="utf-8-sig") as fh:
        for number, line in enumerate(fh, 1):
            parsed += len(line)
            if parsed > PARSED_BYTES:
                return
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                if number == 1 and path.suffix.lower() == ".json":
                    read_json_file(path, "dataset")  # one JSON document over several lines
                    return
                raise InputError(f"{path}: line {number}: invalid JSON at column {exc.colno}: {exc.msg}") from None
            except RecursionError:
                raise InputError(f"{path}: line {number}: nested too deeply") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}: line {number}: a row must be a JSON object, not a {type(row).__name__}")


def _check_parquet(path: Path) -> None:
    """A parquet file starts and ends with the magic bytes PAR1 (anything else is not one, or was cut short)."""
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{path}: is empty (no rows)")
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(max(size - 4, 0))
        tail = fh.read(4)
    if head != b"PAR1":
        raise InputError(f"{path}: not a parquet file (it does not start with the PAR1 magic bytes)")
    if tail != b"PAR1" or size < 12:
        raise InputError(f"{path}: truncated parquet file (it does not end with the PAR1 footer)")
