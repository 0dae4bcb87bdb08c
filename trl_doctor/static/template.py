"""The chat template rendered under `check --static`: in Jinja2's ImmutableSandboxedEnvironment, as transformers
renders it (no attribute of Python's internals, no file, no import), and bounded (trl_doctor.static.bounded): a forked
child with a wall-time budget, an address-space limit and a cap on the text produced. Nested `range` loops, string
repetition or `tojson(indent=...)` that would grow to gigabytes end as one line the eos-termination judgment reports."""

from __future__ import annotations

import json

from trl_doctor.errors import Unavailable
from . import bounded


class NotRendered(Exception):
    """The template raised, or overran a bound: the message says which, in one line."""


def render(template: str, where: str, variables: dict, seconds: float | None = None) -> str:
    """The template rendered with `variables` (in a bounded child); NotRendered otherwise."""
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: F401 - only whether it is installed
    except ImportError:
        raise Unavailable(f"the chat template ({where}) renders only in Jinja2's sandbox, and jinja2 is not installed "
                          "here (pip install jinja2), or run the full check") from None
    budget = bounded.SECONDS if seconds is None else min(bounded.SECONDS, seconds)
    try:
        return bounded.run(lambda: _render(template, variables), f"rendering {where}", seconds=budget)
    except bounded.Overrun as exc:
        raise NotRendered(str(exc)) from None
    except bounded.Raised as exc:
        raise NotRendered(" ".join(str(exc).split())[:500]) from None


def _render(template: str, variables: dict) -> str:
    """The render itself (in the child): streamed, stopped once the text passes the output cap."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: "")
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, indent=indent, ensure_ascii=False)
    parts, size = [], 0
    for chunk in env.from_string(template).generate(**variables):
        size += len(chunk)
        if size > bounded.OUTPUT:
            raise bounded.OutputCap()
        parts.append(chunk)
    return "".join(parts)
