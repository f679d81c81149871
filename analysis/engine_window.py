"""What each engine's own counters say about the measured window: per-rank stalls and Triton compiles.

The request records say how slow the service was; these say why. A result keeps the growth of every
engine counter during the replay (``ArmResult.window_metrics``, keys as Prometheus writes a series);
this module turns them back into per-rank and per-kernel rows for the reports, so a report of an old
run shows them without re-running or a Prometheus server.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from moe_opt.plugin.metrics import STEPS_GATED, STEPS_GATED_SECONDS
from result_format.run_result import ArmResult, parse_series_key


@dataclass(frozen=True)
class RankWindow:
    """One rank of one arm's engine over the measured window."""

    arm: str
    rank: str
    gpu: str
    steps: int
    step_s: float
    sync_stall_steps: int
    sync_stall_s: float
    collective_s: float
    ttft_count: int = 0
    ttft_s: float = 0.0
    compiles: int = 0

    @property
    def ttft_mean_ms(self) -> float | None:
        """This rank's own time to first token (``moeperf_rank_ttft_seconds``): at TP > 1 a rank that compiles or
        stalls while others do not shows here first."""
        return 1e3 * self.ttft_s / self.ttft_count if self.ttft_count else None

    @property
    def step_mean_ms(self) -> float | None:
        return 1e3 * self.step_s / self.steps if self.steps else None

    @property
    def sync_stall_mean_ms(self) -> float | None:
        return 1e3 * self.sync_stall_s / self.sync_stall_steps if self.sync_stall_steps else None


@dataclass(frozen=True)
class KernelCompiles:
    """Triton JIT compiles of one kernel (all ranks) while the arm's requests were measured."""

    arm: str
    kernel: str
    compiles: int
    compile_s: float


_RANK_FIELDS = {
    "moeperf_rank_step_seconds_count": "steps",
    "moeperf_rank_step_seconds_sum": "step_s",
    "moeperf_rank_sync_stall_seconds_count": "sync_stall_steps",
    "moeperf_rank_sync_stall_seconds_sum": "sync_stall_s",
    "moeperf_rank_collective_seconds_total": "collective_s",
    "moeperf_rank_ttft_seconds_count": "ttft_count",
    "moeperf_rank_ttft_seconds_sum": "ttft_s",
    "moeperf_triton_compiles_total": "compiles",
}


def rank_rows(arm: ArmResult) -> list[RankWindow]:
    acc: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key, value in arm.window_metrics.items():
        name, labels = parse_series_key(key)
        if name in _RANK_FIELDS and "rank" in labels:
            acc[(labels["rank"], labels.get("gpu", "none"))][_RANK_FIELDS[name]] += value
    return [
        RankWindow(
            arm=arm.name,
            rank=rank,
            gpu=gpu,
            steps=int(v["steps"]),
            step_s=v["step_s"],
            sync_stall_steps=int(v["sync_stall_steps"]),
            sync_stall_s=v["sync_stall_s"],
            collective_s=v["collective_s"],
            ttft_count=int(v["ttft_count"]),
            ttft_s=v["ttft_s"],
            compiles=int(v["compiles"]),
        )
        for (rank, gpu), v in sorted(acc.items(), key=lambda kv: int(kv[0][0]) if kv[0][0].isdigit() else 0)
    ]


def step_skew_mean_ms(arm: ArmResult) -> float | None:
    """Mean per-step imbalance between the slowest and fastest rank (rank 0 observes it, TP > 1 only)."""
    totals = {"count": 0.0, "sum": 0.0}
    for key, value in arm.window_metrics.items():
        name, _ = parse_series_key(key)
        if name.startswith("moeperf_step_skew_seconds_"):
            totals[name.rsplit("_", 1)[1]] += value
    return 1e3 * totals["sum"] / totals["count"] if totals["count"] else None


def gated_by_rank(arm: ArmResult) -> dict[str, tuple[int, float]]:
    """Slow steps (``moeperf_steps_gated_total``) and their summed skew, by the rank that gated them: at TP > 1 the
    rank to look at first when the engine's steps are uneven (rank 0 observes it)."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for key, value in arm.window_metrics.items():
        name, labels = parse_series_key(key)
        if name in (STEPS_GATED, STEPS_GATED_SECONDS) and "gating_rank" in labels:
            acc[labels["gating_rank"]][0 if name == STEPS_GATED else 1] += value
    return {rank: (int(v[0]), v[1]) for rank, v in acc.items()}


def compile_rows(arm: ArmResult) -> list[KernelCompiles]:
    """Every compile the window grew by, as ``triton_compiles_in_window`` counts them: the plugin's ``during``
    label says "startup" until the first served step ends, so the first requests' compiles carry it too."""
    n: dict[str, float] = defaultdict(float)
    s: dict[str, float] = defaultdict(float)
    for key, value in arm.window_metrics.items():
        name, labels = parse_series_key(key)
        kernel = labels.get("kernel", "?").rsplit(".", 1)[-1]
        if name == "moeperf_triton_compiles_total":
            n[kernel] += value
        elif name == "moeperf_triton_compile_seconds_sum":
            s[kernel] += value
    return [KernelCompiles(arm.name, k, int(n[k]), s[k]) for k in sorted(n, key=lambda k: -n[k])]


def has_engine_window(arms: list[ArmResult]) -> bool:
    return any(rank_rows(a) for a in arms)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


RANK_HEADERS = ["arm", "rank", "GPU", "steps", "step mean (ms)", "rank TTFT mean (ms)", "Triton compiles",
                "sync stall mean (ms)", "sync stall total (s)",
                "collectives (s)", "step skew mean (ms)", "slow steps it gated", "skew it caused (s)"]  # fmt: skip
COMPILE_HEADERS = ["arm", "kernel", "compiles in the measured window (all ranks)", "compile time (s)"]


def rank_table(arms: list[ArmResult]) -> list[list[str]]:
    """Rows for RANK_HEADERS; the skew is per engine, so it is shown on each arm's first rank only; the slow steps
    are those each rank gated (others waited for it), per engine, so they add up over an arm's ranks."""
    rows = []
    for arm in arms:
        ranks = rank_rows(arm)
        tp = len(ranks) > 1  # one rank waits for nobody: no stall or skew to show
        skew = _ms(step_skew_mean_ms(arm)) if tp else "-"
        gated = gated_by_rank(arm)
        for i, r in enumerate(ranks):
            stall = [_ms(r.sync_stall_mean_ms), f"{r.sync_stall_s:.3f}"] if tp else ["-", "-"]
            n, s = gated.get(r.rank, (0, 0.0))
            rows.append([arm.name, r.rank, r.gpu, str(r.steps), _ms(r.step_mean_ms), _ms(r.ttft_mean_ms),
                         str(r.compiles), *stall, f"{r.collective_s:.3f}",
                         skew if i == 0 else "", *([str(n), f"{s:.3f}"] if tp else ["-", "-"])])  # fmt: skip
    return rows


def compile_table(arms: list[ArmResult]) -> list[list[str]]:
    rows = []
    for arm in arms:
        kernels = compile_rows(arm)
        if not kernels and rank_rows(arm):
            rows.append([arm.name, "-", "0", "0.0"])
        rows += [[arm.name, k.kernel, str(k.compiles), f"{k.compile_s:.1f}"] for k in kernels]
    return rows
