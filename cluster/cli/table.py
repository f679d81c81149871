"""The per-arm table printed at the end of a run: metrics down, arms across."""

from __future__ import annotations

from result_format.run_result import ArmResult, RunResult
from workloads.metrics import Distribution, RateEstimate

LATENCIES = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"), ("E2E", "e2e_s"))


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def _rate(value: float | None, estimate: RateEstimate | None, digits: int) -> str:
    """The rate and its within-run interval: the same numbers the report's rates table shows."""
    if value is None:
        return "-"
    text = f"{value:.{digits}f}"
    if estimate is not None and estimate.ci is not None:
        lo, hi = estimate.ci
        text += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return text


def _rows(a: ArmResult) -> list[tuple[str, str]]:
    rows = [
        ("status", a.status),
        ("requests ok / sent / planned", f"{a.requests_succeeded} / {a.requests_sent} / {a.requests_planned}"),
        ("errors", str(a.requests_failed)),
        ("not sent", str(a.requests_not_sent)),
    ]
    s = a.summary
    for label, field in LATENCIES:
        d: Distribution | None = getattr(s, field) if s else None
        for q in ("p50", "p90", "p99"):
            rows.append((f"{label} {q} (ms)", _ms(getattr(d, q) if d else None)))
    rates = s.rates if s else None
    rows.append(("requests/s", _rate(s.requests_per_s if s else None, rates.requests_per_s if rates else None, 2)))
    rows.append(
        (
            "output tokens/s",
            _rate(s.output_tokens_per_s if s else None, rates.output_tokens_per_s if rates else None, 1),
        )
    )
    rows.append(("goodput (req/s)", _rate(s.goodput_rps if s else None, rates.goodput_rps if rates else None, 2)))
    cb = a.client_bound
    rows.append(
        (
            "client-bound",
            ("YES" if cb.flagged else "no") + f" (p99 dispatch lag {cb.dispatch_lag_p99_ms:.2f} ms)"
            if cb and cb.dispatch_lag_p99_ms is not None
            else "-",
        )
    )
    rows.append(("send lag p99 (ms)", f"{s.send_lag_ms.p99:.1f}" if s and s.send_lag_ms.p99 is not None else "-"))
    return rows


def arm_table(result: RunResult) -> str:
    columns = [_rows(a) for a in result.arms]
    if not columns:
        return "(no arms ran)"
    labels = [label for label, _ in columns[0]]
    header = ["metric", *(a.name for a in result.arms)]
    body = [[label, *(col[i][1] for col in columns)] for i, label in enumerate(labels)]
    widths = [max(len(row[c]) for row in [header, *body]) for c in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if c == 0 else f"{{:>{w}}}" for c, w in enumerate(widths))
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in body]
    return "\n".join(lines)


def level_table(result: RunResult) -> str:
    """A sweep's levels, one line per level and arm: the measured requests of that level only."""
    header = ["level", "arm", "measured", "output tok/s", "requests/s", "goodput", "TTFT p50/p90 (ms)", "TPOT p50 (ms)"]
    body: list[list[str]] = []
    levels = max((len(a.levels) for a in result.arms), default=0)
    for i in range(levels):
        for a in result.arms:
            if i >= len(a.levels):
                continue
            lv, s = a.levels[i], a.levels[i].summary
            rates = s.rates if s else None
            body.append(
                [
                    lv.label,
                    a.name,
                    str(s.ttft_s.count) if s else "0",
                    _rate(s.output_tokens_per_s if s else None, rates.output_tokens_per_s if rates else None, 1),
                    _rate(s.requests_per_s if s else None, rates.requests_per_s if rates else None, 2),
                    _rate(s.goodput_rps if s else None, rates.goodput_rps if rates else None, 2),
                    f"{_ms(s.ttft_s.p50)} / {_ms(s.ttft_s.p90)}" if s else "-",
                    _ms(s.tpot_s.p50) if s else "-",
                ]
            )
    if not body:
        return ""
    widths = [max(len(row[c]) for row in [header, *body]) for c in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if c < 2 else f"{{:>{w}}}" for c, w in enumerate(widths))
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in body)])
