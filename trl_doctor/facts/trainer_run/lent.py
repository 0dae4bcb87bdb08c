"""The context's tokenizer, lent to the trainer run instead of loaded a second time.

The trainer run used to load its tokenizer back from the folder the context had just saved it to (the twin's, or
`workdir/tokenizer`). With a real-size vocabulary that load is the dearest step of a check after the imports: Qwen's
151k-token tokenizer takes about as long to load as the one optimizer step on the twin (transformers parses its
tokenizer.json and rebuilds the BPE in Python), and a copy costs as much (`copy.deepcopy` and the Rust tokenizer's
own round trip through JSON both do). So the run gets the context's own object.

The trainer may change what it is handed: TRL sets `pad_token = eos_token` on a tokenizer without one, and a
trainer may add tokens or a template. Rules that read `ctx.tokenizer` after the run must still see the tokenizer as
it is on disk, so the tokenizer's state is compared before and after the run, and when anything differs the
context forgets it: the next reader loads it again (the check only pays the second load when the trainer changed
it). A tokenizer from a launch command's script (`Live`) cannot be loaded again: it is not lent.

This module is light: no torch, transformers or TRL.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from trl_doctor.cache import forget

# the tokenizer's own large tables: read-only to a trainer, and too large to compare
_TABLES = frozenset({"_vocab", "_merges", "_tokenizer", "vocab", "encoder", "decoder", "bpe_ranks", "sp_model"})


def state(tok: Any) -> tuple:
    """What a trainer could change on a tokenizer it is handed: its attributes but the vocabulary tables (special
    tokens, padding and truncation sides, chat template, init kwargs, ...), its length and added tokens, and the
    Rust backend's post-processor and size. Not the backend's padding and truncation settings: transformers sets
    them afresh on every call that encodes (`set_truncation_and_padding`; transformers 4 leaves the last call's in
    place), so they are no state a trainer can leave behind."""
    attrs = repr(sorted((k, repr(v)) for k, v in vars(tok).items() if k not in _TABLES))
    backend = getattr(tok, "_tokenizer", None)
    rust = None
    if backend is not None:
        post = getattr(backend, "post_processor", None)
        rust = (post.__getstate__() if post is not None else None, backend.get_vocab_size(with_added_tokens=True))
    try:
        added = repr(sorted((i, str(t)) for i, t in tok.added_tokens_decoder.items()))
    except Exception:  # a tokenizer class without the table: its other state still counts
        added = None
    return type(tok), len(tok), attrs, added, rust


def lendable(ctx: Any) -> bool:
    """Whether the context's tokenizer can be loaded again should the trainer change it (it is read from disk)."""
    live = getattr(ctx, "live", None)
    return live is None or live.tokenizer is None


@contextmanager
def lent_tokenizer(ctx: Any) -> Iterator[Any]:
    """`ctx.tokenizer` for the trainer run. After the run, a tokenizer the run changed is forgotten by the context.
    The script's own tokenizer (a launch) cannot be loaded again: the run gets a copy of it as the script left it
    (its chat template, pad token, padding side, model_input_names...), or None where it cannot be copied (the run
    then loads its own from disk). Loading it from disk lost what the script set in memory: a script that set
    Qwen2's model_input_names on a generic tokenizer trained, and its step failed at generate on token_type_ids."""
    if not lendable(ctx):
        yield _copy(ctx.live.tokenizer)
        return
    tok = ctx.tokenizer
    before = state(tok)
    try:
        yield tok
    finally:
        if state(tok) != before:
            forget(ctx, "tokenizer")


def _copy(tok: Any) -> Any:
    import copy

    try:
        return copy.deepcopy(tok)
    except Exception:  # a tokenizer class that cannot be copied (remote code, native handles): the disk's
        return None
