"""Number formatting shared by the HTML and Markdown reports: latencies in ms, rates plain."""

from __future__ import annotations


def value(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "s":
        return f"{v * 1000:.3g} ms" if v * 1000 < 1000 else f"{v:.3g} s"
    return f"{v:.4g} {unit}"


def ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}"


def interval(ci: tuple[float, float] | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def ratio_interval(ci: tuple[float, float] | None) -> str:
    """A B/A interval: bounds past 1000x either way say only "no information" (one engine pair's t quantile on
    1 degree of freedom gives [0.000, 55528.810]), so they print as such, as ``pct`` does past 1000%."""
    if ci is None:
        return "n/a"

    def bound(x: float) -> str:
        return ">1000" if x > 1000 else "<0.001" if x < 0.001 else f"{x:.3f}"

    return f"[{bound(ci[0])}, {bound(ci[1])}]"


def pct(x: float | None) -> str:
    """Relative changes; beyond 1000% the digits say nothing a reader can use."""
    if x is None:
        return "n/a"
    return ">1000%" if x > 10 else f"{x * 100:.1f}%"


def p_value(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<1e-4" if p < 1e-4 else f"{p:.4f}"


def count(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,}"
