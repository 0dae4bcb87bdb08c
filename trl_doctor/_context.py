"""The shared check context: every artifact a rule may need, loaded lazily and at most once.

Cheap things (the raw JSON files next to the model) come first; the tokenizer, the model config, TRL's
trainer config object, the meta-device model and the miniature twin are built on first use. A loader that
fails remembers its failure, so a second rule asking for the same thing gets the same answer at no cost.
"""

from __future__ import annotations

import contextlib

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ._cache import fact, lazy
from ._config import DOCTOR_KEYS, DoctorConfig, local_path
from ._env import package_version
from ._errors import InputError, Unavailable

# Keys TRL's own CLI scripts accept beside the trainer's config class (trl/scripts/grpo.py, rloo.py, ppo.py)
# and TrlParser's `env` block.
# keys TRL's CLI takes besides the dataclass fields; num_processes, accelerate_config and config_file go to
# `accelerate launch`
SCRIPT_EXTRA_KEYS = ("reward_funcs", "reward_model_name_or_path", "env", "sft_model_path", "num_processes",
                     "accelerate_config", "config_file")


@dataclass(frozen=True)
class Options:
    device: str = "auto"  # auto | cpu | cuda
    trust_remote_code: bool = False
    smoke: bool = True
    smoke_timeout: float = 300.0
    unsafe_fixes: bool = False  # rules prepare costly unsafe fixes (rewritten weights) only when they may apply
    num_processes: int | None = None  # training processes of the launch (--num-processes); None: read the launch config
    trainer_run: dict | None = None  # a RunResult (JSON) the supervisor hands a fresh worker when a run hung or died
    launch: dict | None = None  # a launch command (trl_doctor.capture.command.LaunchCommand as JSON): check what it builds
    load_weights: bool = False  # the script's from_pretrained loads real weights (default: the meta device)
    script_timeout: float = 300.0  # seconds a launch command's script may take to construct its trainer
    verbose: bool = False  # input errors carry the script's traceback
    target: str | None = None  # the launch machine's GPUs (--target 8xH100-80GB), judged instead of this machine's
    # with --target: the launch's Python environment is this one ("this"), another ("other"), or "auto": this one
    # when this torch is a CUDA build (a CPU torch is no GPU job's environment)
    target_env: str = "auto"
    max_memory: float | None = None  # GiB of address space for the worker (None: 85% of RAM; 0: no limit); see _limits
    memory_limit: int | None = None  # the limit the worker set, in bytes (recorded by the worker)
    user_code_timeout: float = 60.0  # seconds the user's code (a reward module's import, one call, a chat template) may run
    sample: int | None = None  # --sample N: prompts sampled with the real model after the smoke step (None: N on a GPU where it fits, else none)


@dataclass(frozen=True)
class Live:
    """What a launch command's script built, judged instead of what the files alone would give."""

    command: str  # the command as typed
    script: str | None  # the training script that ran
    where: tuple[str, int] | None  # (file, line) that constructed the trainer
    trainer_cls: Any = None  # the class the script constructed (a subclass of TRL's, maybe)
    args: Any = None  # TRL's config object as the script built it
    tokenizer: Any = None  # processing_class, with the script's added tokens and pad token
    model: Any = None  # the policy the script built (meta device unless --load-weights); None when given as a path
    dataset: Any = None  # train_dataset as the script prepared it
    relaxed: dict = field(default_factory=dict)  # settings let through on this machine: {key: (set to, why)}
    machine_relaxed: dict = field(default_factory=dict)  # launch-machine settings outside TRL's config: {what: (asked, why)}
    recipe: str | None = None  # the config file the script was given (--config), when there is one
    recipe_keys: tuple[str, ...] = ()  # the keys that file sets
    processes: int | None = None  # training processes the launcher starts, when it says
    processes_from: str | None = None
    notes: tuple[str, ...] = ()  # what the launcher sets that the doctor does not read
    batch_note: tuple[str, str] | None = None  # ("launch" | "refused", TRL's error) when the batch sizes were relaxed
    ref_is_policy: bool = False  # the script passed the policy object itself as the reference model
    # the reward / value models the script passed as objects, by the config key their folder fills
    # (`reward_model_path`...): (class, its `score` head as 'Linear(64 → 1)' or None when it has none)
    aux_models: dict = field(default_factory=dict)
    # TRL ModelConfig keys the recipe or command line sets for loading the policy (attn_implementation, dtype,
    # load_in_4bit...): {key: (value, where)}; whether they reach the model is facts.settings.unapplied_model_keys
    model_keys: dict = field(default_factory=dict)


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


class Context:
    def __init__(self, config: DoctorConfig, options: Options | None = None, live: Live | None = None):
        self.config = config
        self.options = options or Options()
        self.live = live  # set for a launch command: the script's own objects
        self._cache: dict[str, tuple[bool, Any]] = {}
        self._workdir: Path | None = None
        self._cleanups: list[Callable[[], None]] = []
        self.events: Callable[[str, dict], None] | None = None  # the worker's channel to the printing process

    # -- housekeeping -------------------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        """A private temporary folder (twin checkpoints, dataset cache, trainer output), removed by close(). In a
        check's worker it lies inside the check's folder, which the printing process owns and removes whatever
        happens to the worker; in-process (the API, the callback) it is a `trl-doctor-*` folder of its own, with its
        owner recorded so that the next check removes it if this process is killed (trl_doctor._tmp)."""
        if self._workdir is None:
            from . import _tmp

            inside = os.environ.get(_tmp.DIR_ENV)
            if inside and Path(inside).is_dir():
                self._workdir = Path(tempfile.mkdtemp(prefix="work-", dir=inside))
            else:
                self._workdir = _tmp.new_folder().path
        return self._workdir

    def emit(self, kind: str, payload: dict) -> None:
        """Tell the supervising process something (a trainer run starts, its stage); nothing without one."""
        if self.events is not None:
            self.events(kind, payload)

    def on_close(self, fn: Callable[[], None]) -> None:
        self._cleanups.append(fn)

    def close(self) -> None:
        while self._cleanups:
            try:
                self._cleanups.pop()()
            except Exception:
                pass
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def trainer(self) -> str:
        return self.config.trainer

    # -- raw files (cheap) --------------------------------------------------------------------------
    def read_json(self, path: Path) -> dict | None:
        """A JSON file next to the model or tokenizer, or None when it does not exist."""
        return _read_json(self, Path(path))

    def model_file(self, name: str) -> Path:
        return self.config.model.path / name

    def tokenizer_file(self, name: str) -> Path:
        return self.config.tokenizer.path / name

    # -- versions (no heavy import) -----------------------------------------------------------------
    def version(self, dist: str) -> str | None:
        from ._env import package_version

        return package_version(dist)

    # -- tokenizer ----------------------------------------------------------------------------------
    @lazy
    def tokenizer(self):
        """The tokenizer the trainer will hold: the script's own, or loaded from disk with `added_tokens` added as
        special tokens."""
        if self.live is not None and self.live.tokenizer is not None:
            return self.live.tokenizer
        tok = self.disk_tokenizer_copy()
        if self.config.added_tokens:
            tok.add_tokens(list(self.config.added_tokens), special_tokens=True)
        return tok

    def disk_tokenizer_copy(self):
        """A fresh load of the tokenizer exactly as it is on disk."""
        from transformers import AutoTokenizer

        from ._inputs import check_model_config, check_tokenizer_files

        path = self.config.tokenizer.path
        check_tokenizer_files(path, remote_code=self.options.trust_remote_code)
        if (path / "config.json").is_file():
            check_model_config(path)  # AutoTokenizer reads it too, and would name the tokenizer for its faults
        try:
            return AutoTokenizer.from_pretrained(
                str(path), trust_remote_code=self.options.trust_remote_code, local_files_only=True
            )
        except Exception as exc:  # transformers raises many types here; all mean "cannot read this input"
            check_tokenizer_files(path, remote_code=self.options.trust_remote_code, large=True)  # names the file
            raise InputError(f"{path}: cannot load the tokenizer: {_one_line(exc)}") from None

    # -- model config -------------------------------------------------------------------------------
    @lazy
    def model_config(self):
        if self.live is not None and self.live.model is not None:
            return _base_model(self.live.model).config
        from transformers import AutoConfig

        from ._inputs import check_model_config

        path = self.config.model.path
        check_model_config(path)
        try:
            return AutoConfig.from_pretrained(
                str(path), trust_remote_code=self.options.trust_remote_code, local_files_only=True
            )
        except Exception as exc:
            adapter = path / "adapter_config.json"
            if adapter.is_file() and not (path / "config.json").is_file():
                try:
                    base = json.loads(adapter.read_text()).get("base_model_name_or_path")
                except (OSError, ValueError):
                    base = None
                raise InputError(
                    f"{path}: is a PEFT adapter (adapter_config.json, base model {base!r}), not a model: TRL's trainers "
                    "load a full model from model_name_or_path; merge the adapter into its base (peft's "
                    "merge_and_unload + save_pretrained) and point model_name_or_path at the merged folder"
                ) from None
            raise InputError(f"{path / 'config.json'}: cannot load the model config: {_one_line(exc)}") from None

    @lazy
    def generation_config(self):
        """The model's GenerationConfig, or None when it ships no generation_config.json."""
        if not self.model_file("generation_config.json").is_file():
            return None
        from transformers import GenerationConfig

        from ._inputs import check_generation_config

        check_generation_config(self.model_file("generation_config.json"))
        try:
            return GenerationConfig.from_pretrained(str(self.config.model.path), local_files_only=True)
        except Exception as exc:
            raise InputError(f"{self.model_file('generation_config.json')}: {_one_line(exc)}") from None

    # -- trainer config -----------------------------------------------------------------------------
    @lazy
    def trainer_config_info(self) -> TrainerConfigInfo:
        from .facts.trl import config_class, script_fields

        if self.live is not None and self.live.args is not None:
            return self._live_config_info(self.live)

        trl_version = self.version("trl") or "not installed"
        cls = config_class(self.trainer)
        if cls is None:
            return TrainerConfigInfo(
                class_name=f"{self.trainer.upper()}Config",
                trl_version=trl_version,
                error=f"trl {trl_version} has no {self.trainer.upper()}Config",
            )
        import dataclasses
        import difflib

        from .facts.parsing import parse_as_trl

        own = {f.name for f in dataclasses.fields(cls) if f.init}
        parsed = parse_as_trl(self.trainer, self.config.raw)
        known = own | script_fields() | set(DOCTOR_KEYS) | set(SCRIPT_EXTRA_KEYS) | (parsed.keys if parsed else set())
        info = TrainerConfigInfo(class_name=cls.__name__, trl_version=trl_version)
        if parsed is not None:
            # what TRL's parser makes of the values is what every rule judges: `2e-5` is a float to TRL
            info.parser, info.typed, info.type_errors = parsed.parser, dict(parsed.typed), dict(parsed.errors)
            self.config.raw.update(parsed.typed)
        kwargs = {}
        for key, value in self.config.raw.items():
            if key in info.type_errors:
                continue  # trainer-config reports it; the config object is built without it
            if key in own:
                kwargs[key] = value
            elif key not in known:
                info.unknown_keys.append(key)
                # only a really close name is a hint (a typo): renamed and removed keys are the migration table's
                near = [n for n in difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.8) if abs(len(n) - len(key)) <= 2]
                if near:
                    info.suggestions[key] = near[0]
        # Relative output paths would land in the current folder; the doctor never writes there.
        kwargs.setdefault("output_dir", str(self.workdir / "output"))
        if "use_cpu" not in kwargs and not self._has_cuda():
            # transformers rejects bf16 "on this setup" when it sees no GPU; the config is meant for the
            # training machine, so judge it as it would run here. Precision rules check the real GPU.
            kwargs["use_cpu"] = True
            info.injected["use_cpu"] = True
            if kwargs.get("tf32"):
                # TrainingArguments refuses tf32 without an Ampere GPU here; the launch machine's GPUs decide
                # (precision-and-attention, with --target), and the probes run with what this machine has
                kwargs["tf32"] = None
                info.injected["tf32"] = None
        if kwargs.get("deepspeed"):
            if package_version("deepspeed") is None:
                # TrainingArguments builds its DeepSpeed plugin at construction; whether the launch machine has
                # deepspeed is distributed-setup's verdict, not a config the doctor cannot read
                kwargs["deepspeed"] = None
                info.injected["deepspeed"] = None
        info.passed_keys = sorted(kwargs)
        try:
            info.config = cls(**kwargs)
        except Exception as exc:  # TRL's __post_init__ raises ValueError, TypeError, ImportError...
            info.error = f"{type(exc).__name__}: {_one_line(exc)}"
            self._build_for_the_launch(cls, kwargs, info)
        return info

    def _live_config_info(self, live: Live) -> TrainerConfigInfo:
        """The config object the script built, as the file view would have built it: at the launch's process
        count (with a note) when TRL refuses the batch at one process, and rejected when it refuses it there too."""
        args = live.args
        info = TrainerConfigInfo(type(args).__name__, self.version("trl") or "not installed", config=args,
                                 passed_keys=sorted(k for k in self.config.raw if hasattr(args, k)),
                                 injected={k: v for k, (v, _) in live.relaxed.items()
                                           if k != "per_device_train_batch_size"})
        if live.batch_note is not None:
            kind, error = live.batch_note
            if kind == "launch":
                from .facts.launch import launch

                info.launch_note = (f"built with the global batch of the launch's {launch(self).processes} processes "
                                    f"seen from one process; at 1 process TRL says: ValueError: {error}")
            else:
                info.config, info.error = None, f"ValueError: {error}"
        return info

    def _build_for_the_launch(self, cls, kwargs: dict, info: TrainerConfigInfo) -> None:
        """TRL checks the batch arithmetic against the processes it runs in: one, here. For a launch of N
        processes, build the config once more with the same global batch seen from one process (per-device
        batches times N); when that is accepted, the error was only this machine's process count and the
        config object serves the other rules (batch-geometry judges the arithmetic at N)."""
        from .facts.launch import global_batch_kwargs, is_geometry_error, launch

        if not is_geometry_error(info.error or ""):
            return
        the_launch = launch(self)
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

    @lazy
    def trainer_config(self):
        info = self.trainer_config_info
        if info.config is None:
            raise Unavailable(f"TRL's {info.class_name} rejects this config (see the trainer-config rule)")
        return info.config

    # -- models -------------------------------------------------------------------------------------
    @lazy
    def meta_model(self):
        """The candidate model's structure on the meta device: exact shapes and parameter counts, no memory."""
        if self.live is not None and self.live.model is not None:
            return _base_model(self.live.model)
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"), self._building():
            return AutoModelForCausalLM.from_config(self.model_config, trust_remote_code=self.options.trust_remote_code)

    @lazy
    def twin(self):
        from ._twin import build_twin

        with self._building():
            return build_twin(self.model_config, trust_remote_code=self.options.trust_remote_code)

    @contextlib.contextmanager
    def _building(self):
        """A config transformers reads but cannot build a model from (`rope_scaling: {type: 5}`) stops the job in
        from_pretrained too: an input error naming config.json. ValueError, ImportError and OSError keep their
        meanings for the rules (an architecture the auto class lacks, a missing package, remote code)."""
        try:
            yield
        except (KeyError, TypeError, IndexError, AttributeError, ZeroDivisionError) as exc:
            raise InputError(f"{self.model_file('config.json')}: transformers {self.version('transformers')} cannot "
                             f"build the model from it: {type(exc).__name__}: {_one_line(exc)}") from None

    @lazy
    def twin_dir(self) -> Path:
        """The twin saved with its generation config, for code (the smoke step) that loads it from a path. The
        tokenizer is not saved beside it: the trainer run is lent `self.tokenizer` (trainer_run/lent.py)."""
        out = self.workdir / "twin"
        self.twin.save_pretrained(str(out), safe_serialization=True)
        gen = self.generation_config
        if gen is not None:
            gen.save_pretrained(str(out))
        return out

    # -- dataset ------------------------------------------------------------------------------------
    @lazy
    def dataset(self):
        """The training split, loaded offline into a private cache folder (or the script's own)."""
        if self.live is not None and self.live.dataset is not None:
            return self.live.dataset
        if self.live is not None:
            raise Unavailable(f"{self.live.command}: the trainer was given no train_dataset")
        cfg = self.config
        split = cfg.get("dataset_train_split") or "train"
        cache = str(self.workdir / "datasets-cache")
        try:
            import datasets

            if cfg.dataset_file is not None:
                from ._config import DATASET_SUFFIXES
                from ._inputs import check_dataset_file

                check_dataset_file(cfg.dataset_file)

                builder = DATASET_SUFFIXES[cfg.dataset_file.suffix.lower()]
                return datasets.load_dataset(builder, data_files=str(cfg.dataset_file), split="train", cache_dir=cache)
            if cfg.dataset_dir is not None:
                if (cfg.dataset_dir / "dataset_info.json").is_file() or (cfg.dataset_dir / "dataset_dict.json").is_file():
                    ds = datasets.load_from_disk(str(cfg.dataset_dir))
                    return ds[split] if isinstance(ds, datasets.DatasetDict) else ds
                return datasets.load_dataset(str(cfg.dataset_dir), cfg.get("dataset_config"), split=split, cache_dir=cache)
            if isinstance(cfg.get("datasets"), list) and cfg.get("datasets"):
                return _mixture(cfg, cache)
            name = cfg.get("dataset_name")
            if name is None:
                raise Unavailable("the config names no dataset (`dataset_name`, `dataset_path` or a `datasets:` mixture)")
            return datasets.load_dataset(name, cfg.get("dataset_config"), split=split)
        except (InputError, Unavailable):
            raise
        except Exception as exc:
            where = cfg.dataset_file or cfg.dataset_dir or cfg.get("dataset_name")
            raise InputError(f"{where}: cannot load the dataset offline: {_one_line(exc)}") from None

    def _has_cuda(self) -> bool:
        return has_cuda(self.options)

    # -- device -------------------------------------------------------------------------------------
    @lazy
    def device(self) -> str:
        want = self.options.device
        if want == "cpu":
            return "cpu"
        import torch

        has_cuda = torch.cuda.is_available()
        if want == "cuda" and not has_cuda:
            raise Unavailable("--device cuda was given but torch sees no CUDA GPU")
        return "cuda" if has_cuda else "cpu"

    def need(self, name: str) -> Any:
        """Resolve one of a rule's declared needs (raises Unavailable or InputError)."""
        if name == "trainer_run":
            return None  # an ordering need: the rule reads the run itself, and reports why it could not run
        return getattr(self, name)


def _mixture(cfg, cache: str):
    """TRL's `datasets:` mixture (DatasetMixtureConfig) as `trl <trainer>` loads it (trl.scripts.utils.get_dataset):
    each entry loaded offline, its `columns` kept, the train splits concatenated. Local `path` / `data_files` are
    read relative to the config file."""
    import datasets

    parts = []
    for i, entry in enumerate(cfg.get("datasets")):
        if not isinstance(entry, dict) or not entry.get("path"):
            raise InputError(f"{cfg.path}: `datasets` entry {i + 1} needs a `path` (a hub id, a folder or a builder "
                             "such as json)")
        files = entry.get("data_files")
        if isinstance(files, str):
            files = local_path(files, cfg.base_dir)
        elif isinstance(files, list):
            files = [local_path(f, cfg.base_dir) if isinstance(f, str) else f for f in files]
        path = entry["path"]
        local = cfg.base_dir / path
        ds = datasets.load_dataset(str(local) if local.exists() else path, entry.get("name"), data_dir=entry.get("data_dir"),
                                   data_files=files, split=entry.get("split") or "train", cache_dir=cache)
        if entry.get("columns"):
            ds = ds.select_columns(entry["columns"])
        parts.append(ds)
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def has_cuda(options: Options) -> bool:
    """Whether the check may use a CUDA GPU here (`--device cpu` says no)."""
    if options.device == "cpu":
        return False
    import torch

    return torch.cuda.is_available()


def _base_model(model):
    """A PEFT-wrapped model's base model; any other model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if "trust_remote_code" in text:
        text = "it contains custom code (auto_map) that trl-doctor runs only with --trust-remote-code"
    return text if len(text) <= 400 else text[:397] + "..."


@fact
def _read_json(ctx: Context, path: Path) -> dict | None:
    if not path.is_file():
        return None
    from ._inputs import check_generation_config, read_json_file

    data = check_generation_config(path) if path.name == "generation_config.json" else read_json_file(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data
