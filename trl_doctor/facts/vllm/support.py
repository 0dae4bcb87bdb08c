"""What the weights of a vLLM job go through: how the model is quantized, what the installed TRL's weight sync
into vLLM does (read from its source text), and which architectures the installed vLLM implements.

The source reader takes plain text so that it can be tested on snippets of old TRL releases;
`installed_sync` feeds it the files of the installed release (read, never imported). The architecture list
comes from vLLM's model registry module, which imports without a GPU and without starting an engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trl_doctor.facts.inputs.text import line_of as _line_of, line_text as _line_text, read_json as _read_json
from trl_doctor.facts.vllm.handover import GENERATION_MODULES, _block, _in_comment_or_doc, _read

# -- how the policy is quantized ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantization:
    kind: str | None  # "4bit", "8bit" (bitsandbytes), None: not quantized
    source: str  # the key or file that says so, in words


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "yes"))


def _bnb_kind(block: Any) -> str | None:
    """"4bit" / "8bit" for a BitsAndBytesConfig written as a mapping (its own keys, or the private `_load_in_*`
    names a saved config.json uses), else None."""
    if not isinstance(block, dict):
        return None
    method = str(block.get("quant_method", "bitsandbytes")).lower()
    if method != "bitsandbytes":
        return None
    if _truthy(block.get("load_in_4bit")) or _truthy(block.get("_load_in_4bit")):
        return "4bit"
    if _truthy(block.get("load_in_8bit")) or _truthy(block.get("_load_in_8bit")):
        return "8bit"
    return None


def quantization(raw: dict, model_init_kwargs: Any, model_path: Path | None) -> Quantization:
    """The bitsandbytes quantization the policy loads with: TRL's ModelConfig keys (`load_in_4bit`,
    `load_in_8bit`, which the `trl` scripts turn into a BitsAndBytesConfig), `model_init_kwargs` (its
    `load_in_*` keys or a `quantization_config` mapping), or a checkpoint saved quantized (config.json's
    `quantization_config`)."""
    kind: str | None
    for key, kind in (("load_in_4bit", "4bit"), ("load_in_8bit", "8bit")):
        if _truthy(raw.get(key)):
            return Quantization(kind, f"`{key}: true`")
    if isinstance(model_init_kwargs, dict):
        for key, kind in (("load_in_4bit", "4bit"), ("load_in_8bit", "8bit")):
            if _truthy(model_init_kwargs.get(key)):
                return Quantization(kind, f"`model_init_kwargs.{key}: true`")
        kind = _bnb_kind(model_init_kwargs.get("quantization_config"))
        if kind:
            return Quantization(kind, f"`model_init_kwargs.quantization_config` (bitsandbytes {kind[0]}-bit)")
    if model_path is not None:
        cfg = _read_json(model_path / "config.json")
        kind = _bnb_kind(cfg.get("quantization_config")) if isinstance(cfg, dict) else None
        if kind:
            return Quantization(kind, f"the checkpoint's config.json `quantization_config` (saved bitsandbytes {kind[0]}-bit)")
    return Quantization(None, "no load_in_4bit / load_in_8bit / bitsandbytes quantization_config")


# -- the weight sync into vLLM, read from TRL's source ----------------------------------------------------------

_PUSH_RE = re.compile(r"\.load_weights\(|\.update_named_params?\(")


@dataclass(frozen=True)
class SyncReading:
    """What the installed TRL does when it pushes the policy's weights into vLLM. Each field is the evidence
    ("trl/…/file.py:123: `code`") of one behaviour, or None when the code does not do it."""

    files: tuple[str, ...]
    push: str | None  # where the weights are handed to vLLM (load_weights / update_named_param[s])
    merges_peft: str | None  # merge_adapter() before the push
    strips_base_layer: str | None  # `base_model.model.` / `.base_layer` removed from the names
    drops_adapter: str | None  # LoRA's own tensors (the adapter prefix) left out
    strips_modules_to_save: str | None  # `modules_to_save.default.` removed from the names
    drops_original_module: str | None  # the frozen `original_module` copy left out
    quantizes_4bit_engine: str | None  # a bitsandbytes Linear4bit policy starts vLLM with quantization="bitsandbytes"
    refuses_8bit: str | None  # a Linear8bitLt policy stops at vLLM's start ("in-flight 8-bit")
    ds3_gather_flag: str | None  # the push gathers ZeRO-3 params only when ds3_gather_for_generation is on


def _evidence(texts: list[tuple[str, str]], pattern: str) -> str | None:
    for rel, text in texts:
        for m in re.finditer(pattern, text):
            if _in_comment_or_doc(text, m.start()):
                continue
            return f"{rel}:{_line_of(text, m.start())}: `{_line_text(text, m.start())}`"
    return None


def read_sync(texts: list[tuple[str, str]]) -> SyncReading:
    """Read the weight sync from the source texts of a trainer and of the vLLM module it imports."""
    push = _evidence(texts, _PUSH_RE.pattern)
    flag = None
    for rel, text in texts:
        for m in _PUSH_RE.finditer(text):
            if _in_comment_or_doc(text, m.start()):
                continue
            begin, block = _block(text, m.start())
            hit = re.search(r"gather_deepspeed3_params\s*=\s*self\.args\.ds3_gather_for_generation", block)
            if hit and flag is None:
                flag = f"{rel}:{_line_of(text, begin + hit.start())}: `{_line_text(text, begin + hit.start())}`"
    return SyncReading(
        files=tuple(rel for rel, _ in texts),
        push=push,
        merges_peft=_evidence(texts, r"\.merge_adapter\(\)"),
        strips_base_layer=_evidence(texts, r"""\.replace\(\s*["']\.base_layer["']"""),
        drops_adapter=_evidence(texts, r"\.prefix\s+(?:not\s+)?in\s+\w+"),
        strips_modules_to_save=_evidence(texts, r"""["']modules_to_save\.default\.["']"""),
        drops_original_module=_evidence(texts, r"""["']original_module["']\s+(?:not\s+)?in\b"""),
        quantizes_4bit_engine=(_evidence(texts, r"""quantization\s*=\s*["']bitsandbytes["']""")
                               if _evidence(texts, r"\bLinear4bit\b") else None),
        refuses_8bit=_evidence(texts, r"in-flight 8-bit quantization"),
        ds3_gather_flag=flag,
    )


def installed_sync(trainer: str) -> SyncReading | None:
    """The weight sync of the installed TRL's trainer (and the vLLM generation module it imports), or None."""
    from trl_doctor.facts.trl.installed import trainer_source, trl_root

    root = trl_root()
    found = trainer_source(trainer)
    if root is None or found is None:
        return None
    texts = [found]
    if re.search(r"from\s+(?:\.\.|trl\.)generation\.vllm_generation\s+import", found[1]):
        gen = _read(root, GENERATION_MODULES)
        if gen:
            texts.append(gen)
    return read_sync(texts)


# -- the architectures the installed vLLM implements ------------------------------------------------------------

REGISTRY_MODULE = "model_executor/models/registry.py"  # inside the vllm package, since vLLM 0.5


@dataclass(frozen=True)
class VllmArchitectures:
    archs: frozenset[str] | None  # None: not known here (why says so)
    why: str  # where the list comes from, or why there is none
    version: str | None = None

    def transformers_backend(self, model_path: Path, arch: str) -> bool | str | None:
        """Whether vLLM's Transformers backend (its fallback for an architecture it does not implement, with the
        default model_impl "auto") can run `arch`: True; a reason why not (str); None when the class cannot be
        judged here (remote code, an architecture this transformers does not have)."""
        return _transformers_backend(model_path, arch)


def registry_architectures(text: str) -> frozenset[str]:
    """The architecture names of vLLM's registry module source: the keys of the `_…_MODELS` dict literals that
    its `_VLLM_MODELS` merges (every such dict when the module has no `_VLLM_MODELS`)."""
    import ast

    tree = ast.parse(text)
    dicts: dict[str, ast.Dict] = {}
    merged: list[str] | None = None
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
            continue
        if target.id == "_VLLM_MODELS":
            merged = [v.id for k, v in zip(value.keys, value.values) if k is None and isinstance(v, ast.Name)]
        elif target.id.endswith("_MODELS"):
            dicts[target.id] = value

    def keys(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        node = dicts.get(name)
        if node is None or name in seen:
            return set()
        out = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        for k, v in zip(node.keys, node.values):
            if k is None and isinstance(v, ast.Name):
                out |= keys(v.id, seen | {name})
        return out

    names: set[str] = set()
    for name in (merged if merged is not None else list(dicts)):
        names |= keys(name)
    return frozenset(names)


_ARCHS_CACHE: dict[str, VllmArchitectures] = {}


def supported_architectures() -> VllmArchitectures:
    """The architectures of the installed vLLM's model registry, read from its source (vLLM is not imported:
    importing it costs seconds and probes the platform)."""
    import importlib.util

    from trl_doctor.facts.launch.launcher import package_version

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return VllmArchitectures(None, "vllm is not installed here (TD007 judges that)")
    version = package_version("vllm")
    path = Path(list(spec.submodule_search_locations)[0]) / REGISTRY_MODULE
    if str(path) in _ARCHS_CACHE:
        return _ARCHS_CACHE[str(path)]
    try:
        archs = registry_architectures(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        return VllmArchitectures(None, f"vllm {version}: cannot read vllm/{REGISTRY_MODULE} ({type(exc).__name__})", version)
    if not archs:
        return VllmArchitectures(None, f"vllm {version}: no architecture table found in vllm/{REGISTRY_MODULE}", version)
    found = VllmArchitectures(archs, f"vllm {version}: vllm/{REGISTRY_MODULE} ({len(archs)} architectures)", version)
    _ARCHS_CACHE[str(path)] = found
    return found


def _transformers_backend(model_path: Path, arch: str) -> bool | str | None:
    """vLLM's `_try_resolve_transformers`: the class named `arch` in transformers (else the checkpoint's remote
    code, which is not run here: None), usable when `is_backend_compatible()` or `_can_set_attn_implementation()`."""
    cfg = _read_json(model_path / "config.json")
    auto_map = cfg.get("auto_map") if isinstance(cfg, dict) else None
    try:
        import transformers

        cls = getattr(transformers, arch, None)
    except Exception:
        return None
    if cls is None:
        if isinstance(auto_map, dict) and any(str(k).startswith("AutoModel") for k in auto_map):
            return None  # remote code: vLLM would try it through its Transformers backend; not run here
        return (f"vLLM's Transformers backend has nothing to fall back on: transformers {transformers.__version__} has "
                f"no class {arch} and config.json has no auto_map")
    checks = [getattr(cls, name, None) for name in ("is_backend_compatible", "_can_set_attn_implementation")]
    try:
        if any(callable(c) and c() for c in checks) or getattr(cls, "_supports_attention_backend", False):
            return True
    except Exception:
        return None
    return (f"its transformers class {arch} supports no pluggable attention, which vLLM's Transformers backend "
            "needs")
