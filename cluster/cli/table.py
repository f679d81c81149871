"""The per-arm table printed at the end of a run: metrics down, arms across."""

from __future__ import annotations

from result_format.run_result import ArmResult, RunResult
from workloads.metrics import Distribution

LATENCIES = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"), ("E2E", "e2e_s"))


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


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
    rows.append(("requests/s", f"{s.requests_per_s:.2f}" if s else "-"))
    rows.append(("output tokens/s", f"{s.output_tokens_per_s:.1f}" if s else "-"))
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
