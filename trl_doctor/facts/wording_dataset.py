"""dataset-schema's words (TD012) for a dataset without a `prompt` column, once for the full rule
(rules/dataset_schema.py) and `check --static` (static/judge.py), so a case reads the same in both. Imports nothing."""

from __future__ import annotations

# columns a prompt is often found under, the likeliest first: the first one present is the one to rename
CANDIDATES = ("question", "problem", "query", "instruction", "input", "text", "messages", "conversations", "conversation",
              "prompts", "Prompt", "question_text", "content")


def prompt_reader(trainer: str, ppo_style: bool) -> str:
    """Who reads the `prompt` column: a PPO-style trainer's example script, else the trainer itself."""
    if ppo_style:
        return (f"{trainer.upper()}'s example script (examples/scripts/{trainer}/{trainer}.py) tokenizes "
                "`prompt` (dataset_text_field = \"prompt\") into the `input_ids` the trainer reads")
    return f"{trainer.upper()}Trainer builds every batch from it (`prompts = [x[\"prompt\"] for x in inputs]`)"


def no_prompt_column(columns: list[str], reader: str) -> str:
    """No `prompt` column; the fix names the likeliest column to rename (`reader`: prompt_reader's words)."""
    near = [c for c in CANDIDATES if c in columns]
    hint = (f"rename `{near[0]}` to `prompt`" if near else "add a `prompt` column") + \
        " (dataset.rename_column, or map the rows to {\"prompt\": ...})"
    return (f"the dataset has no `prompt` column (columns: {', '.join(columns) or 'none'}): {reader}, so the first step "
            f"fails with KeyError: 'prompt'; {hint}")
