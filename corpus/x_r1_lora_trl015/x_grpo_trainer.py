# Reproduction (not a copy) of X-R1's trainer (dhcode-cpp/X-R1 @ 208e0bf534c9, src/x_r1/x_grpo_trainer.py):
# XGRPOTrainer subclasses TRL's GRPOTrainer but never runs GRPOTrainer.__init__. Its own constructor, written from
# TRL's of the time, loads the policy from the name with `args.model_init_kwargs` (a torch.dtype under torch_dtype
# taken as it is), wraps it in the PEFT config, keeps no reference model under PEFT or at beta 0, and then calls
# `Trainer.__init__(self, ...)` itself; after it, TRL's check that the global batch divides by num_generations,
# and the generation config. X-R1 also overrides the input preparation and the loss (its own logging and vLLM
# loading); here TRL 0.15's are inherited, which the one-step ground truth never reaches for this recipe.
from collections import defaultdict

import torch
from accelerate.utils import is_peft_model, set_seed
from peft import get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, Trainer
from trl.models import create_reference_model
from trl.trainer import GRPOTrainer
from trl.trainer.grpo_config import GRPOConfig


class XGRPOTrainer(GRPOTrainer):
    _tag_names = ["trl", "grpo"]

    def __init__(self, model, reward_funcs, args: GRPOConfig = None, train_dataset=None, eval_dataset=None,
                 processing_class=None, reward_processing_classes=None, callbacks=None, optimizers=(None, None),
                 peft_config=None):
        model_init_kwargs = args.model_init_kwargs or {}
        if isinstance(model, str):
            torch_dtype = model_init_kwargs.get("torch_dtype")
            if isinstance(torch_dtype, str) and torch_dtype != "auto":
                model_init_kwargs["torch_dtype"] = getattr(torch, torch_dtype)
            elif not (torch_dtype is None or torch_dtype == "auto" or isinstance(torch_dtype, torch.dtype)):
                raise ValueError(f"Invalid `torch_dtype` passed to `GRPOConfig`: {torch_dtype}.")
            model_init_kwargs["use_cache"] = False if args.gradient_checkpointing else model_init_kwargs.get("use_cache")
            model = AutoModelForCausalLM.from_pretrained(model, **model_init_kwargs)
        if peft_config is not None:
            model = get_peft_model(model, peft_config)

        self.beta = args.beta
        self.ref_model = None if self.beta == 0.0 or is_peft_model(model) else create_reference_model(model)
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(model.config._name_or_path, padding_side="left")
        self.reward_funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        weights = args.reward_weights or [1.0] * len(self.reward_funcs)
        self.reward_weights = torch.tensor(weights, dtype=torch.float32)
        self.reward_processing_classes = [None] * len(self.reward_funcs)

        self.max_prompt_length = args.max_prompt_length
        self.max_completion_length = args.max_completion_length
        self.num_generations = args.num_generations
        self.use_vllm = args.use_vllm
        self._step = 0
        model.warnings_issued["estimate_tokens"] = True
        self._metrics = defaultdict(list)
        self.log_completions = args.log_completions

        Trainer.__init__(self, model=model, args=args, data_collator=lambda features: features,
                         train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=processing_class,
                         callbacks=callbacks, optimizers=optimizers)

        num_processes = self.accelerator.num_processes
        global_batch_size = args.per_device_train_batch_size * num_processes
        possible_values = [n for n in range(2, global_batch_size + 1) if global_batch_size % n == 0]
        if self.num_generations not in possible_values:
            raise ValueError(
                f"The global train batch size ({num_processes} x {args.per_device_train_batch_size}) must be evenly "
                f"divisible by the number of generations per prompt ({self.num_generations}). Given the current train "
                f"batch size, the valid values for the number of generations are: {possible_values}."
            )
        set_seed(args.seed, device_specific=True)
        if self.use_vllm:
            raise NotImplementedError("X-R1 loads vLLM here; this recipe keeps use_vllm: false")
        self.generation_config = GenerationConfig(max_new_tokens=self.max_completion_length, do_sample=True,
                                                  temperature=args.temperature,
                                                  pad_token_id=processing_class.pad_token_id)
        self.model_accepts_loss_kwargs = False
        self.model.add_model_tags(self._tag_names)
        if self.ref_model is not None:
            self.ref_model = self.accelerator.prepare_model(self.ref_model, evaluation_mode=True)
