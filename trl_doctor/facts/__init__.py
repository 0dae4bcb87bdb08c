"""The facts layer: each question more than one rule asks, answered once per check and cached on the context.

Rules import the public API (`trl_doctor`) and these modules, never each other or a private engine module:

- `settings`: the resolved launch settings (the value the trainer sees for a key, precision, the policy dtype);
- `launch`: the training processes and where their number comes from, the visible GPUs, the environment;
- `trl`: what the installed TRL provides and does (its classes, its trainers' source and readings of it);
- `tokens`, `chat`: tokenizer and chat-template facts (embedding rows, stop tokens, rendered prompts);
- `rewards`: reward functions: resolving them, calling them as TRL does, judging what they return;
- `vllm`: what vLLM would load and how the installed TRL hands it over;
- `memory`, `models`: the job's memory plan and parameter counts; where a model reference resolves;
- `versions`: declared requirements between the installed ML packages and the known-issues table;
- `text`: line numbers and lines of source text, small JSON files.
"""
