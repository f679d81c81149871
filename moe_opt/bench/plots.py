"""PNG plots of the benchmark and the recompilation study (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_bench(rows: list[dict], out: Path) -> None:
    shapes = sorted({r["shape"] for r in rows})
    for metric, fname, ylabel in (
        ("time_ms", "time_vs_batch.png", "time per forward (ms)"),
        ("bw_fraction", "bw_fraction_vs_batch.png", "fraction of measured copy bandwidth"),
    ):
        fig, axes = plt.subplots(1, len(shapes), figsize=(5 * len(shapes), 4), squeeze=False)
        for ax, name in zip(axes[0], shapes, strict=True):
            for dtype in ("bf16", "fp8"):
                for swap in (False, True):
                    pts = sorted(
                        (r["num_tokens"], r[metric])
                        for r in rows
                        if r["shape"] == name and r["impl"] == "triton" and r["dtype"] == dtype and r["swap_ab"] == swap
                    )
                    if pts:
                        ax.plot(
                            *zip(*pts, strict=True),
                            marker="o",
                            ms=3,
                            label=f"{dtype} swap-AB {'on' if swap else 'off'}",
                        )
                if metric == "time_ms":
                    pts = sorted(
                        (r["num_tokens"], r["time_ms"])
                        for r in rows
                        if r["shape"] == name and r["impl"] == "torch" and r["dtype"] == dtype
                    )
                    if pts:
                        ax.plot(*zip(*pts, strict=True), ls="--", marker="x", label=f"{dtype} torch twin")
            ax.set_xscale("log", base=2)
            if metric == "time_ms":
                ax.set_yscale("log")
            ax.set_title(name)
            ax.set_xlabel("batch (tokens)")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in shapes:
        t = {
            (r["num_tokens"], r["swap_ab"]): r["time_ms"]
            for r in rows
            if r["shape"] == name and r["impl"] == "triton" and r["dtype"] == "fp8"
        }
        pts = sorted((n, t[(n, False)] / t[(n, True)]) for n, s in t if s and (n, False) in t)
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=name)
    ax.axhline(1.3, color="k", ls=":", lw=1, label="goal 1.3x (batch <= 16)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch (tokens)")
    ax.set_ylabel("FP8 speedup, Swap-AB on vs off")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "swap_ab_speedup_fp8.png", dpi=110)
    plt.close(fig)


def plot_recompile(arms: dict, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, res in arms.items():
        pts = [n["first_call_ms"] for n in res["new_sizes"]]
        ax.plot(
            range(len(pts)),
            pts,
            ".",
            ms=3,
            label=f"{arm}: {res['compiles_after_warmup']} compiles after warm-up",
        )
    ax.set_yscale("log")
    ax.set_xlabel("n-th new batch size in trace order")
    ax.set_ylabel("first-call latency (ms)")
    ax.set_title("Azure conv trace ContextTokens replay")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "recompile_first_call.png", dpi=110)
    plt.close(fig)
