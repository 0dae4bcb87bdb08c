"""`trl-doctor watch --plot FILE`: the watched curves as a picture (SVG, written by hand: no plotting library), one
panel a metric, the logs a rule flagged marked in red with the rule's verdict in the panel's title."""

from __future__ import annotations

import html
import math
from pathlib import Path

from trl_doctor.errors import InputError

PANEL_W, PANEL_H, PAD = 420, 140, 36
COLUMNS = 2


def svg(history, results, shown: list[str]) -> str:
    flagged: dict[str, list] = {}
    for r in results:
        metric = r.details.get("metric")
        if metric and r.status.value in ("fail", "warn"):
            flagged.setdefault(metric, []).append(r)
    rows = math.ceil(len(shown) / COLUMNS) or 1
    width, height = COLUMNS * (PANEL_W + PAD), rows * (PANEL_H + 2 * PAD) + PAD
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="8" y="18" font-size="13">{html.escape(str(history.source))}: {len(history.logs)} logs</text>']
    for k, metric in enumerate(shown):
        x0 = (k % COLUMNS) * (PANEL_W + PAD) + PAD
        y0 = (k // COLUMNS) * (PANEL_H + 2 * PAD) + 2 * PAD
        out += _panel(history, metric, flagged.get(metric, []), x0, y0)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _panel(history, metric: str, rules: list, x0: float, y0: float) -> list[str]:
    points = [(p.number, p.value) for p in history.column(metric)]
    finite = [v for _, v in points if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    first, last = points[0][0], max(points[-1][0], points[0][0] + 1)

    def xy(n: int, v: float) -> tuple[float, float]:
        return x0 + (n - first) / (last - first) * PANEL_W, y0 + PANEL_H - (v - lo) / (hi - lo) * PANEL_H

    title = html.escape(metric + "".join(f"  [{r.id} {r.status.value}]" for r in rules))
    color = "#c0392b" if rules else "black"
    out = [f'<text x="{x0}" y="{y0 - 8}" fill="{color}">{title}</text>',
           f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#bbb"/>',
           f'<text x="{x0 - 4}" y="{y0 + 8}" text-anchor="end" font-size="9">{hi:.3g}</text>',
           f'<text x="{x0 - 4}" y="{y0 + PANEL_H}" text-anchor="end" font-size="9">{lo:.3g}</text>']
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(n, v) for n, v in points if math.isfinite(v)))
    out.append(f'<polyline points="{path}" fill="none" stroke="#2c6fbb" stroke-width="1.2"/>')
    from trl_doctor.facts.metrics import marked as flagged_logs

    marked = {n for r in rules for n in flagged_logs(r.details)}
    for n, v in points:
        if n in marked:
            x, y = xy(n, v if math.isfinite(v) else hi)
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#c0392b"/>')
    return out


def write(path: Path, history, results, shown: list[str]) -> None:
    if path.suffix.lower() != ".svg":
        raise InputError(f"{path}: --plot writes an SVG picture: name the file .svg")
    from trl_doctor.watch import write_atomic

    try:
        write_atomic(path, svg(history, results, shown))
    except OSError as exc:
        raise InputError(f"{path}: cannot write the picture: {exc.strerror or exc}") from None
