"""One-line sparklines of the watched metrics, with the logs a rule flagged marked under them."""

from __future__ import annotations

import math

BARS = "▁▂▃▄▅▆▇█"
WIDTH = 48


def buckets(n: int, width: int = WIDTH) -> list[range]:
    """`n` logs in at most `width` consecutive groups."""
    if n <= width:
        return [range(i, i + 1) for i in range(n)]
    edges = [round(i * n / width) for i in range(width + 1)]
    return [range(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def sparkline(values: list[float], width: int = WIDTH) -> str:
    """The values as bars (each bucket's mean; `×` where a bucket holds a NaN or inf)."""
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
    out = []
    for group in buckets(len(values), width):
        chunk = values[group.start:group.stop]
        if not all(map(math.isfinite, chunk)):
            out.append("×")
            continue
        mean = sum(chunk) / len(chunk)
        level = 0 if hi == lo else round((mean - lo) / (hi - lo) * (len(BARS) - 1))
        out.append(BARS[level])
    return "".join(out)


def marks(n: int, flagged: set[int], width: int = WIDTH) -> str:
    """`^` under each bucket holding a flagged log (0-based indices), spaces elsewhere."""
    return "".join("^" if any(i in flagged for i in group) else " " for group in buckets(n, width)).rstrip()
