"""Triton against FlashInfer CUTLASS from one hold's two unmeasured warm-up passes, per sweep level.

Why: a hold that is cut after the warm-up passes still ran both settings on the same GPU, one after the other,
with the same share of each level (``engine.warmup_pass_fraction``). Those records are not a verdict: the passes
are short (one wave per level at 0.05), and the first pass ran on cold caches. But they are the only same-machine
pair when the measured arms did not all finish. Mean TPOT ratio with Welch's normal 95% interval on log TPOT.

    python3 results/h200/warmup_pass_ratio.py results/h200/<hold>/runs/<run> [A_ARM B_ARM]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from analysis.verdicts import log_interval
from result_format.records_store import read_columns


def level_tpots_s(records: Path) -> dict[int, tuple[np.ndarray, float]]:
    """Per level: every finished request's TPOT (the records' own definition), and output tokens/s over its span."""
    cols = read_columns(records)
    out: dict[int, tuple[np.ndarray, float]] = {}
    for level in cols.levels():
        m = cols.select(cols.ok & (cols.level == level))
        tpot_s = m.tpot_s[np.isfinite(m.tpot_s)]
        span_s = np.nanmax(m.end_s) - np.nanmin(m.actual_send_s)
        out[level] = (tpot_s, float(m.output_token_count.sum() / span_s))
    return out


def main(run_dir: str, a_arm: str = "warmup-vllm-auto", b_arm: str = "warmup-triton") -> None:
    a = level_tpots_s(Path(run_dir) / "records" / f"{a_arm}.parquet")
    b = level_tpots_s(Path(run_dir) / "records" / f"{b_arm}.parquet")
    print(f"level  n  {a_arm} TPOT p50 ms  {b_arm} TPOT p50 ms  tok/s A  tok/s B  B/A TPOT mean [95%]")
    for level in sorted(set(a) & set(b)):
        (ta, ra), (tb, rb) = a[level], b[level]
        log_ratio = float(np.log(tb).mean() - np.log(ta).mean())
        se = np.nan
        if min(len(ta), len(tb)) > 1:
            se = float(np.sqrt(np.log(ta).var(ddof=1) / len(ta) + np.log(tb).var(ddof=1) / len(tb)))
        ci = log_interval(log_ratio, se, 1.96)
        interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "[no interval]"
        print(
            f"{level:5d} {len(tb):3d}  {np.median(ta) * 1e3:22.3f}  {np.median(tb) * 1e3:19.3f}  {ra:7.1f}  {rb:7.1f}  "
            f"{np.exp(log_ratio):.3f} {interval}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
