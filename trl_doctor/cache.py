"""The one caching mechanism of a check: a derived answer is computed at most once per context.

`fact` wraps a function of the context (and of hashable arguments): its result, or the `InputError` /
`Unavailable` it raised, is kept in the context's cache, so every rule that asks gets the same answer at
no cost and a failed load is not retried by each rule. The context's own loaders (`lazy`) use the same
store. Nothing is cached at module level: a new context (the second run of `--fix`) starts clean.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from trl_doctor.errors import InputError, Unavailable

F = TypeVar("F", bound=Callable[..., Any])


def _store(ctx: Any) -> dict:
    return ctx._cache


def fact(fn: F) -> F:
    """Cache `fn(ctx, *args)` on `ctx` (args must be hashable); errors that mean "cannot answer" are cached too."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def get(ctx: Any, *args: Any) -> Any:
        cache = _store(ctx)
        key = (name, args)
        if key not in cache:
            try:
                cache[key] = (True, fn(ctx, *args))
            except (InputError, Unavailable) as exc:
                cache[key] = (False, exc)
        ok, value = cache[key]
        if ok:
            return value
        raise value

    return get  # type: ignore[return-value]


def lazy(fn: Callable[[Any], Any]) -> property:
    """A context attribute computed on first use through `fact` (the context's own loaders)."""
    return property(fact(fn), doc=fn.__doc__)


def forget(ctx: Any, attr: str) -> None:
    """Drop the cached value of the context's `lazy` attribute `attr`: the next read computes it again (the trainer
    run changed the tokenizer it was lent, trl_doctor/facts/trainer_run/lent.py)."""
    getter = getattr(type(ctx), attr).fget
    _store(ctx).pop((f"{getter.__module__}.{getter.__qualname__}", ()), None)
