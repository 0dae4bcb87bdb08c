"""The dataset's first rows as a file holds them, for the context that has no datasets library (`check --static`:
trl_doctor.static.files.read_dataset, a local JSON, JSON Lines, CSV or Parquet file, bounded). The full check reads
the dataset as the datasets library loads it (`ctx.dataset`), so there this fact says Unavailable."""

from __future__ import annotations

from typing import Any

from trl_doctor.errors import Unavailable


def dataset_head(ctx) -> Any:
    """The first rows of a local dataset file (`.path`, `.columns`, `.rows`), read without the datasets library."""
    if ctx.kind != "static":
        raise Unavailable("the dataset is read as the datasets library loads it")
    raw = ctx.config.raw
    if raw.get("dataset_streaming") or raw.get("datasets"):
        raise Unavailable("needs the full check: a stream or a dataset mixture is loaded by the datasets library")
    head = ctx.dataset_file
    if head.unread:
        raise Unavailable(head.unread)
    return head
