"""What the installed accelerate does with a dataloader that holds no batch.

TRL's PPO-style trainers (PPOTrainer; RLOOTrainer before 0.22) build their eval dataloader with `drop_last=True` and
hand it to `accelerator.prepare`; after the first update, sample generation (`num_sample_generations` > 0) runs
`for batch in self.eval_dataloader: query = batch["input_ids"]`. An eval set smaller than one eval batch leaves that
dataloader empty, and what the loop then sees is accelerate's: releases before 1.9 yield one `None` from an empty
`DataLoaderShard` (its `__iter__`: `except StopIteration: yield`), so the job stops with "TypeError: 'NoneType'
object is not subscriptable" after its first update; from 1.9 the loop runs zero times and nothing is printed.

`empty_loader_yields_none()` asks the installed accelerate itself, on an empty prepared dataloader (no model, no
process group), instead of trusting a version number.
"""

from __future__ import annotations

import functools


@functools.cache
def empty_loader_yields_none() -> bool | None:
    """Whether the installed accelerate's prepared dataloader yields `None` when its dataset fills no batch (None when
    accelerate cannot be asked: not installed, or its API changed)."""
    try:
        from accelerate.data_loader import prepare_data_loader
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    try:
        loader = prepare_data_loader(DataLoader([], batch_size=1, drop_last=True), num_processes=1, process_index=0,
                                     put_on_device=False)
        batches = iter(loader)  # DataLoaderShard.__iter__ is a generator
        first = next(batches, StopIteration)
        batches.close()
    except Exception:  # an accelerate this reading does not know: no answer rather than a guess
        return None
    return first is None
