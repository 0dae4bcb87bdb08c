"""The trainer config, a fact: what the installed TRL makes of the config's keys.

`typed_as_trl(config)` reads the values through TRL's own parser (`2e-5` is a float to TRL) and returns the
config the check's context is built on: the worker calls it once, before the context exists, so every rule reads
the values as TRL will. `trainer_config_info(ctx)` builds the installed release's config class from those keys
(or takes the object a launch command's script built) and says what it made of them; `trainer_config(ctx)` is
the object itself, for the rules that read it (`needs=("trainer_config",)`), Unavailable when TRL refuses it.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from trl_doctor.cache import fact
from trl_doctor.context.config import DOCTOR_KEYS, SCRIPT_EXTRA_KEYS, DoctorConfig
from trl_doctor.context.env import package_version
from trl_doctor.errors import Unavailable
from trl_doctor.facts.launch.launcher import global_batch_kwargs, is_geometry_error, launch
from trl_doctor.wording import one_line


@dataclass
class TrainerConfigInfo:
    """What building the installed TRL's config class from the user's keys gave."""

    class_name: str
    trl_version: str
    config: Any = None
    error: str | None = None
    unknown_keys: list[str] = field(default_factory=list)
    suggestions: dict[str, str] = field(default_factory=dict)
    passed_keys: list[str] = field(default_factory=list)
    injected: dict[str, Any] = field(default_factory=dict)  # keys the doctor set to build it on this machine
    launch_note: str | None = None  # built at the launch's process count (batch sizes scaled), and why
    parser: str | None = None  # the TRL parser the values were read with
    typed: dict[str, Any] = field(default_factory=dict)  # values TRL's parser converts (`2e-5` -> 2e-05)
    type_errors: dict[str, str] = field(default_factory=dict)  # values TRL's parser refuses, with its message


def _release_config_info(ctx) -> TrainerConfigInfo:
    """trainer_config_info under --static: the config's keys and values against the judged release's config classes
    (trl_doctor.facts.trl.fields), without TRL: no object is built (`config` None), so no __post_init__ runs."""
    from trl_doctor.facts.trl import fields as trl_fields

    own, name = trl_fields.config_fields(ctx.release, ctx.trainer)
    class_name = name or f"{ctx.trainer.upper()}Config"
    if name is None:
        return TrainerConfigInfo(class_name=class_name, trl_version=ctx.release,
                                 error=f"trl {ctx.release} has no {class_name}")
    raw = ctx.config.raw
    known = trl_fields.known_keys(ctx.release, ctx.trainer, own)
    typed = {**own, **trl_fields.script_fields(ctx.release, ctx.trainer)}
    errors = {k: why for k, v in raw.items() if k in typed and (why := trl_fields.type_error(k, v, typed[k]["type"]))}
    unknown = [k for k in raw if k not in known]
    suggestions = {key: near for key in unknown if (near := _near_key(key, known))}
    init = {k for k, f in own.items() if f.get("init", True)}
    return TrainerConfigInfo(class_name=class_name, trl_version=ctx.release, unknown_keys=unknown,
                             suggestions=suggestions, passed_keys=[k for k in raw if k in init], type_errors=errors,
                             parser=f"trl {ctx.release}'s config classes as data (TrainingArguments from "
                                    f"{trl_fields.training_arguments()[1]})")


def _near_key(key: str, known) -> str | None:
    """The known key a typo of `key` most likely meant: only a really close name is a hint (renamed and removed keys
    are the migration table's)."""
    near = [n for n in difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.8) if abs(len(n) - len(key)) <= 2]
    return near[0] if near else None


def typed_as_trl(config: DoctorConfig) -> DoctorConfig:
    """The config with its values as the installed TRL's parser types them, and that parse recorded
    (`config.parsed`); the config unchanged when TRL has no parser to ask."""
    from trl_doctor.facts.trl.parsing import parse_as_trl

    parsed = parse_as_trl(config.trainer, config.raw)
    if parsed is None:
        return config
    return dataclasses.replace(config, raw={**config.raw, **parsed.typed}, parsed=parsed)


@fact
def trainer_config_info(ctx) -> TrainerConfigInfo:
    from trl_doctor.facts.trl.installed import config_class, script_fields

    if ctx.kind == "static":  # the keys and values against the release's classes, as data; nothing built
        return _release_config_info(ctx)
    if ctx.kind != "full":  # TRL's own object is built with TRL imported: the full check's
        raise Unavailable("needs the full check: TRL's config object is built by the installed TRL")
    if ctx.live is not None and ctx.live.args is not None:
        return _live_config_info(ctx)

    trl_version = ctx.version("trl") or "not installed"
    cls = config_class(ctx.trainer)
    if cls is None:
        return TrainerConfigInfo(class_name=f"{ctx.trainer.upper()}Config", trl_version=trl_version,
                                 error=f"trl {trl_version} has no {ctx.trainer.upper()}Config")
    parsed = ctx.config.parsed
    if parsed is None:  # a context built on a config the worker did not type (the tests' own contexts)
        from trl_doctor.facts.trl.parsing import parse_as_trl

        parsed = parse_as_trl(ctx.trainer, ctx.config.raw)
    own = {f.name for f in dataclasses.fields(cls) if f.init}
    known = own | script_fields() | set(DOCTOR_KEYS) | set(SCRIPT_EXTRA_KEYS) | (parsed.keys if parsed else set())
    info = TrainerConfigInfo(class_name=cls.__name__, trl_version=trl_version)
    values = dict(ctx.config.raw)
    if parsed is not None:
        # what TRL's parser makes of the values is what every rule judges: `2e-5` is a float to TRL
        info.parser, info.typed, info.type_errors = parsed.parser, dict(parsed.typed), dict(parsed.errors)
        values.update(parsed.typed)
    kwargs = {}
    for key, value in values.items():
        if key in info.type_errors:
            continue  # trainer-config reports it; the config object is built without it
        if key in own:
            kwargs[key] = value
        elif key not in known:
            info.unknown_keys.append(key)
            near = _near_key(key, known)
            if near:
                info.suggestions[key] = near
    _for_this_machine(ctx, kwargs, info)
    info.passed_keys = sorted(kwargs)
    try:
        info.config = cls(**kwargs)
    except Exception as exc:  # TRL's __post_init__ raises ValueError, TypeError, ImportError...
        info.error = f"{type(exc).__name__}: {one_line(exc)}"
        _build_for_the_launch(ctx, cls, kwargs, info)
    return info


def trainer_config(ctx):
    """TRL's config object for the check; Unavailable when TRL refuses the config (trainer-config says why), and
    under --static, which builds none."""
    if ctx.kind == "static":
        raise Unavailable("needs the full check: TRL's config object is built by the installed TRL")
    info = trainer_config_info(ctx)
    if info.config is None:
        raise Unavailable(f"TRL's {info.class_name} rejects this config (see the trainer-config rule)")
    return info.config


def trainer_config_or_none(ctx):
    try:
        return trainer_config(ctx)
    except Exception:
        return None


def _for_this_machine(ctx, kwargs: dict, info: TrainerConfigInfo) -> None:
    """The keys set so that the config builds here as it would on the launch machine (recorded in `injected`)."""
    # Relative output paths would land in the current folder; the doctor never writes there.
    kwargs.setdefault("output_dir", str(ctx.workdir / "output"))
    if "use_cpu" not in kwargs and not ctx.has_cuda:
        # transformers rejects bf16 "on this setup" when it sees no GPU; the config is meant for the
        # training machine, so judge it as it would run here. Precision rules check the real GPU.
        kwargs["use_cpu"] = True
        info.injected["use_cpu"] = True
        if kwargs.get("tf32"):
            # TrainingArguments refuses tf32 without an Ampere GPU here; the launch machine's GPUs decide
            # (precision-and-attention, with --target), and the probes run with what this machine has
            kwargs["tf32"] = None
            info.injected["tf32"] = None
    if kwargs.get("deepspeed") and package_version("deepspeed") is None:
        # TrainingArguments builds its DeepSpeed plugin at construction; whether the launch machine has
        # deepspeed is distributed-setup's verdict, not a config the doctor cannot read
        kwargs["deepspeed"] = None
        info.injected["deepspeed"] = None


def _live_config_info(ctx) -> TrainerConfigInfo:
    """The config object the script built, as the file view would have built it: at the launch's process
    count (with a note) when TRL refuses the batch at one process, and rejected when it refuses it there too."""
    live = ctx.live
    args = live.args
    info = TrainerConfigInfo(type(args).__name__, ctx.version("trl") or "not installed", config=args,
                             passed_keys=sorted(k for k in ctx.config.raw if hasattr(args, k)),
                             injected={k: v for k, (v, _) in live.relaxed.items()
                                       if k != "per_device_train_batch_size"})
    if live.batch_note is not None:
        kind, error = live.batch_note
        if kind == "launch":
            info.launch_note = (f"built with the global batch of the launch's {launch(ctx).processes} processes "
                                f"seen from one process; at 1 process TRL says: ValueError: {error}")
        else:
            info.config, info.error = None, f"ValueError: {error}"
    return info


def _build_for_the_launch(ctx, cls, kwargs: dict, info: TrainerConfigInfo) -> None:
    """TRL checks the batch arithmetic against the processes it runs in: one, here. For a launch of N
    processes, build the config once more with the same global batch seen from one process (per-device
    batches times N); when that is accepted, the error was only this machine's process count and the
    config object serves the other rules (batch-geometry judges the arithmetic at N)."""
    if not is_geometry_error(info.error or ""):
        return
    the_launch = launch(ctx)
    procs = the_launch.processes
    if procs == 1:
        return
    try:
        info.config = cls(**global_batch_kwargs(cls, kwargs, procs))
    except Exception:
        return
    info.launch_note = (f"built with the global batch of the launch's {procs} processes ({the_launch.processes_from}) seen from "
                        f"one process; at 1 process TRL says: {info.error}")
    info.error = None
