"""Helpers for TD002 vllm-tokenizer-drift: what the installed TRL sends to vLLM (read from its source text)
and the tokenizer vLLM itself would load.

The source readers take plain text so that they can be tested on snippets of old TRL releases; the
`installed_*` functions feed them the files of the installed release (read, never imported).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from trl_doctor.facts.inputs.text import line_of as _line_of, line_text as _first_line
from trl_doctor.wording import one_line

# Where TRL has kept its vLLM code, newest first (paths inside the `trl` package).
GENERATION_MODULES = ("generation/vllm_generation.py",)
CLIENT_MODULES = ("generation/vllm_client.py", "extras/vllm_client.py")
SERVER_MODULES = ("scripts/vllm_serve.py",)

_DEF_RE = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+\w+", re.M)


@dataclass(frozen=True)
class Site:
    """One place in a source file, with what was found there."""

    where: str  # "trl/…/file.py:123"
    code: str  # the first line of the statement, stripped
    forwards: bool  # whether the config's generation_kwargs reaches this call
    how: str = ""  # the line that makes it forward (or why not)

    def show(self) -> str:
        text = f"{self.where}: `{self.code}`"
        return f"{text} ({self.how})" if self.how else text


@dataclass
class Forwarding:
    """Whether `generation_kwargs` from the config reaches vLLM's SamplingParams in one vLLM mode."""

    forwards: bool | None  # None: no vLLM code found for this mode
    evidence: list[str] = field(default_factory=list)


@dataclass
class TrlVllmPath:
    """What the installed TRL does with vLLM for one trainer, read from its source."""

    files: list[str]
    colocate: Forwarding
    server: Forwarding
    prompts: set[str]  # {"ids"} (TRL tokenizes), {"text"} (vLLM tokenizes), "messages" (vLLM renders the chat template too)
    prompt_evidence: list[str]
    llm_model_arg: str | None  # the `model=` argument of the colocated LLM(...) call
    llm_tokenizer_arg: str | None  # its `tokenizer=` argument, when TRL passes one


# -- plain-text readers ---------------------------------------------------------------------------------





def _call_args(text: str, open_paren: int) -> str:
    """The text between a call's parentheses (balanced; strings are not special-cased, which TRL's calls do not need)."""
    depth = 0
    for i in range(open_paren, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[open_paren + 1 : i]
    return text[open_paren + 1 :]


def _indent(text: str, pos: int) -> int:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", start)  # (not `"\n" in text[start:]`: a copy of the rest of a trainer's source per def)
    line = text[start : end if end >= 0 else len(text)]
    return len(line) - len(line.lstrip(" \t"))


def _block(text: str, pos: int) -> tuple[int, str]:
    """The function around `pos`: from the `def` that encloses it (the def on its own line, or the nearest one
    indented less) to the next `def` indented no deeper than that one; the whole text when there is none.
    Nested helper functions therefore stay inside their enclosing function's block."""
    defs = [(m.start(), _indent(text, m.start())) for m in _DEF_RE.finditer(text)]
    line_start = text.rfind("\n", 0, pos) + 1
    own = [d for d in defs if d[0] == line_start]
    if own:
        begin, depth = own[0]
    else:
        level = _indent(text, pos)
        enclosing = [d for d in defs if d[0] < pos and d[1] < level]
        if not enclosing:
            begin, depth = 0, -1
        else:
            begin, depth = enclosing[-1]
    end = next((d[0] for d in defs if d[0] > begin and d[1] <= depth), len(text))
    return begin, text[begin:end]


def _in_comment_or_doc(text: str, pos: int) -> bool:
    line = _first_line(text, pos)
    return line.startswith(("#", ">>>", "..."))


def _dict_update_with_kwargs(block: str, name: str) -> re.Match | None:
    return re.search(rf"\b{re.escape(name)}\.update\(\s*([^)]*generation_kwargs[^)]*)\)", block)


def sampling_params_sites(text: str, rel: str) -> list[Site]:
    """Every `SamplingParams(...)` construction in `text`, and whether `generation_kwargs` reaches it.

    It does when the call's own arguments name `generation_kwargs`, or when it unpacks a dict (`**kwargs`)
    that the same function updates with something named `generation_kwargs` (`kwargs.update(self.args.
    generation_kwargs)` in TRL 0.19-0.29, `generation_kwargs.update(self.generation_kwargs)` in 1.x,
    `generation_kwargs.update(request.generation_kwargs)` in the 0.19-0.29 server).
    """
    sites = []
    for m, args, where, code in _calls(text, r"\bSamplingParams\(", rel):
        if re.search(r"\bgeneration_kwargs\b", args) and not re.fullmatch(r"\s*\*\*\s*\w+\s*", args):
            sites.append(Site(where, code, True, "passes generation_kwargs"))
            continue
        unpacked = re.fullmatch(r"\s*\*\*\s*(\w+)\s*,?\s*", args)
        if unpacked:
            name = unpacked.group(1)
            begin, block = _block(text, m.start())
            hit = _dict_update_with_kwargs(block[: m.start() - begin], name)
            if hit:
                line = _line_of(text, begin + hit.start())
                sites.append(Site(where, code, True, f"after line {line}: `{_first_line(text, begin + hit.start())}`"))
                continue
            sites.append(Site(where, code, False, f"`{name}` is never updated with generation_kwargs"))
            continue
        sites.append(Site(where, code, False, "fixed arguments, no generation_kwargs"))
    return sites


def _calls(text: str, pattern: str, rel: str):
    """(match, its arguments' text, `rel:line`, its first line) of each call `pattern` finds (ending at the call's
    open parenthesis) outside comments and docstrings."""
    for m in re.finditer(pattern, text):
        if not _in_comment_or_doc(text, m.start()):
            yield m, _call_args(text, m.end() - 1), f"{rel}:{_line_of(text, m.start())}", _first_line(text, m.start())


def client_call_sites(text: str, rel: str) -> list[Site]:
    """Every call of the vLLM server client (`vllm_client.generate(...)` / `.chat(...)`), and whether it passes
    `generation_kwargs` (directly, or inside a dict it unpacks with `**`)."""
    sites = []
    for m, args, where, code in _calls(text, r"\bvllm_client\.(generate|chat)\(", rel):
        if re.search(r"\bgeneration_kwargs\s*=", args):
            sites.append(Site(where, code, True, "passes generation_kwargs="))
            continue
        forwarded = False
        for name in re.findall(r"\*\*\s*(\w+)", args):
            begin, block = _block(text, m.start())
            key = re.search(rf"[\"']generation_kwargs[\"']\s*:|\b{re.escape(name)}\[[\"']generation_kwargs[\"']\]\s*=", block)
            if key:
                line = _line_of(text, begin + key.start())
                sites.append(Site(where, code, True, f"`{name}` carries it (line {line}: `{_first_line(text, begin + key.start())}`)"))
                forwarded = True
                break
        if not forwarded:
            sites.append(Site(where, code, False, "fixed arguments, no generation_kwargs"))
    return sites


def client_sends_kwargs(text: str, rel: str) -> Site | None:
    """Whether the client's `generate` puts `generation_kwargs` into the request it posts to the server."""
    m = re.search(r"^[ \t]*def generate\(", text, re.M)
    if m is None:  # an excerpt of the function's body
        if "json=" not in text and "payload" not in text:
            return None
        begin, block, where, code = 0, text, f"{rel}:1", "generate() request"
    else:
        begin, block = _block(text, m.start())
        where, code = f"{rel}:{_line_of(text, m.start())}", "def generate("
    hit = re.search(r"[\"']generation_kwargs[\"']\s*:\s*generation_kwargs|\.update\(\s*generation_kwargs\b", block)
    if hit:
        line = _line_of(text, begin + hit.start())
        return Site(where, code, True, f"line {line}: `{_first_line(text, begin + hit.start())}`")
    return Site(where, code, False, "the request carries no generation_kwargs")


def server_forwarding(text: str, rel: str) -> Forwarding:
    """What `trl vllm-serve` does with the request's generation settings."""
    sites = sampling_params_sites(text, rel)
    if sites:
        return Forwarding(any(s.forwards for s in sites), [s.show() for s in sites])
    m = re.search(r"[\"']serve[\"']", text)
    if m and "vllm.entrypoints" in text:
        return Forwarding(True, [f"{rel}:{_line_of(text, m.start())}: runs vLLM's own `vllm serve`; its OpenAI API takes "
                                 "stop, stop_token_ids, include_stop_str_in_output and skip_special_tokens per request"])
    return Forwarding(None, [f"{rel}: no SamplingParams and no `vllm serve` found"])


def prompt_paths(text: str, rel: str) -> tuple[set[str], list[str]]:
    """How prompts reach vLLM: "ids" (tokenized by the trainer), "text" (vLLM tokenizes them) or "messages"
    (vLLM renders the chat template and tokenizes)."""
    found: set[str] = set()
    evidence = []
    m: re.Match[str] | None
    for pattern, kind in (
        (r"[\"']prompt_token_ids[\"']\s*:", "ids"),
        (r"\bvllm_client\.generate\(\s*prompts\s*=\s*\w*prompt_ids\b", "ids"),
        (r"\b(?:llm|vllm_client)\.chat\(", "messages"),
    ):
        for m in re.finditer(pattern, text):
            if _in_comment_or_doc(text, m.start()):
                continue
            found.add(kind)
            evidence.append(f"{rel}:{_line_of(text, m.start())}: `{_first_line(text, m.start())}` ({kind})")
            break
    if "ids" not in found:
        for pattern in (r"\bllm\.generate\(", r"\bvllm_client\.generate\("):
            m = re.search(pattern, text)
            if m and not _in_comment_or_doc(text, m.start()):
                found.add("text")
                evidence.append(f"{rel}:{_line_of(text, m.start())}: `{_first_line(text, m.start())}` (text)")
                break
    return found, evidence


def llm_init_args(text: str) -> tuple[str | None, str | None, str | None]:
    """(model=, tokenizer=, where) of the colocated `LLM(...)` construction, or Nones."""
    m = next((m for m in re.finditer(r"\bLLM\(", text) if not _in_comment_or_doc(text, m.start())), None)
    if m is None:
        return None, None, None
    args = _call_args(text, m.end() - 1)
    model = re.search(r"\bmodel\s*=\s*([^,\n]+)", args)
    tok = re.search(r"\btokenizer\s*=\s*([^,\n]+)", args)
    return (model.group(1).strip() if model else None, tok.group(1).strip() if tok else None, str(_line_of(text, m.start())))


# -- the installed release ------------------------------------------------------------------------------

def _read(root: Path, rels) -> tuple[str, str] | None:
    for rel in rels:
        path = root / rel
        if path.is_file():
            return f"trl/{rel}", path.read_text(encoding="utf-8")
    return None


def read_trl_vllm_path(root: Path, trainer_rel: str, trainer_text: str) -> TrlVllmPath:
    """Assemble what a TRL tree at `root` does with vLLM for the trainer whose source is `trainer_text`."""
    files = [trainer_rel]
    gen_texts = [(trainer_rel, trainer_text)]
    if re.search(r"from\s+\.\.generation\.vllm_generation\s+import|from\s+trl\.generation\.vllm_generation\s+import", trainer_text):
        found = _read(root, GENERATION_MODULES)
        if found:
            gen_texts.append(found)
            files.append(found[0])

    colocate_sites: list[Site] = []
    server_calls: list[Site] = []
    prompts: set[str] = set()
    prompt_evidence: list[str] = []
    llm_model = llm_tok = None
    for rel, text in gen_texts:
        colocate_sites += sampling_params_sites(text, rel)
        server_calls += client_call_sites(text, rel)
        kinds, ev = prompt_paths(text, rel)
        prompts |= kinds
        prompt_evidence += ev
        model_arg, tok_arg, line = llm_init_args(text)
        if model_arg is not None:
            llm_model, llm_tok = model_arg, tok_arg
            prompt_evidence.append(f"{rel}:{line}: LLM(model={model_arg}" + (f", tokenizer={tok_arg}" if tok_arg else "") + ", ...)")

    colocate = (
        Forwarding(any(s.forwards for s in colocate_sites), [s.show() for s in colocate_sites])
        if colocate_sites else Forwarding(None, ["no SamplingParams construction in " + ", ".join(r for r, _ in gen_texts)])
    )
    if server_calls:
        evidence = [s.show() for s in server_calls]
        ok = any(s.forwards for s in server_calls)
        client = _read(root, CLIENT_MODULES)
        if ok and client is not None:
            files.append(client[0])
            sent = client_sends_kwargs(client[1], client[0])
            if sent is not None:
                evidence.append(sent.show())
                ok = ok and sent.forwards
        server = _read(root, SERVER_MODULES)
        if ok and server is not None:
            files.append(server[0])
            fwd = server_forwarding(server[1], server[0])
            evidence += fwd.evidence
            ok = ok and fwd.forwards is not False
        server_fwd = Forwarding(ok, evidence)
    else:
        server_fwd = Forwarding(None, ["no vllm_client call in " + ", ".join(r for r, _ in gen_texts)])
    return TrlVllmPath(files, colocate, server_fwd, prompts, prompt_evidence, llm_model, llm_tok)


def installed_trl_vllm_path(trainer: str) -> TrlVllmPath | None:
    from trl_doctor.facts.trl.installed import trainer_source, trl_root

    root = trl_root()
    found = trainer_source(trainer)
    if root is None or found is None:
        return None
    return read_trl_vllm_path(root, *found)


# -- the tokenizer vLLM loads ---------------------------------------------------------------------------

@dataclass
class VllmTokenizer:
    tokenizer: object | None
    loader: str  # which loader was used, with its version, for the details
    error: str | None = None  # the loader's own error: vLLM would fail the same way at start-up


def load_as_vllm(path: Path, trust_remote_code: bool) -> VllmTokenizer:
    """Load the tokenizer of `path` as vLLM's engine does for `LLM(model=path)` / `vllm serve path`.

    With vllm installed: its own loader, called with what `cached_tokenizer_from_config(model_config)` passes
    for that model config (tokenizer = the model path, runner_type "generate", tokenizer_mode "auto",
    revision None, trust_remote_code). Building vLLM's ModelConfig itself needs a GPU platform, so the
    arguments are spelled out. Without vllm: the same resolution with transformers (vLLM's "hf" mode is
    `AutoTokenizer.from_pretrained(path, trust_remote_code=..., revision=None, truncation_side="left")`).
    """
    import contextlib
    import importlib.util
    import sys

    note = ""
    if importlib.util.find_spec("vllm") is not None:
        from trl_doctor.context.env import package_version

        version = package_version("vllm") or "?"
        get = None
        # vLLM logs to stdout by default: keep it off the report (json on stdout must stay parseable).
        with contextlib.redirect_stdout(sys.stderr):
            try:
                from vllm.tokenizers import get_tokenizer as get  # type: ignore[no-redef]  # its home in vLLM >= 0.11

                name, new_api = f"vllm.tokenizers.get_tokenizer (vllm {version})", True
            except Exception:
                try:
                    from vllm.transformers_utils.tokenizer import get_tokenizer as get  # type: ignore[no-redef]  # its home in older vLLM

                    name, new_api = f"vllm.transformers_utils.tokenizer.get_tokenizer (vllm {version})", False
                except Exception as exc:
                    note = f"; vllm {version} is installed but its tokenizer loader does not import ({type(exc).__name__}: {one_line(exc)})"
            if get is not None:
                kwargs = {"tokenizer_mode": "auto", "revision": None, "trust_remote_code": trust_remote_code}
                if new_api:
                    kwargs["runner_type"] = "generate"
                try:
                    return VllmTokenizer(get(str(path), **kwargs), name)
                except Exception as exc:
                    return VllmTokenizer(None, name, f"{type(exc).__name__}: {one_line(exc)}")
    from transformers import AutoTokenizer

    name = "transformers AutoTokenizer.from_pretrained (vllm not installed: the resolution vLLM's 'hf' tokenizer mode uses)"
    if note:
        name = "transformers AutoTokenizer.from_pretrained" + note
    try:
        tok = AutoTokenizer.from_pretrained(
            str(path), trust_remote_code=trust_remote_code, revision=None, truncation_side="left", local_files_only=True
        )
        return VllmTokenizer(tok, name)
    except Exception as exc:
        return VllmTokenizer(None, name, f"{type(exc).__name__}: {one_line(exc)}")



# -- the trainer's config class, read from its source --------------------------------------------------

CONFIG_MODULES = {"grpo": ("trainer/grpo_config.py",), "rloo": ("trainer/rloo_config.py",)}


def config_field(text: str, rel: str, name: str) -> tuple[bool, object, str | None]:
    """(whether the config dataclass declares `name`, its literal default or None, "file:line") from source."""
    m = re.search(rf"^[ \t]+{re.escape(name)}\s*:[^=\n]*=\s*(.*)$", text, re.M)
    if m is None:
        return False, None, None
    where = f"{rel}:{_line_of(text, m.start())}"
    rest = text[m.start(1):]
    literal = re.match(r"field\(\s*default\s*=\s*([^,\n)]+)", rest) or re.match(r"([^,\n)#]+)", rest)
    default = None
    if literal:
        import ast

        try:
            default = ast.literal_eval(literal.group(1).strip())
        except (ValueError, SyntaxError):
            default = None
    return True, default, where


def installed_config_field(trainer: str, name: str) -> tuple[bool | None, object, str | None]:
    from trl_doctor.facts.trl.installed import trl_root

    root = trl_root()
    found = _read(root, CONFIG_MODULES.get(trainer, ())) if root is not None else None
    if found is None:
        return None, None, None
    return config_field(found[1], found[0], name)
