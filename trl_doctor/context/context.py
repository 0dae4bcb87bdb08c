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

from trl_doctor.cache import fact, lazy
from trl_doctor.context.config import DoctorConfig, local_path
from trl_doctor.errors import InputError, Unavailable
from trl_doctor.options import Options  # noqa: F401  (trl_doctor.Options, the context's options)
from trl_doctor.protocol import Message
from trl_doctor.wording import load_error



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
    eval_dataset: Any = None  # eval_dataset as the script gave it (a Dataset, a dict of them, or None)
    data_collator: Any = None  # the collator transformers' Trainer was given (a subclass's own default included)
    held_tokenizers: dict = field(default_factory=dict)  # another trainer's other tokenizers (capture.hooks.Recorder)
    relaxed: dict = field(default_factory=dict)  # settings let through on this machine: {key: (set to, why)}
    machine_relaxed: dict = field(default_factory=dict)  # launch-machine settings outside TRL's config: {what: (asked, why)}
    recipe: str | None = None  # the config file the script was given (--config), when there is one
    recipe_keys: tuple[str, ...] = ()  # the keys that file sets
    # the dataclasses of the script's TrlParser (capture.hooks.Recorder); None when no TrlParser parsed the recipe
    parser_types: tuple | None = None
    processes: int | None = None  # training processes the launcher starts, when it says
    world: int = 1  # the world size the script ran at: the launch's processes as rank 0 sees them, or 1 (capture/world.py)
    processes_from: str | None = None
    machines: int | None = None  # machines they spread over (accelerate --num_machines, torchrun --nnodes)
    machines_from: str | None = None
    notes: tuple[str, ...] = ()  # what the launcher sets that the doctor does not read
    batch_note: tuple[str, str] | None = None  # ("launch" | "refused", TRL's error) when the batch sizes were relaxed
    ref_is_policy: bool = False  # the script passed the policy object itself as the reference model
    # the reward / value models the script passed as objects, by the config key their folder fills
    # (`reward_model_path`...): (class, its `score` head as 'Linear(64 → 1)' or None when it has none)
    aux_models: dict = field(default_factory=dict)
    # TRL ModelConfig keys the recipe or command line sets for loading the policy (attn_implementation, dtype,
    # load_in_4bit...): {key: (value, where)}; whether they reach the model is
    # facts.launch.settings.unapplied_model_keys
    model_keys: dict = field(default_factory=dict)
    # the script passed a peft_config to the trainer (besides a model it may have wrapped with PEFT itself)
    peft_config_given: bool = False
    # TRL's AsyncGRPOTrainer as its __init__ built it (trl_doctor.facts.trl.async_grpo.Built); None for other trainers
    async_grpo: Any = None
    # the TRL parent whose __init__ the captured subclass replaced (its name), and how far its own construction ran:
    # "train" (stopped at train(), the trainer as built), or the error it raised here (trl_doctor.capture.hooks)
    bypassed: str | None = None
    built: str | None = None




class Context:
    """The full check's context (trl_doctor.interface.CheckContext, kind `full`): what a rule's `check` reads, in the
    check's worker (or in the caller's process for a built trainer), with the ML stack importable.

    Besides the interface (`config`, `options`, `live`, `trainer`, `version`, the facts' cache), it loads on first
    use, once, the inputs a rule's `needs` names: `tokenizer`, `model_config`, `generation_config`, `meta_model`,
    `twin`, `dataset` (and `eval_dataset`); `read_json`, `model_file` and `tokenizer_file` read the files beside
    the model. It owns a private `workdir` and the worker's event channel (`emit`); `close` removes what it made.
    A loader that fails (InputError, Unavailable) remembers it: the next rule asking gets the same answer free."""

    kind = "full"

    def __init__(self, config: DoctorConfig, options: Options | None = None, live: Live | None = None):
        self.config = config
        self.options = options or Options()
        self.live = live  # set for a launch command: the script's own objects
        self._cache: dict[str, tuple[bool, Any]] = {}
        self._workdir: Path | None = None
        self._cleanups: list[Callable[[], None]] = []
        self.events: Callable[[Message], None] | None = None  # the worker's channel to the printing process

    # -- housekeeping -------------------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        """A private temporary folder (twin checkpoints, dataset cache, trainer output), removed by close(). In a
        check's worker it lies inside the check's folder, which the printing process owns and removes whatever
        happens to the worker; in-process (the API, the callback) it is a `trl-doctor-*` folder of its own, with its
        owner recorded so that the next check removes it if this process is killed (trl_doctor.runtime.tmp)."""
        if self._workdir is None:
            from trl_doctor.runtime import tmp as _tmp

            inside = os.environ.get(_tmp.DIR_ENV)
            if inside and Path(inside).is_dir():
                self._workdir = Path(tempfile.mkdtemp(prefix="work-", dir=inside))
            else:
                self._workdir = _tmp.new_folder().path
        return self._workdir

    def emit(self, message: Message) -> None:
        """Tell the supervising process something (a trainer run starts, its stage); nothing without one."""
        if self.events is not None:
            self.events(message)

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
        from trl_doctor.context.env import package_version

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

        from trl_doctor.context.inputs import check_model_config, check_tokenizer_files

        path = self.config.tokenizer.path
        check_tokenizer_files(path, remote_code=self.options.trust_remote_code)
        if (path / "config.json").is_file():
            check_model_config(path)  # AutoTokenizer reads it too, and would name the tokenizer for its faults
        try:
            with _collector_paused():
                return AutoTokenizer.from_pretrained(
                    str(path), trust_remote_code=self.options.trust_remote_code, local_files_only=True
                )
        except Exception as exc:  # transformers raises many types here; all mean "cannot read this input"
            check_tokenizer_files(path, remote_code=self.options.trust_remote_code, large=True)  # names the file
            raise InputError(f"{path}: cannot load the tokenizer: {load_error(exc, 400)}") from None

    # -- model config -------------------------------------------------------------------------------
    @lazy
    def model_config(self):
        if self.live is not None and self.live.model is not None:
            return _base_model(self.live.model).config
        from transformers import AutoConfig

        from trl_doctor.context.inputs import check_model_config

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
            raise InputError(f"{path / 'config.json'}: cannot load the model config: {load_error(exc, 400)}") from None

    @lazy
    def generation_config(self):
        """The model's GenerationConfig, or None when it ships no generation_config.json."""
        if not self.model_file("generation_config.json").is_file():
            return None
        from transformers import GenerationConfig

        from trl_doctor.context.inputs import check_generation_config

        check_generation_config(self.model_file("generation_config.json"))
        try:
            return GenerationConfig.from_pretrained(str(self.config.model.path), local_files_only=True)
        except Exception as exc:
            raise InputError(f"{self.model_file('generation_config.json')}: {load_error(exc, 400)}") from None

    # -- models -------------------------------------------------------------------------------------
    @lazy
    def meta_model(self):
        """The candidate model's structure on the meta device: exact shapes and parameter counts, no memory."""
        if self.live is not None and self.live.model is not None:
            return _base_model(self.live.model)
        import torch

        from trl_doctor.context.twin import auto_class

        with torch.device("meta"), self._building():
            return auto_class(self.model_config).from_config(self.model_config,
                                                              trust_remote_code=self.options.trust_remote_code)

    @lazy
    def twin(self):
        from trl_doctor.context.twin import build_twin

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
                             f"build the model from it: {type(exc).__name__}: {load_error(exc, 400)}") from None

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
                from trl_doctor.context.config import DATASET_SUFFIXES
                from trl_doctor.context.inputs import check_dataset_file

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
            raise InputError(f"{where}: cannot load the dataset offline: {load_error(exc, 400)}") from None

    @lazy
    def eval_dataset(self):
        """The eval_dataset the script gave the trainer. Only a launch command or a built trainer says which: a config
        file names a test split that a script may or may not pass (TRL's own scripts pass it only with eval_strategy)."""
        if self.live is None:
            raise Unavailable("a config file does not say which eval_dataset the trainer is given")
        if self.live.eval_dataset is None:
            raise Unavailable(f"{self.live.command}: the trainer was given no eval_dataset")
        return self.live.eval_dataset

    @property
    def has_cuda(self) -> bool:
        """Whether the check may use a CUDA GPU here (--device and torch's view)."""
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
        """Load one of the context's inputs by name (raises Unavailable or InputError); trl_doctor.engine.build_need
        resolves a rule's needs."""
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


@contextlib.contextmanager
def _collector_paused():
    """The cyclic garbage collector off for one load. transformers 5 reads a tokenizer.json with Python's json
    module (twice for a tokenizer saved by transformers 5) into hundreds of thousands of dicts and lists, freed by
    reference counting moments later; the collections their allocation triggers walked the whole heap (the ML
    stack's modules) each time: half the CPU time of loading Qwen's 151k-token tokenizer (0.75 s of 1.5 s on a
    2-core machine). The load makes almost no cyclic garbage; the next collection after it frees what there is."""
    import gc

    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def has_cuda(options: Options) -> bool:
    """Whether the check may use a CUDA GPU here (`--device cpu` says no)."""
    if options.device == "cpu":
        return False
    import torch

    return torch.cuda.is_available()


def _base_model(model):
    """A PEFT-wrapped model's base model; any other model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model



@fact
def _read_json(ctx: Context, path: Path) -> dict | None:
    if not path.is_file():
        return None
    from trl_doctor.context.inputs import check_generation_config, read_json_file

    data = check_generation_config(path) if path.name == "generation_config.json" else read_json_file(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data
