"""The hooks a training script runs under in the worker: they record what it builds and stop it at its trainer.

- Trainer constructors (GRPO, RLOO, PPO / PPOv2 in whichever form the installed TRL has them; subclasses
  reach them through `super().__init__`): the call's arguments are bound to the constructor's signature,
  the script line that built the trainer is noted, and `TrainerBuilt` (a BaseException, so the script's
  own `except Exception` cannot swallow it) ends the script before the trainer does any work. Any other
  `transformers.Trainer` (TRL's SFT, DPO or OnlineDPO trainers, a script's own Trainer subclass) is stopped
  the same way in transformers' constructor, recorded with no kind: the doctor names it and checks nothing else.
  TRL's AsyncGRPOTrainer, stopped there after its own set-up, is recorded as kind async_grpo (capture/async_grpo.py).
- TRL config constructors: the keyword arguments the script (or TRL's parser) passed are kept, since they are
  what the user set; the defaults and what `__post_init__` derives are not.
- `TrainingArguments.__post_init__`: settings this machine cannot honour but the launch machine will (bf16
  and tf32 without a GPU) are let through and listed as relaxed, so the script reaches its trainer.
- `PreTrainedModel.from_pretrained`: the model is built on the meta device from its config (structure and
  shapes, no weights, no memory), unless `--load-weights`; the keywords it was loaded with are kept.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trl_doctor.vocabulary import TRAINERS

from .machine import (MachinePatches, attention_asked, build_relaxing_attention, relax_deepspeed, relax_trackers,
                      set_attention)
from .user_files import DOCTOR_ROOT, is_user_file, user_frame


# from_pretrained keywords that decide how weights load, not what the config says
_LOADER_KEYS = ("dtype", "torch_dtype", "attn_implementation", "device_map", "quantization_config", "low_cpu_mem_usage",
                "revision", "cache_dir", "token", "use_auth_token", "local_files_only", "trust_remote_code",
                "use_safetensors", "load_in_8bit", "load_in_4bit", "offload_folder", "offload_state_dict",
                "max_memory", "subfolder", "variant", "force_download", "proxies", "_fast_init", "key_mapping",
                "tp_plan", "weights_only", "use_kernels", "gguf_file", "adapter_kwargs", "adapter_name")


class TrainerBuilt(BaseException):
    """Raised inside the trainer's constructor once its arguments are recorded: the script stops there."""


class StepReached(BaseException):
    """Raised before an optimizer step the script takes without a trainer (a training loop of its own): the capture
    never trains. Its text names the optimizer and the script line."""


@dataclass
class ModelLoad:
    """One `from_pretrained` call the script made."""

    cls_name: str
    path: str
    kwargs: dict[str, Any]
    model: Any


@dataclass
class Recorder:
    """What the hooks saw while the script ran."""

    trainer_cls: type | None = None
    trainer_kind: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    where: tuple[str, int] | None = None  # (file, line) of the script line that built the trainer
    config_kwargs: dict[int, tuple[Any, dict[str, Any]]] = field(default_factory=dict)  # id(config) -> (it, kwargs)
    relaxed: dict[int, dict[str, tuple[Any, str]]] = field(default_factory=dict)  # id(config) -> {key: (set to, why)}
    loads: list[ModelLoad] = field(default_factory=list)
    # id(config) -> ("launch", TRL's error at 1 process) when built at the launch's process count, or ("refused",
    # TRL's error) when TRL refuses the batch sizes at the launch too
    batch_notes: dict[int, tuple[str, str]] = field(default_factory=dict)
    # launch-machine settings relaxed outside TRL's config (the model's attention, a move to CUDA): {what: (asked, why)}
    machine: dict[str, tuple[Any, str]] = field(default_factory=dict)
    # a trainer the doctor does not check: the tokenizers it holds besides processing_class when transformers'
    # constructor stops it (OnlineDPO's reward_processing_class): {attribute (with [i] for a list's items): tokenizer}
    held_tokenizers: dict[str, Any] = field(default_factory=dict)
    # the dataclasses of the script's TrlParser, when one parsed the command line and recipe and dropped what none of
    # them takes (parse_args_and_config without return_remaining_strings); None when no such parser ran
    parser_types: tuple[type, ...] | None = None
    # a subclass of a checked trainer whose own __init__ calls transformers' Trainer.__init__ itself: the parent
    # class whose __init__ (and its construction checks) it skipped; None otherwise
    bypassed: str | None = None
    # TRL's AsyncGRPOTrainer as its __init__ built it (trl_doctor.facts.trl.async_grpo.Built; capture/async_grpo.py)
    async_grpo: Any = None
    # a bypassing subclass (`bypassed`) let finish its construction: "constructing" until it does, "train" once the
    # script reached train() with the trainer as built, or the error its construction raised here
    built: str | None = None


class _OutputAside:
    """A trainer config's output folders (output_dir, logging_dir) pointed into a temporary folder of the check's while
    a trainer is constructed for real (transformers' constructor makes output_dir; a framework's writes its logs
    there), and put back as the script wrote them before anything reads them."""

    KEYS = ("output_dir", "logging_dir")

    def __init__(self, config: Any):
        import tempfile

        self.config, self.saved = config, {}
        if config is None:
            return
        folder = tempfile.mkdtemp(prefix="trl-doctor-construct-")
        for key in self.KEYS:
            if isinstance(getattr(config, key, None), str):
                self.saved[key] = getattr(config, key)
                try:
                    setattr(config, key, os.path.join(folder, key))
                except Exception:  # a frozen config: left as it is
                    self.saved.pop(key)

    def restore(self) -> None:
        for key, value in self.saved.items():
            try:
                setattr(self.config, key, value)
            except Exception:
                pass
        self.saved = {}


def _trl_parser_class() -> type | None:
    """The installed TRL's TrlParser (trl.TrlParser from 0.13; trl.commands.cli_utils before), or None."""
    try:
        import trl

        return getattr(trl, "TrlParser", None)
    except Exception:  # a TRL whose lazy module cannot import its parser with this transformers
        return None


def trainer_classes() -> dict[type, str]:
    """The installed TRL's RL trainer classes and their kind (grpo, rloo, ppo)."""
    import importlib

    from ..facts.trl.installed import trainer_class

    found: dict[type, str] = {}
    for kind in TRAINERS:
        try:
            cls = trainer_class(kind)
        except RuntimeError:  # TRL's lazy module wraps a trainer whose own imports fail (a missing optional
            continue  # dependency): the script cannot construct that trainer, so there is nothing to hook
        if cls is not None:
            found.setdefault(cls, kind)
    for module_name in ("trl", "trl.trainer", "trl.experimental.ppo"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, kind in (("PPOv2Trainer", "ppo"), ("PPOTrainer", "ppo")):
            try:
                cls = getattr(module, name, None)
            except Exception:  # a lazy module whose import fails with this transformers
                cls = None
            if isinstance(cls, type):
                found.setdefault(cls, kind)
    return found


def config_classes() -> list[type]:
    from ..facts.trl.installed import config_class

    out = []
    for kind in TRAINERS:
        cls = config_class(kind)
        if cls is not None and cls not in out:
            out.append(cls)
    try:
        import trl

        v2 = getattr(trl, "PPOv2Config", None)
        if isinstance(v2, type) and v2 not in out:
            out.append(v2)
    except ImportError:
        pass
    return out


# what TRL's RL trainers keep of their constructor's arguments under the same names (ms-swift deletes
# GRPOTrainer.__init__, whose signature would otherwise name them)
_TRAINER_HOLDS = ("model", "ref_model", "reward_funcs", "reward_model", "value_model", "args", "train_dataset",
                  "eval_dataset", "processing_class", "reward_processing_classes", "peft_config", "tools",
                  "environment_factory", "rollout_func")


def _bypassed_arguments(parent: type, trainer: Any, arguments: dict[str, Any], built: bool = False) -> dict[str, Any]:
    """What a subclass that skipped `parent.__init__` gave its trainer: transformers' Trainer.__init__ arguments, and
    for the parent's own parameters Trainer does not take (reward_funcs, ref_model...), what the subclass's __init__
    set on the trainer (`self.reward_funcs = ...`, as TRL's own __init__ does). With `built` (its construction is
    done), what the trainer holds wins over what it was given: reward functions named in the call are the callables
    it resolved them to, its datasets are the ones it prepared."""
    out = dict(arguments)
    try:
        params = [p for p in inspect.signature(parent.__init__).parameters if p != "self"]  # type: ignore[misc]  # the class's own
    except (TypeError, ValueError):
        params = []
    params = list(dict.fromkeys([*params, *_TRAINER_HOLDS]))  # a framework may have deleted the parent's __init__
    held = vars(trainer) if hasattr(trainer, "__dict__") else {}
    for name in params:
        if name in held and (name not in out or (built and held[name] is not None)):
            out[name] = held[name]
    return out


def _async_grpo(recorder: Recorder, frame, trainer: Any) -> bool:
    """Whether `trainer` is TRL's AsyncGRPOTrainer, stopped in transformers' constructor after its own set-up: then
    it is recorded as one (kind async_grpo), with what its __init__ built and what pickle refuses of it."""
    from ..facts.trl.async_grpo import is_async_grpo
    from .async_grpo import construction_locals, record

    if not is_async_grpo(type(trainer)):
        return False
    built = construction_locals(frame, trainer)
    if built is None:
        return False
    record(recorder, trainer, built, frame)
    return True


def _held_tokenizers(trainer: Any, processing_class: Any) -> dict[str, Any]:
    """The tokenizers a trainer's own set-up stored on it before calling transformers' constructor, other than
    `processing_class`: {attribute, or attribute[i] for a list's items: tokenizer}."""
    from transformers import PreTrainedTokenizerBase

    found: dict[str, Any] = {}
    own = (processing_class, getattr(processing_class, "tokenizer", None))  # a processor's own tokenizer is that one
    for name, value in list(vars(trainer).items()):
        items = [(name, value)] if not isinstance(value, (list, tuple)) else \
            [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        for where, item in items:
            if isinstance(item, PreTrainedTokenizerBase) and not any(item is o for o in own):
                found[where] = item
    return found


class Hooks:
    """Install with `with Hooks(recorder, load_weights, has_cuda):`; everything is put back on exit."""

    def __init__(self, recorder: Recorder, load_weights: bool = False, has_cuda: bool = False,
                 trust_remote_code: bool = False):
        self.recorder = recorder
        self.load_weights = load_weights
        self.has_cuda = has_cuda
        self.trust_remote_code = trust_remote_code
        self.processes = 1  # the launch's training processes, once the launcher has said
        self.world_emulated = False  # the script runs as rank 0 of `processes` (capture/world.py)
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> "Hooks":
        self._checked = trainer_classes()
        for cls, kind in self._checked.items():
            self._patch(cls, "__init__", self._trainer_init(cls.__init__, kind))  # type: ignore[misc]  # patching TRL's
        for cls in config_classes():
            self._patch(cls, "__init__", self._config_init(cls.__init__))  # type: ignore[misc]  # patching TRL's
        from transformers import PreTrainedModel, Trainer, TrainingArguments

        # any other trainer (TRL's SFT or OnlineDPO, a Trainer subclass of the script's own that copies GRPO) reaches
        # transformers' constructor: the script stops there too, never in its training loop (kind None: unchecked)
        self._patch(Trainer, "__init__", self._trainer_init(Trainer.__init__, None))
        self._patch(TrainingArguments, "__post_init__", self._post_init(TrainingArguments.__post_init__))
        parser: Any = _trl_parser_class()  # TRL's TrlParser, read by name
        if parser is not None and "parse_args_and_config" in vars(parser):
            self._patch(parser, "parse_args_and_config", self._parse_args_and_config(parser.parse_args_and_config))
        if not self.load_weights:
            original = PreTrainedModel.__dict__["from_pretrained"].__func__
            self._patch(PreTrainedModel, "from_pretrained", classmethod(self._from_pretrained(original)))
        moves = MachinePatches(self.recorder.machine, self.has_cuda).__enter__()
        self._undo.append(lambda: moves.__exit__(None, None, None))
        self._stop_steps()
        return self

    def _stop_steps(self) -> None:
        """No optimizer step while the script runs to its trainer (torch's global step pre-hook, torch >= 2.0)."""
        try:
            from torch.optim.optimizer import register_optimizer_step_pre_hook
        except ImportError:
            return

        def stop(optimizer: Any, args: Any, kwargs: Any) -> None:
            where = user_frame(sys._getframe(1))
            at = f" at {where[0]}:{where[1]}" if where else ""
            raise StepReached(f"{type(optimizer).__name__}.step(){at}")

        handle = register_optimizer_step_pre_hook(stop)
        self._undo.append(handle.remove)

    def __exit__(self, *exc: Any) -> None:
        while self._undo:
            self._undo.pop()()

    def _patch(self, owner: type, name: str, value: Any) -> None:
        had = name in owner.__dict__
        old = owner.__dict__.get(name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old) if had else delattr(owner, name))

    # -- the script's parser ---------------------------------------------------------------------------------
    def _parse_args_and_config(self, original: Callable) -> Callable:
        """Record the dataclasses of a TrlParser that drops what they do not take (the keys it leaves are the
        script's when it asks for them with return_remaining_strings)."""
        recorder = self.recorder
        signature = inspect.signature(original)

        def parse_args_and_config(parser_self, *args: Any, **kwargs: Any) -> Any:
            try:
                keeps_rest = bool(signature.bind(parser_self, *args, **kwargs).arguments.get("return_remaining_strings"))
                types: list[Any] = [t for t in getattr(parser_self, "dataclass_types", ()) if dataclasses.is_dataclass(t)]
            except TypeError:
                keeps_rest, types = True, []
            if types and not keeps_rest:
                recorder.parser_types = tuple(dict.fromkeys((*(recorder.parser_types or ()), *types)))
            return original(parser_self, *args, **kwargs)

        parse_args_and_config.__wrapped__ = original  # type: ignore[attr-defined]
        return parse_args_and_config

    # -- the trainer ---------------------------------------------------------------------------------------
    def _trainer_init(self, original: Callable, kind: str | None) -> Callable:
        recorder = self.recorder
        signature = inspect.signature(original)

        def __init__(trainer_self, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind_partial(trainer_self, *args, **kwargs)
            arguments = dict(bound.arguments)
            arguments.pop(next(iter(signature.parameters)), None)  # self
            for name, param in signature.parameters.items():
                if param.kind is inspect.Parameter.VAR_KEYWORD and name in arguments:
                    arguments.update(arguments.pop(name))
            recorder.trainer_cls = type(trainer_self)
            recorder.trainer_kind = kind
            recorder.arguments = arguments
            recorder.where = _constructor_line(sys._getframe(1), trainer_self)
            if kind is None:
                parent = next((cls for cls in self._checked if isinstance(trainer_self, cls)), None)
                if parent is not None:  # a GRPOTrainer subclass that calls Trainer.__init__ itself: judged as one
                    recorder.trainer_kind, recorder.bypassed = self._checked[parent], parent.__name__
                    recorder.arguments = _bypassed_arguments(parent, trainer_self, arguments)
                    self._build_to_train(original, trainer_self, parent, args, kwargs)
                    return  # transformers' constructor ran: the subclass's __init__ goes on, to train()
                elif not _async_grpo(recorder, sys._getframe(1), trainer_self):
                    recorder.held_tokenizers = _held_tokenizers(trainer_self, arguments.get("processing_class"))
            raise TrainerBuilt()

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        return __init__

    def _build_to_train(self, init: Callable, trainer: Any, parent: type, args: tuple, kwargs: dict) -> None:
        """A trainer whose own __init__ replaces its TRL parent's (ms-swift deletes GRPOTrainer.__init__, R1-V-style
        trainers call Trainer.__init__ themselves) holds what the job trains with only once its construction is done
        (reward functions resolved from names, its own datasets and templates). So transformers' constructor runs, the
        rest of the subclass's __init__ with it, and the script stops where the job begins: `train()` (or any other
        entry into the loop), where the trainer as built is recorded. Returns normally to let construction go on; a
        construction that fails here keeps what was given (the model is on the meta device) and says why."""
        recorder = self.recorder
        from transformers import Trainer

        config = kwargs.get("args", args[1] if len(args) > 1 else None)
        aside = _OutputAside(config)  # its construction writes into the check's folder, never the user's output_dir

        def stop(trainer_self: Any, *rest: Any, **more: Any) -> None:
            aside.restore()
            if trainer_self is trainer:
                recorder.arguments = _bypassed_arguments(parent, trainer_self, recorder.arguments, built=True)
                recorder.built = "train"
            raise TrainerBuilt()

        owners: dict[type, None] = dict.fromkeys((type(trainer), Trainer))
        for owner in owners:  # its own train() too (a framework's mixin overrides it)
            for name in ("train", "evaluate", "predict"):
                self._patch(owner, name, stop)
        recorder.built = "constructing"
        self._undo.append(aside.restore)
        try:
            init(trainer, *args, **kwargs)
        except TrainerBuilt:
            raise
        except Exception as exc:  # on the meta-device model, or the job's own error: judged on what it was given
            aside.restore()
            recorder.built = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            raise TrainerBuilt() from None

    # -- TRL's config classes --------------------------------------------------------------------------------
    def _config_init(self, original: Callable) -> Callable:
        from ..facts.trl.installed import dict_fields_for

        recorder = self.recorder

        def __init__(config_self, *args: Any, **kwargs: Any) -> None:
            recorder.config_kwargs[id(config_self)] = (config_self, dict(kwargs))
            try:
                with dict_fields_for(type(config_self)):
                    original(config_self, *args, **kwargs)
            except ValueError as exc:
                for kind, built_with, why in self._batch_candidates(type(config_self), kwargs, exc):
                    try:
                        with dict_fields_for(type(config_self)):
                            original(config_self, *args, **built_with)
                    except ValueError:
                        continue
                    relaxed = recorder.relaxed.setdefault(id(config_self), {})
                    relaxed["per_device_train_batch_size"] = (built_with.get("per_device_train_batch_size"), why)
                    recorder.batch_notes[id(config_self)] = (kind, str(exc))
                    return
                raise

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        return __init__

    def _post_init(self, original: Callable) -> Callable:
        recorder, has_cuda = self.recorder, self.has_cuda

        def __post_init__(config_self) -> None:
            relaxed: dict[str, tuple[Any, str]] = {}
            if not has_cuda and not getattr(config_self, "use_cpu", False) and hasattr(config_self, "use_cpu"):
                config_self.use_cpu = True
                relaxed["use_cpu"] = (True, "set on this GPU-less machine so that TrainingArguments accepts the GPU "
                                            "settings (bf16, fp16) the launch machine will use")
            elif not has_cuda and getattr(config_self, "use_cpu", False) and \
                    any(r.get("use_cpu", (None,))[0] is True for r in recorder.relaxed.values()):
                # built from a config relaxed here (GRPOConfig(**training_args.to_dict())): the value is the doctor's
                relaxed["use_cpu"] = (True, "carried from the script's other TrainingArguments (its to_dict()), on "
                                            "which it was set for this GPU-less machine")
            if not has_cuda and getattr(config_self, "tf32", None):
                relaxed["tf32"] = (None, f"{config_self.tf32!r} kept aside: TrainingArguments refuses tf32 without an "
                                         "Ampere GPU")
                config_self.tf32 = None
            deepspeed = relax_deepspeed(config_self, relaxed)
            original(config_self)
            if deepspeed is not None:  # the rules read the value the script set
                config_self.deepspeed = deepspeed
            trackers = relax_trackers(config_self, relaxed)
            if trackers:  # what the job will start, kept for run-phases (TrainingArguments resolved "all")
                recorder.machine["report_to"] = (trackers, relaxed["report_to"][1])
            if relaxed:
                recorder.relaxed[id(config_self)] = relaxed

        __post_init__.__wrapped__ = original  # type: ignore[attr-defined]
        return __post_init__

    def _batch_candidates(self, cls: type, kwargs: dict[str, Any], exc: ValueError):
        """TRL checks the batch arithmetic in the config, against the one process the script runs in here. So
        that the script reaches its trainer, build the config once more: first with the launch's global batch
        seen from one process (for a launch of N processes), then with a batch that divides (the arithmetic as
        written is then batch-geometry's to judge, at the launch's process count). (kwargs, why) pairs."""
        from ..facts.launch.launcher import global_batch_kwargs, is_geometry_error

        if not is_geometry_error(str(exc)):
            return
        if self.processes > 1 and not self.world_emulated:  # at world size N TRL already judged the launch's batch
            scaled = global_batch_kwargs(cls, kwargs, self.processes)
            yield "launch", scaled, (f"built with the global batch of the launch's {self.processes} processes seen from one "
                           f"process; at 1 process TRL says: {exc}")
        generations = kwargs.get("num_generations") or kwargs.get("rloo_k") or _group_default(cls) or 2
        divides = {k: v for k, v in kwargs.items() if k not in ("generation_batch_size", "steps_per_generation")}
        divides.update(per_device_train_batch_size=generations, per_device_eval_batch_size=generations)
        yield "refused", divides, (f"TRL refuses the batch sizes as written ({exc}); built with per_device_train_batch_size="
                        f"{generations} so the script reaches its trainer: batch-geometry judges the real ones")

    # -- models on the meta device ---------------------------------------------------------------------------
    def _from_pretrained(self, original: Callable) -> Callable:
        recorder, trust = self.recorder, self.trust_remote_code

        def from_pretrained(cls, pretrained_model_name_or_path, *model_args: Any, **kwargs: Any):
            asked = attention_asked(kwargs.get("config"))
            model = meta_model(cls, pretrained_model_name_or_path, dict(kwargs), trust, recorder.machine)
            kept = {k: v for k, v in kwargs.items() if k != "config"}
            if asked and "attn_implementation" not in kept:  # the auto class moved it onto the config
                kept["attn_implementation"] = asked
            recorder.loads.append(ModelLoad(cls.__name__, str(pretrained_model_name_or_path), kept, model))
            return model

        return from_pretrained


def _constructor_line(frame, trainer) -> tuple[str, int] | None:
    """The script line that built the trainer: the first user frame outside the trainer's own constructors
    (a subclass's `super().__init__` line is inside one), else the first frame outside them at all."""
    first = None  # TRL's own scripts (`trl grpo`) live in site-packages: the script line there, then
    while frame is not None:
        name = frame.f_code.co_filename
        if frame.f_locals.get("self") is not trainer and not name.startswith("<"):
            if is_user_file(name):
                return name, frame.f_lineno
            if first is None and not os.path.realpath(name).startswith(DOCTOR_ROOT + os.sep):
                first = (name, frame.f_lineno)
        frame = frame.f_back
    return first


def meta_model(cls, path, kwargs: dict[str, Any], trust_remote_code: bool, relaxed: dict | None = None):
    """`cls.from_pretrained(path, **kwargs)` as structure only: the config as transformers reads it (keywords
    such as num_labels applied), the model built on the meta device, in the dtype the script asked for. An
    attention implementation this machine cannot build is relaxed (and noted in `relaxed`)."""
    import torch
    from transformers import GenerationConfig, PretrainedConfig

    config = kwargs.pop("config", None)
    loader = {k: kwargs.pop(k) for k in _LOADER_KEYS if k in kwargs}
    trust = bool(loader.get("trust_remote_code")) and trust_remote_code
    if not isinstance(config, PretrainedConfig):
        config_cls = getattr(cls, "config_class", None) or PretrainedConfig
        source = config if isinstance(config, (str, os.PathLike)) else path
        from transformers import AutoConfig

        reader = AutoConfig if config_cls is PretrainedConfig else config_cls
        config, kwargs = reader.from_pretrained(str(source), return_unused_kwargs=True, trust_remote_code=trust,
                                                **{k: loader[k] for k in ("revision", "subfolder") if k in loader},
                                                **kwargs)
    for key, value in kwargs.items():  # what transformers applies to the config from leftover keywords
        if hasattr(config, key):
            setattr(config, key, value)
    if isinstance(loader.get("attn_implementation"), str):
        set_attention(config, loader["attn_implementation"])

    def build():
        with torch.device("meta"):
            return cls._from_config(config)

    model = build_relaxing_attention(build, config, relaxed if relaxed is not None else {})
    dtype = loader.get("dtype", loader.get("torch_dtype"))
    if dtype == "auto":
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if isinstance(dtype, torch.dtype):
        model = model.to(dtype)
    name = str(path)
    model.config._name_or_path = name
    model.name_or_path = name
    folder = Path(name)
    if (folder / "generation_config.json").is_file():
        try:
            model.generation_config = GenerationConfig.from_pretrained(name)
        except Exception:
            pass
    return model


def _group_default(cls: type) -> int | None:
    """The config class's own default group size (GRPOConfig.num_generations, 8 in trl 1.x; RLOO's rloo_k): what a
    config built without the key (a framework's: oumi passes none) divides by."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        return None
    for f in dataclasses.fields(cls):
        if f.name in ("num_generations", "rloo_k") and isinstance(f.default, int) and f.default > 0:
            return f.default
    return None
