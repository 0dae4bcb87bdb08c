"""`trl-doctor watch --plot FILE`: the watched curves as a picture (SVG, written by hand: no plotting library), one
panel a metric over the optimizer steps (the step axis under each panel; the log number where the log has no step),
the logs a rule flagged marked in red with the rule's verdict over the panel. Every warn and fail is on the picture:
its metric's panel is added when it is not among the watched ones, and a finding of no metric is listed at the top."""

from __future__ import annotations

import html
import math
from pathlib import Path

from trl_doctor.errors import InputError

PANEL_W, PANEL_H, PAD = 420, 140, 36
LEFT = 64  # room for the value labels (`-4.21e+05`) left of a panel
COLUMNS = 2


def _text(text: str) -> str:
    """Text of the job's (a metric's name, the log's path) as one line of XML character data: markup escaped, and
    what XML 1.0 cannot hold (control characters, lone surrogates) and line breaks as visible escapes, so the picture
    stays a valid document with a label a line."""
    from trl_doctor.report.formats._safe import visible, xml_text

    return html.escape(xml_text(visible(text, one_line=True)))


def svg(history, results, shown: list[str]) -> str:
    flagged: dict[str, list] = {}
    curveless = []
    for r in results:
        metric = r.details.get("metric")
        if r.status.value in ("fail", "warn"):
            if metric and history.column(metric):
                flagged.setdefault(metric, []).append(r)
            else:
                curveless.append(r)
    shown = list(shown) + [m for m in flagged if m not in shown]
    rows = math.ceil(len(shown) / COLUMNS) or 1
    top = 2 * PAD + (14 if curveless else 0)
    width, height = COLUMNS * (PANEL_W + LEFT + 12), rows * (PANEL_H + 2 * PAD + 14) + top
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="8" y="18" font-size="13">{_text(str(history.source))}: {len(history.logs)} logs, '
           f'{_text(history.logs[0].at)} to {_text(history.logs[-1].at)}</text>']
    if curveless:
        said = "; ".join(f"{r.id} {r.rule} {r.status.value}" for r in curveless)
        out.append(f'<text x="8" y="34" fill="#c0392b">flagged without a curve: {_text(said)}</text>')
    for k, metric in enumerate(shown):
        x0 = (k % COLUMNS) * (PANEL_W + LEFT + 12) + LEFT
        y0 = (k // COLUMNS) * (PANEL_H + 2 * PAD + 14) + top
        out += _panel(history, metric, flagged.get(metric, []), x0, y0)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _panel(history, metric: str, rules: list, x0: float, y0: float) -> list[str]:
    column = history.column(metric)
    points = [(p.step if p.step is not None else p.number, p.value) for p in column]
    numbers = {p.number: (p.step if p.step is not None else p.number) for p in column}
    finite = [v for _, v in points if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    first, last = points[0][0], max(points[-1][0], points[0][0] + 1)

    def xy(n: int, v: float) -> tuple[float, float]:
        return x0 + (n - first) / (last - first) * PANEL_W, y0 + PANEL_H - (v - lo) / (hi - lo) * PANEL_H

    axis = "step" if column[0].step is not None else "log"
    verdicts = "  ".join(f"{r.id} {r.rule} {r.status.value}" for r in rules)
    out = [f'<text x="{x0}" y="{y0 - (20 if rules else 8)}">{_text(metric)}</text>',
           f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#bbb"/>',
           f'<text x="{x0 - 4}" y="{y0 + 8}" text-anchor="end" font-size="9">{hi:.3g}</text>',
           f'<text x="{x0 - 4}" y="{y0 + PANEL_H}" text-anchor="end" font-size="9">{lo:.3g}</text>',
           f'<text x="{x0}" y="{y0 + PANEL_H + 12}" font-size="9">{axis} {first}</text>',
           f'<text x="{x0 + PANEL_W / 2}" y="{y0 + PANEL_H + 12}" text-anchor="middle" font-size="9">'
           f'{axis} {(first + last) // 2}</text>',
           f'<text x="{x0 + PANEL_W}" y="{y0 + PANEL_H + 12}" text-anchor="end" font-size="9">{last}</text>']
    if rules:
        out.append(f'<text x="{x0}" y="{y0 - 6}" fill="#c0392b" font-size="10">{_text(verdicts)}</text>')
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(n, v) for n, v in points if math.isfinite(v)))
    out.append(f'<polyline points="{path}" fill="none" stroke="#2c6fbb" stroke-width="1.2"/>')
    from trl_doctor.facts.metrics import marked as flagged_logs

    marked = {numbers[n] for r in rules for n in flagged_logs(r.details) if n in numbers}
    for n, v in points:
        if n in marked:
            x, y = xy(n, v if math.isfinite(v) else hi)
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#c0392b"/>')
    return out


def write(path: Path, history, results, shown: list[str]) -> None:
    if path.is_dir():
        raise InputError(f"{path}: a folder; --plot writes an SVG picture to a file (name it .svg)")
    if path.suffix.lower() != ".svg":
        raise InputError(f"{path}: --plot writes an SVG picture: name the file .svg")
    from trl_doctor.watch import write_atomic

    try:
        write_atomic(path, svg(history, results, shown))
    except OSError as exc:
        raise InputError(f"{path}: cannot write the picture: {exc.strerror or exc}") from None
