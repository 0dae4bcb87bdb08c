"""The resolved launch settings: the value the trainer will see for each config key (TRL's built config object,
else the user's value, else the installed class's default), the precision and the policy's dtype as the
installed TRL resolves them.

`settings(ctx)` answers the values several rules read, once per check, as a `Settings`; `config_value(ctx, key)`
is the generic accessor for any other key, and `field_value(ctx, key)` says too whether the installed config
class has the key at all."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from trl_doctor.cache import fact
from trl_doctor.facts.launch.launcher import trainer_reentrant_default, transformers_reentrant_default
from trl_doctor.facts.trl.trainer_config import trainer_config_info, trainer_config_or_none

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float64": 8}

LOCAL_HOSTS = ("0.0.0.0", "localhost", "127.0.0.1", "::1", "", "::")
_MISSING = object()


def as_mapping(value: Any) -> dict:
    """A dict-valued key's value as a dict: TRL's parser takes these keys (generation_kwargs, model_init_kwargs,
    chat_template_kwargs, gradient_checkpointing_kwargs) as a dict or a JSON string; anything else is {}."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def config_value(ctx, key: str, default: Any = None) -> Any:
    """The value the trainer will see for `key`: TRL's built config object when it builds, else the user's
    raw value, else the default of the installed config class (or TRL's ModelConfig / ScriptArguments).

    A value TRL's parser refuses (a list for a batch size, `.nan`, `10**30`) is no value a rule can judge: the
    rule that reads it is skipped (Unavailable) and trainer-config reports the value.

    Under --static (no TRL imported): the value as written, else the default of the judged release's classes.
    In the watch: the running trainer's own value (DoctorCallback), else the recipe's (--config), else `default` (a
    release's default is no evidence of what a logged job ran with)."""
    if ctx.kind == "watch":
        return ctx.config.raw.get(key, default)
    if ctx.kind == "static":
        return _written_or_release_default(ctx, key, default)
    refused = _refused(ctx, key)
    if refused:
        from trl_doctor.errors import Unavailable

        raise Unavailable(f"{refused} (trainer-config reports it)")
    cfg = trainer_config_or_none(ctx)
    if cfg is not None and hasattr(cfg, key):
        return getattr(cfg, key)
    raw = ctx.config.raw
    if key in raw:
        return raw[key]
    found = _field_default(ctx.trainer, key)
    return default if found is _MISSING else found


def _written_or_release_default(ctx, key: str, default: Any) -> Any:
    """config_value for a context without TRL: the config's value, else the default that the judged release's config
    class (or its script's classes) declares, from trl_doctor.facts.trl.fields."""
    if key in ctx.config.raw:
        return ctx.config.raw[key]
    from trl_doctor.facts.trl import fields as trl_fields

    release = ctx.version("trl")
    own, _ = trl_fields.config_fields(release, ctx.trainer)
    field = own.get(key) or trl_fields.script_fields(release, ctx.trainer).get(key) or {}
    return field.get("default", default)


def _refused(ctx, key: str) -> str | None:
    try:
        errors = trainer_config_info(ctx).type_errors
    except Exception:
        return None
    return errors.get(key)


@dataclass(frozen=True)
class Settings:
    """The settings several rules read, resolved as the installed TRL resolves them. Values are what the trainer
    sees (TRL's built config object; the user's raw value, or the class default, when TRL rejects the config)."""

    config_class: str | None  # the installed TRL's config class for the trainer (GRPOConfig), None without one
    fields: frozenset[str]  # its fields that take a value: keys the installed TRL knows for this trainer
    bf16: bool  # as the trainer resolves it (TRL >= 0.19 turns bf16=None into `not fp16`)
    fp16: bool
    policy_dtype: str  # the dtype the policy's weights load in ("float32", "bfloat16", ...)
    policy_dtype_from: str  # where that comes from, in words
    model_init_kwargs: Mapping[str, Any]  # the config's model_init_kwargs as a mapping (a JSON string decoded)
    max_prompt_length: int | None
    max_completion_length: int | None  # the completion limit: max_completion_length, else PPO's response_length
    completion_key: str  # the key the trainer reads it from: "max_completion_length" ("response_length" for PPO)
    per_device_train_batch_size: int | None
    gradient_accumulation_steps: int | None
    num_generations: int | None
    use_vllm: bool
    vllm_mode: str | None  # "colocate" / "server"; None when neither the config nor the installed TRL names one
    use_peft: bool
    gradient_checkpointing: bool


@fact
def settings(ctx) -> Settings:
    """The resolved settings of the check's config (see `Settings`), as the installed TRL and transformers resolve
    them (the policy's load dtype among them): the full check's; another context reads `config_value`."""
    if ctx.kind != "full":
        from trl_doctor.errors import Unavailable

        raise Unavailable("needs the full check: the settings as the installed TRL and transformers resolve them")
    class_name, fields = config_fields(ctx)
    bf16, fp16 = precision(ctx)
    dtype, dtype_from = policy_dtype(ctx)
    completion = config_value(ctx, "max_completion_length", None)
    if completion is None:
        completion = config_value(ctx, "response_length", None)  # PPO's name
    return Settings(
        config_class=class_name,
        fields=fields,
        bf16=bf16,
        fp16=fp16,
        policy_dtype=dtype,
        policy_dtype_from=dtype_from,
        model_init_kwargs=model_init_kwargs(ctx),
        max_prompt_length=config_value(ctx, "max_prompt_length", None),
        max_completion_length=completion,
        completion_key="response_length" if ctx.trainer == "ppo" else "max_completion_length",
        per_device_train_batch_size=config_value(ctx, "per_device_train_batch_size", None),
        gradient_accumulation_steps=config_value(ctx, "gradient_accumulation_steps", None),
        num_generations=config_value(ctx, "num_generations", None),
        use_vllm=bool(config_value(ctx, "use_vllm", False)),
        vllm_mode=config_value(ctx, "vllm_mode", None),
        use_peft=bool(config_value(ctx, "use_peft", False)),
        gradient_checkpointing=bool(config_value(ctx, "gradient_checkpointing", False)),
    )


def vllm_placement(ctx) -> tuple[str | None, str]:
    """Where the installed TRL runs vLLM for this config, and what says so: (vllm_mode, "config" or "default") where
    the config or the installed class names a mode; before vllm_mode existed (trl < 0.18), ("device", "vllm_device")
    for 0.14-0.15's vLLM on a spare GPU and ("server", "no vllm_mode") for 0.16-0.17; (None, "default") when
    nothing names one."""
    s = settings(ctx)
    raw = ctx.config.raw
    if "vllm_mode" in s.fields or "vllm_mode" in raw or not s.config_class:
        return (s.vllm_mode or raw.get("vllm_mode")), ("config" if "vllm_mode" in raw else "default")
    # trl 0.16-0.17 keep `vllm_device` as a deprecated field ("will be removed in 0.18.0") beside the server client's
    # `vllm_server_host`: they run vLLM as a server; only 0.14-0.15, without the client, run it on a spare GPU
    if "vllm_device" in s.fields and "vllm_server_host" not in s.fields:
        return "device", "vllm_device"
    return "server", "no vllm_mode"


@fact
def config_fields(ctx) -> tuple[str | None, frozenset[str]]:
    """(the judged TRL's config class for the trainer, its fields that take a value); (None, empty) without one:
    the installed TRL's class (full check), the release's as shipped in data (--static)."""
    import dataclasses

    from trl_doctor.facts.trl.installed import config_class

    if ctx.kind == "static":
        from trl_doctor.facts.trl import fields as trl_fields

        own, name = trl_fields.config_fields(ctx.release, ctx.trainer)
        return name, frozenset(k for k, f in own.items() if f.get("init", True))

    try:
        cls = config_class(ctx.trainer)
    except Exception:  # no importable TRL: no class
        cls = None
    if cls is None:
        return None, frozenset()
    return cls.__name__, frozenset(f.name for f in dataclasses.fields(cls) if f.init)


def field_value(ctx, key: str) -> tuple[Any, bool]:
    """(the value the trainer sees for `key`, whether the installed config class has that field). A key the class
    does not have is the user's raw value (None when unset), which the trainer never reads."""
    if key in config_fields(ctx)[1]:
        return config_value(ctx, key), True
    return ctx.config.get(key), False


def _field_default(trainer: str, key: str) -> Any:
    import dataclasses

    try:
        from trl_doctor.facts.trl.installed import config_class

        classes = [config_class(trainer)]
        import trl

        classes += [getattr(trl, "ModelConfig", None), getattr(trl, "ScriptArguments", None)]
    except Exception:  # no TRL: no defaults to read
        return _MISSING
    from trl_doctor.facts.trl.installed import field_default

    for cls in classes:
        if cls is None or not dataclasses.is_dataclass(cls):
            continue
        value = field_default(cls, key, _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


def precision(ctx) -> tuple[bool, bool]:
    """(bf16, fp16) as the trainer resolves them (TRL >= 0.19 turns bf16=None into `not fp16`)."""
    fp16 = bool(config_value(ctx, "fp16", False))
    bf16 = config_value(ctx, "bf16", False)
    if bf16 is None:
        bf16 = not fp16
    return bool(bf16), fp16


def model_init_kwargs(ctx) -> dict:
    """The keywords the policy is loaded with. For a script that passed a model object, TRL's config leaves
    model_init_kwargs unset and the capture records the script's own `from_pretrained` keywords in the raw config."""
    value = config_value(ctx, "model_init_kwargs", None)
    live = getattr(ctx, "live", None)
    held = getattr(getattr(live, "args", None), "model_init_kwargs", None)
    if not value and isinstance(held, dict) and held:
        # the script's own config object, as it handed it to the trainer: what it set after building it (TRL's
        # `trl grpo` sets model_init_kwargs from ModelConfig then), also where TRL refuses the job's batch geometry
        # and the config cannot be rebuilt here (the GPU verdicts' `num_generations: 3` launch: docs/gpu-verdicts.json)
        value = held
    if not value and live is not None and isinstance(ctx.config.raw.get("model_init_kwargs"), dict):
        value = ctx.config.raw["model_init_kwargs"]
    out = as_mapping(value)
    quant = out.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        out["quantization_config"] = quantization_mapping(quant)
    return out


def quantization_mapping(quant: Any) -> dict:
    """A quantization config object as the mapping the rules read (`quant_method`, `load_in_4bit`, ...): a script
    that sets `model_init_kwargs` itself hands TRL the object (transformers' BitsAndBytesConfig, as TRL's
    get_quantization_config returns it), where a recipe writes the mapping. Its own to_dict() (BitsAndBytesConfig
    writes load_in_4bit / load_in_8bit there), quant_method as its plain string; an object without one keeps only
    its class name as the method."""
    to_dict = getattr(quant, "to_dict", None)
    try:
        out = dict(to_dict()) if callable(to_dict) else {}
    except Exception:  # an object of the script's own
        out = {}
    if not out:
        return {"quant_method": type(quant).__name__}
    method = out.get("quant_method")
    if method is not None:
        out["quant_method"] = str(getattr(method, "value", method))
    return out


def unapplied_model_keys(ctx) -> dict[str, tuple[Any, str]]:
    """The model-loading keys a launch command's recipe or command line sets for TRL's ModelConfig
    (`attn_implementation`, `torch_dtype`/`dtype`, `load_in_4bit`/`load_in_8bit`) that never reach the policy:
    TRL's parser fills ModelConfig with them, but only the script decides whether the model is loaded with them
    (by `model_init_kwargs` when it passes the model's name, by its own from_pretrained when it passes a model).
    {key: (value asked, where)}; {} for a config file, whose keys the trl CLI forwards itself."""
    live = getattr(ctx, "live", None)
    asked = dict(getattr(live, "model_keys", None) or {})
    if not asked:
        return {}
    kwargs = model_init_kwargs(ctx)
    quantized = any(kwargs.get(k) for k in ("quantization_config", "load_in_4bit", "load_in_8bit"))
    got_dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
    out = {}
    for key, (value, where) in asked.items():
        if key == "attn_implementation":
            reached = kwargs.get(key) == value
        elif key in ("dtype", "torch_dtype"):
            reached = got_dtype is not None and _dtype_name(got_dtype) == _dtype_name(value)
        else:  # load_in_4bit / load_in_8bit
            reached = quantized
        if not reached:
            out[key] = (value, where)
    return out


def _dtype_name(value: Any) -> str:
    return str(value).replace("torch.", "")


def policy_dtype(ctx) -> tuple[str, str]:
    """(dtype name, where it comes from) of the policy's weights as TRL loads them."""
    kwargs = model_init_kwargs(ctx)
    raw = ctx.config.raw
    for where, mapping in (("model_init_kwargs", kwargs), ("the config", raw)):
        for key in ("dtype", "torch_dtype"):
            if mapping.get(key) is not None:
                return _resolve_dtype(ctx, mapping[key], f"{key} in {where}" if where != "the config" else f"`{key}`")
    live = getattr(ctx, "live", None)
    if live is None:
        # a recipe for TRL's own scripts: they load the policy with ModelConfig's dtype. A launch command's script
        # passes ModelConfig's dtype on itself (the capture records it in model_init_kwargs) or never uses it
        for key in ("dtype", "torch_dtype"):
            found = _field_default(ctx.trainer, key)
            if found is not _MISSING and found is not None:
                return _resolve_dtype(ctx, found, f"TRL's ModelConfig default {key}={found!r}")
    version = ctx.version("transformers") or "0"
    if live is not None and getattr(live, "model", None) is not None:
        # the script loaded the policy itself without a dtype: from_pretrained's own default, not TRL's
        if int(version.split(".")[0]) >= 5:
            return _resolve_dtype(ctx, "auto", f"the script's from_pretrained without a dtype: transformers {version}'s "
                                               "default 'auto'")
        return "float32", f"the script's from_pretrained without a dtype: transformers {version}'s default (float32)"
    # no dtype anywhere: TRL 1.x's create_model_from_path loads fp32; bare transformers 5 loads "auto"
    from trl_doctor.facts.trl.installed import create_model_default_dtype

    if create_model_default_dtype() == "float32":
        return "float32", "TRL's create_model_from_path default (float32 when no dtype is given)"
    if int(version.split(".")[0]) >= 5:
        return _resolve_dtype(ctx, "auto", f"transformers {version}'s from_pretrained default 'auto'")
    return "float32", f"transformers {version}'s from_pretrained default (float32)"


def _resolve_dtype(ctx, value: Any, where: str) -> tuple[str, str]:
    name = str(value).replace("torch.", "")
    if name == "auto":
        cfg = ctx.read_json(ctx.model_file("config.json")) or {}
        found = cfg.get("dtype") or cfg.get("torch_dtype")
        if isinstance(found, str) and found in DTYPE_BYTES:
            return found, f"{where}: 'auto' reads {found} from config.json"
        return "float32", f"{where}: 'auto', and config.json names no dtype (assumed float32)"
    if name not in DTYPE_BYTES:
        return "float32", f"{where}: {value!r} is not a dtype this estimate knows (assumed float32)"
    return name, where


# -- gradient checkpointing ------------------------------------------------------------------------------------

def checkpointing_kwargs(ctx) -> dict:
    """The config's `gradient_checkpointing_kwargs` as a dict (TRL's parser also takes it as a JSON string)."""
    return as_mapping(config_value(ctx, "gradient_checkpointing_kwargs", None))


def checkpointing_reentrant(ctx) -> tuple[bool | None, str]:
    """(use_reentrant the job's gradient checkpointing runs with, where that comes from): the config's
    gradient_checkpointing_kwargs, else the default the installed trainer sets, else the installed transformers'
    default; (None, why) when gradient checkpointing is off."""
    if not config_value(ctx, "gradient_checkpointing", False):
        return None, "gradient checkpointing is off"
    kwargs = checkpointing_kwargs(ctx)
    if "use_reentrant" in kwargs and kwargs["use_reentrant"] is not None:
        return bool(kwargs["use_reentrant"]), "gradient_checkpointing_kwargs in the config"
    found = trainer_reentrant_default(ctx.trainer)
    if found is not None:
        return found
    return transformers_reentrant_default()
