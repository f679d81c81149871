"""Inline SVG line charts, written by hand so the report needs no CDN, no JavaScript and no network.

Each chart is an ``<svg class="plot">`` whose series are ``<polyline class="series">`` elements with a
``data-arm`` attribute: a browser test can count what was drawn without reading pixels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import ClassVar

import numpy as np

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
WIDTH_PX, HEIGHT_PX = 640, 300
MARGIN = {"left": 64, "right": 16, "top": 48, "bottom": 44}


@dataclass(frozen=True)
class Series:
    name: str
    xs: Sequence[float]
    ys: Sequence[float]


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2e}"


@dataclass(frozen=True)
class _Axes:
    """The plot area of one chart (``WIDTH_PX`` by ``HEIGHT_PX`` less ``MARGIN``) over data ranges
    [x0, x1] and [y0, y1]: where a value is drawn, and the parts every chart has."""

    x0: float
    x1: float
    y0: float
    y1: float
    pw: ClassVar[int] = WIDTH_PX - MARGIN["left"] - MARGIN["right"]
    ph: ClassVar[int] = HEIGHT_PX - MARGIN["top"] - MARGIN["bottom"]

    def px(self, x: float) -> float:
        return MARGIN["left"] + (x - self.x0) / (self.x1 - self.x0) * self.pw

    def py(self, y: float) -> float:
        return MARGIN["top"] + self.ph - (y - self.y0) / (self.y1 - self.y0) * self.ph

    def frame(self, svg_class: str, title: str, series_count: int, x_label: str, y_label: str) -> list[str]:
        """The opening ``<svg>`` (not closed), title, plot frame, ticks on both axes and the axis labels."""
        pw, ph, px, py = self.pw, self.ph, self.px, self.py
        parts = [
            f'<svg class="{svg_class}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{HEIGHT_PX}" '
            f'viewBox="0 0 {WIDTH_PX} {HEIGHT_PX}" role="img" aria-label="{escape(title)}" '
            f'data-series-count="{series_count}">',
            f'<text x="{WIDTH_PX / 2}" y="18" text-anchor="middle" class="title">{escape(title)}</text>',
            f'<rect x="{MARGIN["left"]}" y="{MARGIN["top"]}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
        ]
        for t in _nice_ticks(self.x0, self.x1):
            parts.append(
                f'<line x1="{px(t):.1f}" y1="{MARGIN["top"] + ph}" x2="{px(t):.1f}" y2="{MARGIN["top"] + ph + 4}" '
                f'stroke="#666"/><text x="{px(t):.1f}" y="{MARGIN["top"] + ph + 16}" text-anchor="middle" '
                f'class="tick">{_fmt(t)}</text>'
            )
        for t in _nice_ticks(self.y0, self.y1):
            parts.append(
                f'<line x1="{MARGIN["left"]}" y1="{py(t):.1f}" x2="{MARGIN["left"] + pw}" y2="{py(t):.1f}" '
                f'stroke="#eee"/><text x="{MARGIN["left"] - 6}" y="{py(t) + 4:.1f}" text-anchor="end" '
                f'class="tick">{_fmt(t)}</text>'
            )
        parts.append(
            f'<text x="{MARGIN["left"] + pw / 2}" y="{HEIGHT_PX - 8}" text-anchor="middle" class="axis">'
            f"{escape(x_label)}</text>"
            f'<text transform="translate(14,{MARGIN["top"] + ph / 2}) rotate(-90)" text-anchor="middle" '
            f'class="axis">{escape(y_label)}</text>'
        )
        return parts

    def legend(self, i: int, count: int, name: str, color: str) -> str:
        """Series ``i`` of ``count`` in the legend: a row above the plot area, where it can never hide a curve."""
        ly = 38
        lx = MARGIN["left"] + i * (self.pw // max(1, count))
        return (
            f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" stroke="{color}" stroke-width="3"/>'
            f'<text x="{lx + 24}" y="{ly}" class="legend">{escape(name)}</text>'
        )


def line_chart(title: str, series: Sequence[Series], x_label: str, y_label: str, step: bool = False) -> str:
    """One chart; an empty ``series`` (or all empty) gives a placeholder saying there is nothing to plot."""
    drawn = [s for s in series if len(s.xs) > 0]
    if not drawn:
        return f'<p class="no-data">{escape(title)}: no samples to plot.</p>'
    xs_all = np.concatenate([np.asarray(s.xs, dtype=float) for s in drawn])
    ys_all = np.concatenate([np.asarray(s.ys, dtype=float) for s in drawn])
    x0, x1 = float(np.nanmin(xs_all)), float(np.nanmax(xs_all))
    y0, y1 = min(0.0, float(np.nanmin(ys_all))), float(np.nanmax(ys_all))
    x1 = x1 if x1 > x0 else x0 + 1.0
    y1 = y1 if y1 > y0 else y0 + 1.0
    ax = _Axes(x0, x1, y0, y1)
    px, py = ax.px, ax.py
    parts = ax.frame("plot", title, len(drawn), x_label, y_label)
    for i, s in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        pts: list[str] = []
        prev_y: float | None = None
        for x, y in zip(s.xs, s.ys, strict=True):
            if step and prev_y is not None:
                pts.append(f"{px(x):.1f},{py(prev_y):.1f}")
            pts.append(f"{px(x):.1f},{py(y):.1f}")
            prev_y = y
        parts.append(
            f'<polyline class="series" data-arm="{escape(s.name)}" fill="none" stroke="{color}" '
            f'stroke-width="1.8" points="{" ".join(pts)}"><title>{escape(s.name)}</title></polyline>'
        )
        parts.append(ax.legend(i, len(drawn), s.name, color))
    parts.append("</svg>")
    return "".join(parts)


CDF_EXACT_BELOW = 1_000_000
"""Values a CDF curve is drawn from at most; more are thinned evenly (a long run's inter-token gaps)."""


def cdf_series(name: str, values: np.ndarray, max_points: int = 300) -> Series:
    """Empirical CDF, thinned to at most ``max_points`` quantiles so the page stays small."""
    if values.size > CDF_EXACT_BELOW:  # an evenly spaced sample: a 300-point curve cannot show the difference
        values = values[:: -(-values.size // CDF_EXACT_BELOW)]  # (a view: thinned before any copy)
    v = np.sort(values[np.isfinite(values)])
    if v.size == 0:
        return Series(name, [], [])
    if v.size > max_points:
        probs = np.linspace(0, 1, max_points)
        return Series(name, list(np.quantile(v, probs)), list(probs))
    return Series(name, list(v), list(np.arange(1, v.size + 1) / v.size))


# --- frontier chart (load sweeps) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BandSeries:
    """One arm on a frontier chart: its frontier (x ascending) with an interval band on y, its other
    (dominated) level points, and where its capacity falls."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    lo: Sequence[float]
    hi: Sequence[float]
    others: Sequence[tuple[float, float]] = ()
    marker: tuple[float, float] | None = None
    marker_label: str = ""


def frontier_chart(title: str, series: Sequence[BandSeries], x_label: str, y_label: str) -> str:
    """Every arm's frontier as a line over its shaded band (``<polygon class="band">``), its level points as
    dots (hollow when dominated) and its capacity as a diamond (``class="capacity"``); one
    ``<polyline class="series" data-arm>`` per arm, as in ``line_chart``."""
    drawn = [s for s in series if len(s.xs) > 0]
    if not drawn:
        return f'<p class="no-data">{escape(title)}: no samples to plot.</p>'
    xs_all = [float(x) for s in drawn for x in (*s.xs, *(p[0] for p in s.others))]
    ys_all = [float(y) for s in drawn for y in (*s.ys, *s.hi, *(p[1] for p in s.others))]
    xs_f = [x for x in xs_all if math.isfinite(x)]
    ys_f = [y for y in ys_all if math.isfinite(y)]
    x0, x1 = min(xs_f), max(xs_f)
    pad = 0.05 * (x1 - x0) if x1 > x0 else max(abs(x0) * 0.05, 1.0)
    x0, x1 = x0 - pad, x1 + pad
    y0, y1 = 0.0, max(ys_f) * 1.05 if ys_f and max(ys_f) > 0 else 1.0
    ax = _Axes(x0, x1, y0, y1)
    px, py = ax.px, ax.py
    parts = ax.frame("plot frontier", title, len(drawn), x_label, y_label)
    # Bands first, so no arm's band covers another arm's line.
    for i, s in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        upper = [f"{px(x):.1f},{py(h):.1f}" for x, h in zip(s.xs, s.hi, strict=True)]
        lower = [f"{px(x):.1f},{py(lo):.1f}" for x, lo in zip(s.xs, s.lo, strict=True)][::-1]
        parts.append(
            f'<polygon class="band" data-arm="{escape(s.name)}" fill="{color}" fill-opacity="0.15" stroke="none" '
            f'points="{" ".join(upper + lower)}"/>'
        )
    for i, s in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(s.xs, s.ys, strict=True))
        parts.append(
            f'<polyline class="series" data-arm="{escape(s.name)}" fill="none" stroke="{color}" '
            f'stroke-width="1.8" points="{pts}"><title>{escape(s.name)}</title></polyline>'
        )
        for x, y in zip(s.xs, s.ys, strict=True):
            parts.append(f'<circle class="level" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        for x, y in s.others:
            parts.append(
                f'<circle class="level dominated" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="#fff" '
                f'stroke="{color}"/>'
            )
        if s.marker is not None and all(math.isfinite(v) for v in s.marker):
            mx, my = px(s.marker[0]), py(s.marker[1])
            parts.append(
                f'<path class="capacity" data-arm="{escape(s.name)}" d="M{mx:.1f},{my - 6:.1f} L{mx + 6:.1f},{my:.1f} '
                f'L{mx:.1f},{my + 6:.1f} L{mx - 6:.1f},{my:.1f} Z" fill="{color}" stroke="#222">'
                f"<title>{escape(s.marker_label)}</title></path>"
            )
        parts.append(ax.legend(i, len(drawn), s.name, color))
    parts.append("</svg>")
    return "".join(parts)
