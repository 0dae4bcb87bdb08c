"""The facts layer: each question more than one rule asks, answered once per check and cached on the context.

Rules import the public API (`trl_doctor`) and these modules, never each other or a private engine module.
A fact is a function of the context wrapped in `trl_doctor.cache.fact` (computed on first use, kept for the
check, its InputError / Unavailable kept too); the larger answers are frozen dataclasses. A helper only one rule
uses lives in that rule's module, except where a rule cannot hold it or it reads what its subject's readers read:
`inputs/saving` runs the tokenizer's own save_pretrained in the fence (trl_doctor.runtime, which no rule imports),
`vllm/support` reads TRL's generation modules with `vllm/handover`'s readers, and every reading of the installed
TRL's source lives in `trl/installed` (tools/gen_trl_fields.py shares them).

By subject:

- `inputs/`: the job's inputs as the check loads them: `tokens` (embedding rows, token-id lists), `chat` (the chat
  template, stop tokens, prompts rendered and measured as the trainer does: `prompt_rendering(ctx)`,
  `prompt_lengths(ctx)`), `vision` (a vision-language job's images), `models` (where a model reference resolves,
  parameter counts, a reward or value model's folder as its trainer reads it: `scorer_folder`, `scorer_head`,
  `scorer_tokenizer`), `saving` (whether the tokenizer and model config the trainer saves can be written: the
  tokenizer's own save_pretrained, in the fence), `text` (lines of source text, small JSON files);
- `trl/`: the installed TRL and the packages beside it: `installed` (its classes, its trainers' source and every
  reading of it), `generation` (how its trainer generates), `geometry` (its batch arithmetic, read with `ast` and
  evaluated on a config's numbers), `parsing` (what its parser makes of a config's values), `trainer_config` (the
  config object it builds: `trainer_config(ctx)`), `fields` (what each release's config classes declare, shipped as
  data: `check --static` judges against one release without importing TRL), `versions` (declared requirements
  between the installed ML packages and the known-issues table);
- `launch/`: `launcher` (`launch(ctx)` -> `Launch`: the training processes and where their number comes from, the
  visible GPUs, the accelerate / DeepSpeed / FSDP settings as written; `nvml_gpus(ctx)`) and `settings`
  (`settings(ctx)` -> `Settings`: precision, the policy dtype and where it comes from, lengths, batch numbers, vLLM;
  `config_value(ctx, key)` for any other key), `phases` (what stops a job after its first step: resume, evaluation,
  best model, trackers, the hub, the disk) and `will_run` (`what_will_run(ctx)`: the job as the installed TRL will
  run it, for the report's head; the worker sends it before the first rule);
- `vllm/`: how the installed TRL hands over to vLLM and what vLLM would load (`handover`), the trainer's vLLM server
  (`server`), what the weights go through on their way to vLLM (`support`);
- `rewards`: reward functions: resolving them, calling them as TRL does, judging what they return;
- `memory/`: the job's memory plan (`plan`), the arithmetic over it (`estimate`), and the verdict on the launch
  machine's GPUs (`fit`);
- `trainer_run/`: what the one-step trainer run found.

A fact is asked of any context that implements trl_doctor.interface.CheckContext; one that needs what a context
lacks (TRL's config object under `--static`) raises Unavailable there, and `launch.settings.config_value(ctx, key)`
is the one way to read the value the trainer will see, in every context. A fact several contexts can answer has one
provider per context (the tokens, the model's JSON files, `trl/behaviour`: what the judged TRL release does), and a
rule holds one judgment, in its module, over whichever context runs it.
"""
