"""The ground truth of the accuracy harness: run a launch command's script for real, for one optimizer step on the CPU.

`python tools/accuracy/truth.py -- COMMAND...` runs COMMAND's Python script in this process (the launcher's own
processes are left out: `accelerate launch X.py`, `torchrun X.py` and `trl grpo` run their script once, as the main
process would) with only what a CPU needs changed, each change applied to every TrainingArguments the script builds
and listed on stderr (`truth: changed ...`):

  use_cpu=True, bf16=False, fp16=False, tf32=None  the CPU has no GPU precision
  max_steps=1, save_strategy="no", push_to_hub=False  one optimizer step, nothing saved or pushed
  trainer.push_to_hub(...) called by the script       not called (the hub is the launch machine's network)
  report_to="none"                                   no tracker (a CPU runner has none)
  use_vllm=False                                     vLLM needs a GPU
  use_liger_kernel=False, use_liger_loss=False       Liger's Triton kernels need a GPU
  dataloader_num_workers=0, deepspeed=None           no worker processes, no DeepSpeed engine
  attn_implementation="sdpa" for FlashAttention     its kernels need a GPU (from_pretrained's keyword)
  model.to("cuda") / model.cuda() -> stays on cpu   a script that moves its model by hand (no CUDA here)
  get_peak_flops_per_device -> None                 AsyncGRPOTrainer's MFU probe asks CUDA for the device's name
  max_completion_length / response_length <= 16      CPU time (the lengths change no batch arithmetic)
  total_episodes = one batch                         PPO-style trainers (trl < 0.20) stop on episodes, not max_steps

It also shows what trains wrong without stopping (`truth: wrong: ...`): a recipe key the script's TrlParser drops
(trl before 0.19 discards a `--config` key no dataclass of it has); a LoRA target name that matches no module
of the model (PEFT stops only when none of them matches); a PPO-style rollout (PPO, RLOO before trl 0.22) whose
responses go on past their eos token while no `stop_token` truncates them, so the reward model scores what follows.

And it says which trainer the script built (`truth: trainer ClassName`, from transformers' Trainer constructor): a
script that ends without building one trains nothing (TRL's best_of_n notebook samples and scores only).

Everything else is the script's own: its parser, model loading, dataset preparation, rewards and trainer. The exit
status is the script's (0 when it trained; 1 with the error's last line on stderr when it raised).
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

CHANGES = {"use_cpu": True, "bf16": False, "fp16": False, "tf32": None, "max_steps": 1, "save_strategy": "no",
           "push_to_hub": False, "report_to": "none", "use_vllm": False, "dataloader_num_workers": 0,
           "deepspeed": None, "use_liger_kernel": False, "use_liger_loss": False}
CAPPED = {"max_completion_length": 16, "response_length": 16}  # the longest generation the CPU step makes


def _patch_training_arguments() -> None:
    from transformers import TrainingArguments

    original = TrainingArguments.__post_init__
    seen: set[tuple[str, str]] = set()

    def __post_init__(self):
        for key in CAPPED:  # generating hundreds of tokens per completion on the CPU takes minutes a step
            if isinstance(getattr(self, key, None), int) and getattr(self, key) > CAPPED[key]:
                print(f"truth: changed {key}={getattr(self, key)!r} -> {CAPPED[key]!r} (CPU time)", file=sys.stderr)
                setattr(self, key, CAPPED[key])
        episodes = getattr(self, "total_episodes", None)  # PPO-style trainers count episodes, not max_steps
        batch = getattr(self, "per_device_train_batch_size", 1) * getattr(self, "gradient_accumulation_steps", 1)
        if hasattr(self, "total_episodes") and episodes != batch:
            print(f"truth: changed total_episodes={episodes!r} -> {batch} (one batch: one optimizer step)",
                  file=sys.stderr)
            self.total_episodes = batch
        _patch_ppo_rollouts()
        for key, value in CHANGES.items():
            if hasattr(self, key) and getattr(self, key) != value:
                if (key, repr(getattr(self, key))) not in seen:
                    seen.add((key, repr(getattr(self, key))))
                    print(f"truth: changed {key}={getattr(self, key)!r} -> {value!r}", file=sys.stderr)
                setattr(self, key, value)
        original(self)

    TrainingArguments.__post_init__ = __post_init__


def _patch_from_pretrained() -> None:
    """FlashAttention asked of from_pretrained (a model class's, or an auto class's as TRL loads a model path) -> sdpa."""
    from transformers import PreTrainedModel
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    for owner in (PreTrainedModel, _BaseAutoModelClass):
        original = owner.__dict__["from_pretrained"].__func__

        def from_pretrained(cls, *args, _original=original, **kwargs):
            asked = kwargs.get("attn_implementation")
            if isinstance(asked, str) and asked.startswith("flash"):
                print(f"truth: changed attn_implementation={asked!r} -> 'sdpa'", file=sys.stderr)
                kwargs["attn_implementation"] = "sdpa"
            config = kwargs.get("config")  # an auto class moves the keyword onto the config it passes on
            held = getattr(config, "_attn_implementation_internal", None) or getattr(config, "_attn_implementation", None)
            if isinstance(held, str) and held.startswith("flash"):
                print(f"truth: changed attn_implementation={held!r} -> 'sdpa'", file=sys.stderr)
                for name in ("_attn_implementation_internal", "_attn_implementation"):
                    try:
                        setattr(config, name, "sdpa")
                    except (AttributeError, TypeError):
                        continue
                    break
            return _original(cls, *args, **kwargs)

        owner.from_pretrained = classmethod(from_pretrained)


def _patch_trainer_init() -> None:
    """Name each trainer the script constructs: every TRL trainer from 0.12 is a transformers Trainer, though some
    never call its constructor (PPOTrainer and RLOOTrainer before 0.22 set themselves up): `__new__` sees them all."""
    from transformers import Trainer

    def __new__(cls, *args, **kwargs):
        print(f"truth: trainer {cls.__name__}", file=sys.stderr)
        return object.__new__(cls)

    Trainer.__new__ = __new__


def _patch_cuda_moves() -> None:
    """A script's own `model.to("cuda")` / `model.cuda()` (a notebook written for one GPU) stops at once on a machine
    without CUDA ("Torch not compiled with CUDA enabled"): the module stays on the CPU, with any dtype the same call
    asks. Only when CUDA is absent; tensors are left alone (TRL moves them to the model's device itself)."""
    import torch

    if torch.cuda.is_available():
        return
    to = torch.nn.Module.to

    def moved(self, *args, **kwargs):
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        if device is None or device.type != "cuda":
            return to(self, *args, **kwargs)
        print(f"truth: changed device={str(device)!r} -> 'cpu' ({type(self).__name__}.to: no CUDA)", file=sys.stderr)
        keep = {"dtype": dtype, "memory_format": memory_format}
        return to(self, "cpu", non_blocking=non_blocking, **{k: v for k, v in keep.items() if v is not None})

    def on_cpu(self, device=None):
        print(f"truth: changed device='cuda' -> 'cpu' ({type(self).__name__}.cuda: no CUDA)", file=sys.stderr)
        return self

    torch.nn.Module.to, torch.nn.Module.cuda = moved, on_cpu


def _patch_peak_flops() -> None:
    """AsyncGRPOTrainer (trl >= 1.10) asks CUDA for the device's name at construction, for its MFU metric
    (`trl.trainer.utils.get_peak_flops_per_device`): without CUDA that stops at once ("Torch not compiled with CUDA
    enabled"). Here it answers None, TRL's own answer for a device it does not know (MFU off). Only without CUDA."""
    import importlib
    import torch

    if torch.cuda.is_available():
        return
    try:
        utils = importlib.import_module("trl.trainer.utils")
    except ImportError:
        return
    if not hasattr(utils, "get_peak_flops_per_device"):
        return

    def no_peak(*args, **kwargs):
        print("truth: changed peak_flops='CUDA device name' -> None (the MFU metric asks CUDA at construction)",
              file=sys.stderr)
        return None

    utils.get_peak_flops_per_device = no_peak
    for name in ("trl.experimental.async_grpo.async_grpo_trainer",):  # bound by `from ... import` at its import
        try:
            module = importlib.import_module(name)
        except Exception:
            continue
        if hasattr(module, "get_peak_flops_per_device"):
            module.get_peak_flops_per_device = no_peak


def _patch_push_to_hub() -> None:
    """A script's own `trainer.push_to_hub(...)` after training (TRL's rloo.py) needs the hub's network: not called."""
    from transformers import Trainer

    def push_to_hub(self, *args, **kwargs):
        print("truth: changed push_to_hub()=called -> not called (no network)", file=sys.stderr)

    Trainer.push_to_hub = push_to_hub


_PPO_STYLE = ("trl.trainer.ppo_trainer", "trl.trainer.rloo_trainer", "trl.experimental.ppo.ppo_trainer")
_rollout: dict = {}


def _patch_ppo_rollouts() -> None:
    """PPO-style trainers generate with `batch_generation` (bound in their module) and truncate each response after
    `stop_token_id` only when it is set: a response that goes on past its eos is scored whole. Patched when the
    script builds its config (the trainer's module is imported by then; importing it here could change what the
    script sees)."""
    for name in _PPO_STYLE:
        module = sys.modules.get(name)
        if module is None or not hasattr(module, "batch_generation") or getattr(module, "_truth_patched", False):
            continue
        module._truth_patched = True
        for cls in (getattr(module, n, None) for n in ("PPOTrainer", "RLOOTrainer")):
            if cls is not None and "train" in cls.__dict__:
                def train(self, *args, _original=cls.train, **kwargs):
                    _rollout["trainer"] = self
                    return _original(self, *args, **kwargs)
                cls.train = train
        original = module.batch_generation

        def batch_generation(model, queries, *args, _original=original, **kwargs):
            out = _original(model, queries, *args, **kwargs)
            if not _rollout.get("looked"):
                _rollout["looked"] = True
                _look_past_eos(_original, model, queries, args, kwargs)
            return out

        module.batch_generation = batch_generation


def _look_past_eos(original, model, queries, args, kwargs) -> None:
    """One more rollout of the first query in which the policy's third token is made eos (a random stand-in seldom
    samples it): where the response goes on past it and no stop_token is set, the reward model scores what follows.
    The hook is the harness's own, not trl-doctor's `facts.trainer_run.execute.force_token`: the ground truth must not
    lean on the code it judges."""
    trainer = _rollout.get("trainer")
    if trainer is None or getattr(trainer.args, "stop_token_id", None) is not None:
        return
    tok = trainer.processing_class
    eos, pad, calls = tok.eos_token_id, tok.pad_token_id, [0]

    def force(module, inputs, output):
        calls[0] += 1
        if calls[0] == 3:
            output.logits[:, -1, :] = -1e9
            output.logits[:, -1, eos] = 1e9
        return output

    handle = model.register_forward_hook(force)
    try:
        row = original(model, queries[:1], *args, **kwargs)[0][0, queries.shape[1]:].tolist()
    finally:
        handle.remove()
    if eos in row and any(t not in (pad, eos) for t in row[row.index(eos) + 1:]):
        print(f"truth: wrong: a PPO-style response goes on past its eos token (id {eos}, forced as its third token: "
              f"{row}) and is scored whole: no stop_token truncates it", file=sys.stderr)


def _patch_peft() -> None:
    """Say which LoRA target names match no module (a list item matches a module's name or its last components)."""
    try:
        import peft
        import peft.mapping_func as mapping
    except ImportError:
        return
    original = mapping.get_peft_model

    def get_peft_model(model, config, *args, **kwargs):
        targets = getattr(config, "target_modules", None)
        if isinstance(targets, (list, set, tuple)):
            names = [n for n, _ in model.named_modules()]
            for target in sorted(targets):
                if not any(n == target or n.endswith("." + target) for n in names):
                    print(f"truth: wrong: LoRA target {target!r} matches no module of {type(model).__name__}",
                          file=sys.stderr)
        return original(model, config, *args, **kwargs)

    mapping.get_peft_model = get_peft_model
    peft.get_peft_model = get_peft_model


def _patch_trl_parser() -> None:
    """Say which recipe keys the script's TrlParser drops: trl before 0.19 takes a `--config` file's keys into its
    dataclasses and discards the rest without a word (from 0.19 it stops on them, an error the run shows itself)."""
    try:
        import trl

        parser_cls = trl.TrlParser
    except Exception:
        return
    if "parse_args_and_config" not in vars(parser_cls):
        return
    import dataclasses
    import inspect

    original = parser_cls.parse_args_and_config
    signature = inspect.signature(original)

    def parse_args_and_config(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs).arguments
        argv = list(bound.get("args") or sys.argv[1:])
        if bound.get("return_remaining_strings") or "--config" not in argv[:-1]:
            return out
        import yaml

        with open(argv[argv.index("--config") + 1]) as handle:
            recipe = yaml.safe_load(handle) or {}
        types = [t for t in self.dataclass_types if dataclasses.is_dataclass(t)]
        fields = {f.name for t in types for f in dataclasses.fields(t)} | {"env"}
        names = ", ".join(t.__name__ for t in types)
        for key in recipe:
            if key not in fields:
                print(f"truth: wrong: recipe key {key!r} is dropped by the script's TrlParser (no field of {names})",
                      file=sys.stderr)
        return out

    parser_cls.parse_args_and_config = parse_args_and_config


def _script_of(argv: list[str]) -> tuple[str, str | None, list[str]]:
    """("path" | "module" | "cli", the script, module or console script, its arguments) for a python / accelerate / torchrun / trl command."""
    head = os.path.basename(argv[0])
    if head.startswith("python"):
        i = 1
        while argv[i] in ("-i", "-u", "-B", "-O", "-OO", "-s", "-E", "-q"):  # flags that take no value
            if argv[i] == "-i":  # an interactive prompt after the run: nothing to train
                print("truth: changed python=-i -> left out (no prompt after the run)", file=sys.stderr)
            i += 1
        if argv[i] == "-m":
            return "module", argv[i + 1], argv[i + 2:]
        return "path", argv[i], argv[i + 1:]
    if head in ("accelerate", "torchrun"):
        print(f"truth: changed launcher={head!r} -> one process (its process count and distributed config, DeepSpeed "
              "or FSDP, left out)", file=sys.stderr)
        rest = argv[2:] if head == "accelerate" else argv[1:]
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            i += 1 if "=" in rest[i] or rest[i] in ("--multi_gpu", "--use_deepspeed", "--use_fsdp", "--cpu") else 2
        if rest[i] == "-m":
            return "module", rest[i + 1], rest[i + 2:]
        return "path", rest[i], rest[i + 1:]
    if head == "trl":  # TRL's own CLI, its parser included (trl 0.15-0.17 parse before reading --config)
        return "cli", "trl", argv[1:]
    raise SystemExit(f"truth: cannot run {argv[0]!r} commands")


def _patch_accelerate_launch() -> None:
    """`trl grpo ...` hands its script to accelerate's launch_command, which starts new processes (without the
    patches above): run the script here instead, once, as the main process."""
    import accelerate.commands.launch as launch

    def launch_command(args):
        print("truth: changed launcher='trl' -> one process (the script run in place of accelerate's launch)",
              file=sys.stderr)
        sys.argv = [args.training_script, *args.training_script_args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(args.training_script)))
        runpy.run_path(args.training_script, run_name="__main__")

    launch.launch_command = launch_command  # before trl.cli is imported: it binds the function as a default


def _run(kind: str, target: str, args: list[str]) -> int | None:
    if kind == "cli":
        from importlib.metadata import entry_points

        _patch_accelerate_launch()
        (entry,) = [ep for ep in entry_points(group="console_scripts") if ep.name == target]
        sys.argv = [target, *args]
        code = entry.load()()
        return code if isinstance(code, int) else None
    sys.argv = [target, *args]
    sys.path.insert(0, os.getcwd() if kind == "module" else os.path.dirname(os.path.abspath(target)))
    if kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")
    return None


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    kind, target, args = _script_of(command)
    _patch_training_arguments()
    _patch_from_pretrained()
    _patch_cuda_moves()
    _patch_peak_flops()
    _patch_push_to_hub()
    _patch_trainer_init()
    _patch_peft()
    _patch_trl_parser()
    try:
        code = _run(kind, target, args)
        if code:
            return code
    except SystemExit as exc:
        return 0 if exc.code in (None, 0) else (exc.code if isinstance(exc.code, int) else 1)
    except BaseException as exc:  # the ground truth is the error itself: its type, message and the script's line
        frames = traceback.extract_tb(exc.__traceback__)
        if os.environ.get("TRL_DOCTOR_TRUTH_TRACE"):  # the whole traceback, to read where a crash came from
            traceback.print_exception(exc, file=sys.stderr)
        # on a line of its own: a progress bar may have left the current one open (tqdm ends it with \r, not \n)
        print(f"\ntruth: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              f"(at {frames[-1].filename}:{frames[-1].lineno})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
