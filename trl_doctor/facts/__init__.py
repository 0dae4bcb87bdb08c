"""The facts layer: each question more than one rule asks, answered once per check and cached on the context.

Rules import the public API (`trl_doctor`) and these modules, never each other or a private engine module.
A fact is a function of the context wrapped in `trl_doctor.cache.fact` (computed on first use, kept for the
check, its InputError / Unavailable kept too); the larger answers are frozen dataclasses.

- `settings`: the resolved launch settings: `settings(ctx)` -> `Settings` (precision, the policy dtype and where it
  comes from, lengths, batch numbers, vLLM), `config_value(ctx, key)` for any other key;
- `launch`: `launch(ctx)` -> `Launch` (the training processes and where their number comes from, the visible GPUs,
  the accelerate / DeepSpeed / FSDP settings as written), `nvml_gpus(ctx)`;
- `trl`: what the installed TRL provides and does: its classes, its trainers' source and every reading of it;
  `trl_geometry`: its batch arithmetic, read with `ast` and evaluated on a config's numbers;
- `tokens`, `chat`: tokenizer and chat-template facts (embedding rows, stop tokens, prompts rendered and measured
  as the trainer does: `prompt_rendering(ctx)`, `prompt_lengths(ctx)`);
- `rewards`: reward functions: resolving them, calling them as TRL does, judging what they return;
- `vllm`: what vLLM would load and how the installed TRL hands it over;
- `memory`, `models`: the job's memory plan and parameter counts; where a model reference resolves; a reward or
  value model's folder as its trainer reads it (`scorer_folder`, `scorer_head`, `scorer_tokenizer`);
- `versions`: declared requirements between the installed ML packages and the known-issues table;
- `locations`: a config key's place in the file, for a finding that points at it;
- `text`: line numbers and lines of source text, small JSON files;
- `trainer_run`: what the one-step trainer run found;
- `trl_fields`: what each TRL release's config classes declare, shipped as data (`check --static` judges against
  one release without importing TRL), and what TRL's parser refuses.

A fact is asked of any context that implements trl_doctor.interface.CheckContext; one that needs what a context
lacks (TRL's config object under `--static`) raises Unavailable there, and `settings.config_value(ctx, key)` is the
one way to read the value the trainer will see, in every context. The words of a rule's findings live in the rule's
module, which holds both its judgments (the full check's and `--static`'s).
"""
