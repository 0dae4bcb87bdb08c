"""The launch: how many training processes it starts and where that number comes from, the GPUs the job
can see (NVML, after CUDA_VISIBLE_DEVICES), and the accelerate settings it is started with.

`launch(ctx)` answers all of it once per check as a `Launch`; `nvml_gpus(ctx)` is the GPU list alone. Read
without torch: NVML answers in milliseconds and needs no CUDA context. The accelerate config (and a DeepSpeed
JSON it names) is only read here; rules decide what its settings mean.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from trl_doctor.cache import fact
from trl_doctor.context.env import gpus, package_version, torch_cuda_version
from trl_doctor.facts.trl.installed import trl_root

__all__ = ["gpus", "package_version", "torch_cuda_version", "visible_gpus", "is_geometry_error", "global_batch_kwargs", "nvml_gpus",
           "launch", "Launch", "AccelerateSettings", "DeepSpeedSettings", "FsdpSettings", "read_accelerate_config",
           "sharding", "Sharding", "trainer_reentrant_default", "transformers_reentrant_default", "trainer_distributed_handling", "TrainerDistributedHandling"]

_GEOMETRY_WORDS = ("batch", "generations", "steps_per_generation", "mini_batch", "rloo_k")


def is_geometry_error(text: str) -> bool:
    """Whether TRL's error text is about the batch arithmetic (a process count can explain it)."""
    return any(w in text for w in _GEOMETRY_WORDS)


def global_batch_kwargs(cls, kwargs: dict[str, Any], processes: int) -> dict[str, Any]:
    """`kwargs` for TRL's config class `cls` with the per-device batches of a launch of `processes` seen from one
    process (each times `processes`; a batch left out takes the class's default): TRL checks the batch arithmetic
    against the processes it runs in, one, where the doctor builds it."""
    from trl_doctor.facts.trl.installed import field_default

    scaled = dict(kwargs)
    for key in ("per_device_train_batch_size", "per_device_eval_batch_size"):
        value = scaled.get(key, field_default(cls, key))
        if isinstance(value, int):
            scaled[key] = value * processes
    return scaled


# -- the facts -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeepSpeedSettings:
    """DeepSpeed as the accelerate config sets it (its `deepspeed_config` block, or the JSON file it names)."""

    zero_stage: int | str | None  # 0-3, or "auto" as a DeepSpeed JSON may say
    offload_optimizer: str | None  # the device: "none", "cpu", "nvme"
    offload_param: str | None
    config_file: str | None = None  # the DeepSpeed JSON read, when the accelerate config names one
    error: str | None = None  # why that JSON could not be read


@dataclass(frozen=True)
class FsdpSettings:
    """FSDP as the accelerate config sets it (its `fsdp_config` block)."""

    version: int | None  # 1 or 2 (accelerate >= 1.7)
    sharding_strategy: str | None  # FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD (FSDP1's name for it)
    reshard_after_forward: Any  # FSDP2's bool, or FSDP1's strategy name under accelerate's newer key
    offload_params: bool | None
    state_dict_type: str | None = None  # FULL_STATE_DICT, SHARDED_STATE_DICT: how checkpoints gather the weights


@dataclass(frozen=True)
class AccelerateSettings:
    """One accelerate config file as read (no verdict on it)."""

    path: Path
    named_by: str  # "`accelerate_config: zero2`", "accelerate's default config"
    num_processes: int | None
    num_processes_problem: str = ""  # why num_processes gives no count ("num_processes is None")
    distributed_type: str | None = None  # NO, MULTI_GPU, DEEPSPEED, FSDP, ...
    mixed_precision: str | None = None  # no, fp16, bf16, fp8
    deepspeed: DeepSpeedSettings | None = None
    fsdp: FsdpSettings | None = None
    error: str | None = None  # the file could not be read: "cannot read it (YAMLError)", "not a mapping"
    num_machines: int | None = None  # accelerate's num_machines (its num_processes counts every machine's)


UNCOUNTED = "no GPU visible, no num_processes given"  # where the count of 1 is no more than a default


@dataclass(frozen=True)
class Launch:
    """The launch of the training job, as the doctor reads it on this machine."""

    processes: int  # training processes
    processes_from: str  # where that number comes from, in words ("--num-processes", "4 visible GPUs: ...")
    processes_note: str | None  # what else was looked at and why it gave no number
    gpus: tuple[dict, ...]  # the GPUs the job sees (NVML's, after CUDA_VISIBLE_DEVICES)
    gpus_missing: str  # why there are none (NVML's error, the CUDA_VISIBLE_DEVICES note, or "NVML reports no GPU")
    nvml_gpus: tuple[dict, ...]  # every GPU NVML reports
    nvml_error: str | None  # why NVML gave no list (no driver, no pynvml)
    visible_note: str | None  # what CUDA_VISIBLE_DEVICES left visible, when it is set
    accelerate: AccelerateSettings | None  # the accelerate config `accelerate launch` reads, when there is one
    target: str | None = None  # --target: `gpus` describe the launch machine named there, not this one
    judged_here: bool = False  # `gpus` are this machine's own: what is installed here is what the job gets
    # the launch's Python environment is this one: its GPUs are here, or --target names them and --target-env is
    # "this" (the default: a check runs in the environment the job will run in unless told otherwise)
    software_here: bool = False
    machines: int = 1  # machines the processes spread over (accelerate --num_machines, torchrun --nnodes)
    machines_from: str | None = None  # where that number comes from, when it is more than one

    @property
    def counted(self) -> bool:
        """Whether `processes` was given or seen (a flag, the launcher, the GPUs), not a default of 1."""
        return self.processes_from != UNCOUNTED

    @property
    def per_machine(self) -> int:
        """Training processes on one machine: the world size over the machines (rounded up)."""
        return -(-self.processes // max(1, self.machines))

    @property
    def not_judged(self) -> str:
        """Why what is installed here says nothing about the launch machine (when software_here is False)."""
        return ("the launch machine's Python environment is another (--target-env other, or auto with a torch "
                "built without CUDA here)" if self.target else
                "this is not the launch machine (no GPU here); --target names its GPUs, --target-env this judges "
                "this environment as the launch's")


def process_count(n: int) -> str:
    """`n` training processes in words: "1 process", "8 processes"."""
    return f"{n} process{'es' if n != 1 else ''}"


def compute_capability(gpu: dict) -> tuple[int, int]:
    """(major, minor) of a GPU as nvml_gpus or a --target describes it; (0, 0) when unknown."""
    m = re.match(r"(\d+)\.(\d+)", str(gpu.get("compute_capability", "")))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)



@fact
def nvml_gpus(ctx) -> tuple[tuple[dict, ...], str | None]:
    """(every GPU NVML reports, why there is no list), read once per check."""
    found, why = gpus()
    return tuple(found), why


@fact
def launch(ctx) -> Launch:
    """The launch's processes, GPUs and accelerate settings (see `Launch`)."""
    found, why = nvml_gpus(ctx)
    target = ctx.options.target
    if target:  # the front door parsed --target into target_gpus; Options made by hand may carry the text alone
        from trl_doctor.context.target import target_gpus

        parsed = ctx.options.target_gpus
        visible, note, missing = [dict(g) for g in parsed] if parsed else target_gpus(target), None, ""
    else:
        visible, note = visible_gpus(list(found), os.environ.get("CUDA_VISIBLE_DEVICES"))
        missing = why or note or "NVML reports no GPU"
    procs, words, procs_note = _processes(ctx, visible, missing)
    accelerate = _accelerate(ctx)
    machines, machines_from = _machines(ctx, accelerate)
    return Launch(procs, words, procs_note, tuple(visible), missing, found, why, note, accelerate,
                  target=visible[0]["target"] if target else None, judged_here=bool(visible) and not target,
                  software_here=bool(visible) and (not target or _target_env(ctx) == "this"),
                  machines=machines, machines_from=machines_from)


def _machines(ctx, accelerate: AccelerateSettings | None) -> tuple[int, str | None]:
    """(machines, where the number comes from): the launch command's (accelerate --num_machines, torchrun --nnodes),
    the accelerate config's num_machines, the config's `num_machines`; 1 when nothing says more."""
    live = getattr(ctx, "live", None)
    if live is not None and (getattr(live, "machines", None) or 1) > 1:
        return live.machines, live.machines_from
    if accelerate is not None and (accelerate.num_machines or 1) > 1:
        assert accelerate.num_machines is not None  # more than 1
        return accelerate.num_machines, f"num_machines {accelerate.num_machines} in {accelerate.named_by}"
    n = _positive_int(ctx.config.raw.get("num_machines"))
    if n and n > 1:
        return n, f"`num_machines: {n}` in the config"
    return 1, None


def _target_env(ctx) -> str:
    """With --target: "this" when the launch runs in this Python environment, else "other". `auto` (the default)
    takes this one when its torch is a CUDA build: a CPU torch (a laptop, a CPU runner) is no GPU job's."""
    asked = ctx.options.target_env
    if asked in ("this", "other"):
        return asked
    return "this" if torch_cuda_version() else "other"


# -- GPUs --------------------------------------------------------------------------------------------------------

def visible_gpus(found: list[dict], env_value: str | None) -> tuple[list[dict], str | None]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves visible (indices in NVML's order, or GPU- UUID prefixes), and a note."""
    if env_value is None:
        return found, None
    if not env_value.strip():
        return [], "CUDA_VISIBLE_DEVICES is set and empty: no GPU is visible to the job"
    out: list[dict] = []
    for item in (x.strip() for x in env_value.split(",")):
        if re.fullmatch(r"-?\d+", item):
            hit = [g for g in found if g["index"] == int(item)]
        elif item.startswith("GPU-"):
            hit = [g for g in found if (g.get("uuid") or "").startswith(item)]
        else:
            return found, f"CUDA_VISIBLE_DEVICES={env_value!r} (MIG or another form) is not applied: all GPUs counted"
        if not hit or hit[0] in out:
            break  # CUDA stops at the first entry that names no device
        out.append(hit[0])
    names = ", ".join(str(g["index"]) for g in out) or "none"
    return out, f"CUDA_VISIBLE_DEVICES={env_value!r}: NVML GPUs {names} (assuming CUDA_DEVICE_ORDER=PCI_BUS_ID order)"


# -- the process count -------------------------------------------------------------------------------------------

def _processes(ctx, visible: list[dict], missing: str) -> tuple[int, str, str | None]:
    """(processes, where the number comes from, note), in the order `accelerate launch` decides it."""
    opt = ctx.options.num_processes
    if opt:
        return int(opt), "--num-processes", None
    live = getattr(ctx, "live", None)
    if live is not None and live.processes:
        return live.processes, live.processes_from or "the launch command", None
    raw = ctx.config.raw
    n = _positive_int(raw.get("num_processes"))
    if n:
        return n, "`num_processes` in the config, passed to accelerate launch", None
    notes = []
    for key in ("accelerate_config", "config_file"):
        ref = raw.get(key)
        if not isinstance(ref, str) or not ref:
            continue
        path = _accelerate_config_path(ref, ctx.config.base_dir)
        if path is None:
            notes.append(f"`{key}: {ref}` names no file (nor a TRL built-in accelerate config): not read")
            continue
        read = read_accelerate_config(path, f"`{key}: {ref}`")
        if read.num_processes:
            return read.num_processes, f"`{key}: {ref}` sets num_processes {read.num_processes}", f"{key}: {path}"
        notes.append(f"`{key}: {ref}` ({path}): {read.num_processes_problem}")
    default = _default_accelerate_config()
    if default is not None:
        read = read_accelerate_config(default, "accelerate's default config")
        if read.num_processes:
            return (read.num_processes, f"num_processes in accelerate's default config {default}",
                    "; ".join(notes) or None)
        notes.append(f"{default}: {read.num_processes_problem}")
    if visible and ctx.options.target:
        return (len(visible), f"--target {visible[0]['target']}: accelerate launch starts one process per GPU",
                "; ".join(notes) or None)
    if visible:
        return (len(visible), f"{len(visible)} visible GPU{'s' if len(visible) != 1 else ''}: accelerate launch "
                              "starts one process per GPU", "; ".join(notes) or None)
    notes.append(f"no GPU here ({missing}); pass --num-processes N (or set num_processes) for the training machine")
    return 1, UNCOUNTED, "; ".join(notes)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


# -- the accelerate config ---------------------------------------------------------------------------------------

def _accelerate(ctx) -> AccelerateSettings | None:
    """The accelerate config `accelerate launch` reads: the first of `accelerate_config` / `config_file` that names
    a file (or one of TRL's built-in configs), else accelerate's default config; None when there is none."""
    raw = ctx.config.raw
    for key in ("accelerate_config", "config_file"):
        ref = raw.get(key)
        if isinstance(ref, str) and ref:
            path = _accelerate_config_path(ref, ctx.config.base_dir)
            if path is not None:
                return read_accelerate_config(path, f"`{key}: {ref}`", ctx.config.base_dir)
    default = _default_accelerate_config()
    return read_accelerate_config(default, "accelerate's default config") if default is not None else None


def _accelerate_config_path(ref: str, base: Path) -> Path | None:
    p = Path(ref).expanduser()
    p = p if p.is_absolute() else base / p
    if p.is_file():
        return p.resolve()
    root = trl_root()
    builtin = root / "accelerate_configs" / f"{ref}.yaml" if root else None
    return builtin if builtin is not None and builtin.is_file() else None


def default_accelerate_processes() -> int | None:
    """The num_processes of accelerate's default config (`accelerate config`'s file under HF_HOME), or None: what
    `accelerate launch` starts when neither its flag nor a --config_file says."""
    default = _default_accelerate_config()
    return read_accelerate_config(default, "accelerate's default config").num_processes if default else None


def _default_accelerate_config() -> Path | None:
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    folder = Path(home).expanduser() / "accelerate"
    for name in ("default_config.yaml", "default_config.json"):
        if (folder / name).is_file():
            return folder / name
    return None


def _load_mapping(path: Path) -> tuple[dict | None, str]:
    """(the file's mapping, "") or (None, why it is not one)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        return None, f"cannot read it ({type(exc).__name__})"
    if not isinstance(data, dict):
        return None, "not a mapping"
    return data, ""


def read_accelerate_config(path: Path, named_by: str, base: Path | None = None) -> AccelerateSettings:
    """What an accelerate config file sets (the process count, the distributed type, mixed precision, DeepSpeed's
    ZeRO stage and offload, FSDP's sharding), read as it is written. A DeepSpeed JSON it names
    (`deepspeed_config_file`) is looked up beside the accelerate config, then in `base`."""
    data, why = _load_mapping(path)
    if data is None:
        return AccelerateSettings(path, named_by, None, why, error=why)
    n = _positive_int(data.get("num_processes"))
    return AccelerateSettings(
        path, named_by, n, "" if n else f"num_processes is {data.get('num_processes')!r}",
        num_machines=_positive_int(data.get("num_machines")),
        distributed_type=_text(data.get("distributed_type")),
        mixed_precision=_text(data.get("mixed_precision")),
        deepspeed=_deepspeed(data.get("deepspeed_config"), path, base),
        fsdp=_fsdp(data.get("fsdp_config")),
    )


def _deepspeed(block: Any, path: Path, base: Path | None) -> DeepSpeedSettings | None:
    if not isinstance(block, dict) or not block:
        return None
    ref = block.get("deepspeed_config_file")
    if isinstance(ref, str) and ref and ref.lower() != "none":
        candidates = [Path(ref).expanduser()] if Path(ref).expanduser().is_absolute() else \
            [path.parent / ref] + ([base / ref] if base is not None else [])
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            return DeepSpeedSettings(None, None, None, ref, f"{ref}: no such file (looked beside {path.name}"
                                     + (f" and in {base})" if base is not None else ")"))
        data, why = _load_mapping(found)
        if data is None:
            return DeepSpeedSettings(None, None, None, str(found), why)
        zero = cast(dict, data.get("zero_optimization")) if isinstance(data.get("zero_optimization"), dict) else {}
        return DeepSpeedSettings(zero.get("stage"), _device(zero.get("offload_optimizer")), _device(zero.get("offload_param")),
                                 str(found))
    return DeepSpeedSettings(block.get("zero_stage"), _text(block.get("offload_optimizer_device")),
                             _text(block.get("offload_param_device")))


def _device(value: Any) -> str | None:
    """A DeepSpeed JSON's offload block ({"device": "cpu", ...}) as its device."""
    return _text(value.get("device")) if isinstance(value, dict) else _text(value)


def _fsdp(block: Any) -> FsdpSettings | None:
    if not isinstance(block, dict) or not block:
        return None
    reshard = block.get("fsdp_reshard_after_forward")
    strategy = block.get("fsdp_sharding_strategy")
    if strategy is None and isinstance(reshard, str):
        strategy = reshard  # accelerate's newer key for FSDP1 takes the strategy's name
    version = block.get("fsdp_version")
    offload = block.get("fsdp_offload_params")
    return FsdpSettings(version if isinstance(version, int) else None, _text(strategy), reshard,
                        offload if isinstance(offload, bool) else None, _text(block.get("fsdp_state_dict_type")))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


# -- sharding: DeepSpeed ZeRO or FSDP as the trainer gets it ----------------------------------------------------

@dataclass(frozen=True)
class Sharding:
    """How the training processes split the model's state between them, as the launch configures it: DeepSpeed
    ZeRO (the trainer config's `deepspeed`, else an accelerate config with distributed_type DEEPSPEED) or FSDP
    (the trainer config's `fsdp`, else distributed_type FSDP). `backend` None: plain data parallel, every process
    holds everything."""

    backend: str | None  # "deepspeed", "fsdp", or None
    configured_by: str  # where it is set, in words ("`deepspeed: ds_z3.json` in the config")
    zero_stage: int | None = None  # DeepSpeed's ZeRO stage, when read
    strategy: str | None = None  # FSDP's sharding strategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)
    shards_optimizer: bool = False
    shards_gradients: bool = False
    shards_parameters: bool = False
    offload_optimizer: bool = False  # optimizer states on the CPU (or NVMe), not the GPU
    offload_parameters: bool = False  # parameters on the CPU (or NVMe)
    unknown: str | None = None  # why the split could not be read (a stage "auto", a DeepSpeed JSON that does not read)
    unreadable: bool = False  # the DeepSpeed config named is missing or not a mapping: the launch stops on it too

    @property
    def words(self) -> str:
        """'DeepSpeed ZeRO-3' / 'FSDP FULL_SHARD' / 'no sharding', with offload."""
        if self.backend is None:
            return "no sharding (every process holds the whole model)"
        name = (f"DeepSpeed ZeRO-{self.zero_stage}" if self.backend == "deepspeed" and self.zero_stage is not None
                else "DeepSpeed" if self.backend == "deepspeed" else f"FSDP {self.strategy or ''}".strip())
        off = [w for w, on in (("optimizer", self.offload_optimizer), ("parameters", self.offload_parameters)) if on]
        return name + (f" with {' and '.join(off)} offloaded to the CPU" if off else "")

    @property
    def modelled(self) -> bool:
        return self.backend is not None and self.unknown is None


_FSDP_STRATEGIES = {"1": "FULL_SHARD", "2": "SHARD_GRAD_OP", "3": "NO_SHARD", "4": "HYBRID_SHARD",
                    "5": "HYBRID_SHARD_ZERO2", "full_shard": "FULL_SHARD", "shard_grad_op": "SHARD_GRAD_OP",
                    "no_shard": "NO_SHARD", "hybrid_shard": "HYBRID_SHARD", "hybrid_shard_zero2": "HYBRID_SHARD_ZERO2"}


@fact
def sharding(ctx) -> Sharding:
    """The launch's sharding (see `Sharding`). The trainer config's `deepspeed` / `fsdp` win over the accelerate
    config, as the HF Trainer builds its plugin from them when they are set."""
    raw = ctx.config.raw
    ds = raw.get("deepspeed")
    if ds:
        where = f"`deepspeed: {ds if isinstance(ds, str) else '{...}'}` in the config"
        if isinstance(ds, str):
            try:  # a relative path is read from where the job starts; the config's folder is the usual one
                given = Path(ds).expanduser()
                places = [given] if given.is_absolute() else [ctx.config.base_dir / given, Path.cwd() / given]
                p = next((c for c in places if c.is_file()), places[0])
                found = p.is_file()
            except (OSError, ValueError, RuntimeError):  # a name no file system takes (NUL, ~nosuchuser)
                found = False
            if not found:
                return Sharding("deepspeed", where, unknown=f"{ds[:200]}: no such file", unreadable=True)
            data, why = _load_mapping(p)
            if data is None:
                return Sharding("deepspeed", where, unknown=f"{p.name}: {why}", unreadable=True)
        elif isinstance(ds, dict):
            data = ds
        else:
            return Sharding("deepspeed", where, unknown=f"deepspeed is {str(ds)[:80]!r}, neither a file nor a mapping",
                            unreadable=True)
        zero = cast(dict, data.get("zero_optimization")) if isinstance(data.get("zero_optimization"), dict) else {}
        return _zero(where, zero.get("stage", 0), _device(zero.get("offload_optimizer")), _device(zero.get("offload_param")))
    fsdp = raw.get("fsdp")
    if fsdp:
        words = fsdp if isinstance(fsdp, str) else " ".join(map(str, fsdp)) if isinstance(fsdp, list) else "full_shard"
        options = words.lower().split()
        strategy = next((_FSDP_STRATEGIES[o] for o in options if o in _FSDP_STRATEGIES), "FULL_SHARD")
        return _fsdp_sharding(f"`fsdp: {words}` in the config", strategy, "offload" in options)
    acc = launch(ctx).accelerate
    kind = (acc.distributed_type or "").upper() if acc is not None else ""
    if acc is not None and kind == "DEEPSPEED":
        d = acc.deepspeed
        where = f"distributed_type DEEPSPEED in {acc.named_by} ({acc.path.name})"
        if d is None:
            return Sharding("deepspeed", where, unknown="the accelerate config has no deepspeed_config block")
        if d.error:
            return Sharding("deepspeed", where, unknown=d.error, unreadable=True)
        return _zero(where, d.zero_stage, d.offload_optimizer, d.offload_param)
    if acc is not None and kind == "FSDP":
        f = acc.fsdp
        where = f"distributed_type FSDP in {acc.named_by} ({acc.path.name})"
        if f is None:
            return _fsdp_sharding(where, "FULL_SHARD", False)
        if f.version == 2 and isinstance(f.reshard_after_forward, bool):
            strategy = "FULL_SHARD" if f.reshard_after_forward else "SHARD_GRAD_OP"
        else:
            strategy = _FSDP_STRATEGIES.get(str(f.sharding_strategy or "FULL_SHARD").lower(),
                                            str(f.sharding_strategy or "FULL_SHARD").upper())
        return _fsdp_sharding(where, strategy, bool(f.offload_params))
    return Sharding(None, "no DeepSpeed or FSDP in the config or the accelerate config")


def _zero(where: str, stage: Any, offload_optimizer: str | None, offload_param: str | None) -> Sharding:
    n = _positive_int(stage) if stage != 0 else None
    if stage == 0 or str(stage).strip() == "0":
        n = 0
    if n is None or n > 3:
        return Sharding("deepspeed", where, unknown=f"ZeRO stage {stage!r} is not read as 0-3")
    off_opt = (offload_optimizer or "none").lower() not in ("none", "")
    off_par = (offload_param or "none").lower() not in ("none", "") and n == 3  # ZeRO offloads parameters in stage 3 only
    return Sharding("deepspeed", where, zero_stage=n, shards_optimizer=n >= 1, shards_gradients=n >= 2,
                    shards_parameters=n == 3, offload_optimizer=off_opt and n >= 1, offload_parameters=off_par)


def _fsdp_sharding(where: str, strategy: str, offload: bool) -> Sharding:
    if strategy not in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"):
        return Sharding("fsdp", where, strategy=strategy, unknown=f"FSDP sharding strategy {strategy!r} is not known")
    full = strategy in ("FULL_SHARD", "HYBRID_SHARD")
    some = strategy != "NO_SHARD"
    # FSDP's CPU offload moves the parameters, their gradients and the optimizer states
    return Sharding("fsdp", where, strategy=strategy, shards_optimizer=some, shards_gradients=some,
                    shards_parameters=full, offload_optimizer=offload, offload_parameters=offload)


# -- gradient checkpointing and what the installed trainer does about distributed setups --------------------------

_SETDEFAULT_RE = re.compile(r"""gradient_checkpointing_kwargs\.setdefault\(\s*["']use_reentrant["']\s*,\s*(True|False)\s*\)""")
_TF_GUARD_RE = re.compile(r"""Version\(transformers\.__version__\)\s*<\s*Version\(["']([\d.]+)["']\)""")


def trainer_reentrant_default(trainer: str) -> tuple[bool, str] | None:
    """(use_reentrant, where) the installed trainer sets when the config does not, or None."""
    from packaging.version import InvalidVersion, Version

    from trl_doctor.facts.trl.installed import trainer_source

    found = trainer_source(trainer)
    if found is None:
        return None
    rel, text = found
    m = _SETDEFAULT_RE.search(text)
    if m is None:
        return None
    guard = _TF_GUARD_RE.search(text[max(0, m.start() - 400):m.start()])
    installed = package_version("transformers")
    if guard is not None and installed:
        try:
            if Version(installed) >= Version(guard.group(1)):
                return None  # the trainer sets it only for older transformers
        except InvalidVersion:
            pass
    return m.group(1) == "True", f"{rel}:{_line_no(text, m.start())} sets it when the config does not"


def transformers_reentrant_default() -> tuple[bool, str]:
    """(use_reentrant, where) the installed transformers' gradient checkpointing defaults to."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    path = Path(list(spec.submodule_search_locations)[0]) / "modeling_utils.py" \
        if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        return True, "transformers' modeling_utils.py not found: assumed reentrant (transformers 4.x's default)"
    text = path.read_text(encoding="utf-8")
    m = re.search(r"""\{\s*["']use_reentrant["']\s*:\s*(True|False)\s*\}""", text)
    if m is None:
        return True, "transformers/modeling_utils.py sets no default: torch's checkpoint is reentrant"
    return (m.group(1) == "True",
            f"transformers {package_version('transformers')}'s default (modeling_utils.py:{_line_no(text, m.start())})")


@dataclass(frozen=True)
class TrainerDistributedHandling:
    """What the installed trainer does itself about distributed setups, read from its source (file:line evidence,
    None where it does not)."""

    forces_reentrant: str | None  # sets use_reentrant=True for PEFT + ZeRO-3 + gradient checkpointing (trl#6356)
    keeps_adapter_dtype: str | None  # get_peft_model(..., autocast_adapter_dtype=False) under ZeRO-3 (trl#6091)
    drops_device_map: tuple[str, ...]  # distributed types for which it loads a model id with device_map=None
    drops_device_map_at: str | None


_FORCE_REENTRANT_RE = re.compile(r"""^[^#\n]*gradient_checkpointing_kwargs\[\s*["']use_reentrant["']\s*\]\s*=\s*True""", re.M)
_ADAPTER_DTYPE_RE = re.compile(r"""^[^#\n]*\bautocast_adapter_dtype["']?\s*\]?\s*=\s*False""", re.M)
_DROP_MAP_RE = re.compile(r"""distributed_type\s+in\s+[\[(]([^\])]*)[\])]\s*:\s*\n\s*model_init_kwargs\[\s*["']device_map["']\s*\]\s*=\s*None""")


def trainer_distributed_handling(trainer: str) -> TrainerDistributedHandling:
    from trl_doctor.facts.trl.installed import trainer_source

    found = trainer_source(trainer)
    if found is None:
        return TrainerDistributedHandling(None, None, (), None)
    rel, text = found

    def at(m):
        return f"{rel}:{_line_no(text, m.start())}" if m is not None else None

    drop = _DROP_MAP_RE.search(text)
    types = tuple(re.findall(r"""["'](\w+)["']""", drop.group(1))) if drop else ()
    return TrainerDistributedHandling(at(_FORCE_REENTRANT_RE.search(text)), at(_ADAPTER_DTYPE_RE.search(text)),
                                      types, at(drop))


def _line_no(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1
