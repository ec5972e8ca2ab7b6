"""Small static SVG charts for the HTML report: horizontal bars, lines over nights, box plots.

Each function returns an ``<svg>`` element as text, inline in the page: no
script, no style attribute (the page's Content-Security-Policy allows neither),
only presentation attributes, so the charts draw the same with scripts off.
Every label passes through :func:`text`, which escapes it for HTML and shows
control and bidi characters as escapes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gguf_audit.report.format import escape

__all__ = ["COLORS", "Bar", "Box", "Series", "axis_ticks", "bar_chart", "box_chart", "line_chart", "text"]

COLORS: Final = {
    "error": "#c62828",
    "warning": "#ef8f00",
    "info": "#1565c0",
    "unloadable": "#6a1b9a",
    "incomplete": "#2e7d32",
    "other": "#546e7a",
}
FONT: Final = 'font-family="system-ui, sans-serif" font-size="12"'


def text(value: object, limit: int | None = None) -> str:
    """Untrusted text as HTML text (and attribute) content: control and bidi characters escaped, then markup."""
    return html.escape(escape(str(value), limit), quote=True)


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: int
    color: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    values: Sequence[float]
    color: str


@dataclass(frozen=True, slots=True)
class Box:
    label: str
    minimum: float
    q1: float
    median: float
    q3: float
    maximum: float
    note: str = ""


def bar_chart(bars: Sequence[Bar], *, width: int = 760, label_width: int = 260, row: int = 22) -> str:
    """Horizontal bars, one row each, the value written after its bar."""
    if not bars:
        return '<p class="empty">none</p>'
    top = max(b.value for b in bars) or 1
    span = width - label_width - 60
    height = row * len(bars) + 8
    parts = [_svg_open(width, height)]
    for i, b in enumerate(bars):
        y = 4 + i * row
        w = max(1, round(span * b.value / top))
        title = f"<title>{text(b.title or b.label)}: {b.value}</title>"
        parts.append(
            f'<g>{title}<text x="{label_width - 6}" y="{y + row * 0.65:.1f}" text-anchor="end">{text(b.label, 48)}'
            f'</text><rect x="{label_width}" y="{y + 3}" width="{w}" height="{row - 6}" fill="{b.color}"/>'
            f'<text x="{label_width + w + 4}" y="{y + row * 0.65:.1f}">{b.value}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _nice_top(value: float) -> float:
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover


def axis_ticks(maximum: float, *, integer: bool = False, n: int = 4) -> list[float]:
    """The y-axis ticks from 0 to at least ``maximum``: ``n`` even steps, or for counts (``integer``)
    whole steps of 1, 2 or 5 times a power of ten, so no count axis shows 0.25 of a file."""
    if not integer:
        top = _nice_top(maximum)
        return [top * k / n for k in range(n + 1)]
    whole = max(1, math.ceil(maximum))
    raw = whole / n
    step = 1
    power = 1
    while step < raw:
        for mult in (1, 2, 5):
            step = mult * power
            if step >= raw:
                break
        power *= 10
    count = math.ceil(whole / step)
    return [float(step * k) for k in range(count + 1)]


def _tick_label(value: float, integer: bool) -> str:
    return str(round(value)) if integer else f"{value:g}"


def _svg_open(width: int, height: int) -> str:
    """An ``<svg>`` drawn at ``width`` by ``height`` that shrinks with the page (``svg{max-width:100%}``)."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>'
    )


def line_chart(
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    width: int = 760,
    height: int = 240,
    log: bool = False,
    integer: bool = False,
) -> str:
    """Lines over the x labels (nights), a dot per value, a legend under the chart.

    ``integer``: the values are counts, so the y ticks are whole numbers.
    """
    if not labels or not series:
        return '<p class="empty">none</p>'
    left, right, top_pad, bottom = 48, 16, 12, 56
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    ticks = axis_ticks(max((max(s.values, default=0) for s in series), default=0), integer=integer)
    top = ticks[-1]
    n = len(labels)

    def x(i: int) -> float:
        return left + (plot_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return top_pad + plot_h * (1 - (v / top if not log else math.log1p(v) / math.log1p(top)))

    parts = [_svg_open(width, height)]
    for v in ticks:
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{_tick_label(v, integer)}</text>'
        )
    step = max(1, n // 8)
    for i, label in enumerate(labels):
        if i % step == 0 or i == n - 1:
            parts.append(
                f'<text x="{x(i):.1f}" y="{top_pad + plot_h + 16}" text-anchor="middle">{text(label, 20)}</text>'
            )
    hidden = _same_as_earlier(series)
    for k, s in enumerate(series):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s.values))
        # A line on top of an earlier, identical one is dashed, so the one below shows through its gaps.
        dash = f' stroke-dasharray="{DASH} {DASH * len(hidden[k])}"' if hidden[k] else ""
        parts.append(f'<polyline points="{points}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        radius = 3.5 / (1 + len(hidden[k]))  # and its dots smaller, inside the earlier line's
        for i, v in enumerate(s.values):
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="{radius:.2f}" fill="{s.color}">'
                f"<title>{text(s.label)} {text(labels[i])}: {v:g}</title></circle>"
            )
    parts += _legend(series, hidden, left, height)
    parts.append("</svg>")
    return "".join(parts)


def _legend(series: Sequence[Series], hidden: Sequence[Sequence[int]], left: int, height: int) -> list[str]:
    """A swatch and a label per series along the bottom; a series with an earlier twin names it (``= errors``)."""
    parts, lx = [], left
    for k, s in enumerate(series):
        label = s.label + (f" (= {series[hidden[k][-1]].label})" if hidden[k] else "")
        parts.append(
            f'<rect x="{lx}" y="{height - 18}" width="12" height="12" fill="{s.color}"/>'
            f'<text x="{lx + 16}" y="{height - 8}">{text(label)}</text>'
        )
        lx += 24 + 8 * len(label)
    return parts


DASH: Final = 6
"""Dash length of a line drawn over an identical earlier one."""


def _same_as_earlier(series: Sequence[Series]) -> list[list[int]]:
    """For each series, the earlier series with the very same values (whose line it would hide)."""
    return [[j for j in range(k) if list(series[j].values) == list(s.values)] for k, s in enumerate(series)]


def box_chart(boxes: Sequence[Box], *, width: int = 760, label_width: int = 120, row: int = 26) -> str:
    """Horizontal box plots on a log scale (minimum, quartiles, median, maximum), one row each."""
    if not boxes:
        return '<p class="empty">none</p>'
    positive = [v for b in boxes for v in (b.minimum, b.maximum) if v > 0]
    low = min(positive, default=1e-4)
    high = max(positive, default=1.0)
    lo_exp, hi_exp = math.floor(math.log10(low)), math.ceil(math.log10(high))
    if hi_exp <= lo_exp:
        hi_exp = lo_exp + 1
    span = width - label_width - 150
    height = row * len(boxes) + 30

    def x(v: float) -> float:
        v = max(v, 10.0**lo_exp)
        return label_width + span * (math.log10(v) - lo_exp) / (hi_exp - lo_exp)

    parts = [_svg_open(width, height)]
    for e in range(lo_exp, hi_exp + 1):
        parts.append(
            f'<line x1="{x(10.0**e):.1f}" x2="{x(10.0**e):.1f}" y1="0" y2="{height - 20}" stroke="#ddd"/>'
            f'<text x="{x(10.0**e):.1f}" y="{height - 6}" text-anchor="middle">1e{e}</text>'
        )
    for i, b in enumerate(boxes):
        y = 4 + i * row
        mid = y + row / 2 - 2
        parts.append(
            f"<g><title>{text(b.label)}: min {b.minimum:.3g}, quartiles {b.q1:.3g} / {b.median:.3g} / "
            f"{b.q3:.3g}, max {b.maximum:.3g}</title>"
            f'<text x="{label_width - 6}" y="{mid + 4:.1f}" text-anchor="end">{text(b.label, 16)}</text>'
            f'<line x1="{x(b.minimum):.1f}" x2="{x(b.maximum):.1f}" y1="{mid:.1f}" y2="{mid:.1f}" stroke="#333"/>'
            f'<rect x="{x(b.q1):.1f}" y="{y + 4}" width="{max(1.0, x(b.q3) - x(b.q1)):.1f}" height="{row - 12}" '
            f'fill="#90caf9" stroke="#333"/>'
            f'<line x1="{x(b.median):.1f}" x2="{x(b.median):.1f}" y1="{y + 4}" y2="{y + row - 8}" stroke="#000" '
            f'stroke-width="2"/><text x="{label_width + span + 8}" y="{mid + 4:.1f}">median {b.median:.3g}'
            f"{text(b.note)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)
