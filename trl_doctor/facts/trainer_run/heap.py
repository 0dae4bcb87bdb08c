"""The objects that exist before the trainer run, kept out of the cyclic garbage collector's way during it.

The run calls full collections it cannot avoid: accelerate's `free_memory` at the end of `Trainer.train` runs
`gc.collect()`, and so does the sample's start (`worker.sample_real`). Each walks every object the worker holds: the
ML stack's modules, the context's tokenizer, dataset and twin. `gc.freeze()` moves those into the permanent
generation for the run's length, so its collections walk only what the run itself made (the trainer, its models,
their garbage), which is what they are there to free. Nothing is lost: garbage among the frozen objects is
collected as soon as they are unfrozen, after the run.

A heap frozen before (a fork server freezes its imports before it forks) is left frozen.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def frozen_heap() -> Iterator[None]:
    import gc

    frozen_before = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()
