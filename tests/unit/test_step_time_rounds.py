"""Engine step times per round: B/A per round and over engine pairs, and the reports' section of them."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis.step_time_rounds import compare_rounds, round_steps
from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult

GPU_COUNT, GPU_SUM = "moeperf_gpu_step_seconds_count", "moeperf_gpu_step_seconds_sum"
HOST_COUNT, HOST_SUM = "moeperf_rank_step_seconds_count", "moeperf_rank_step_seconds_sum"


def _key(name: str, rank: str, phase: str) -> str:
    return f'{name}{{arm="a",engine="run/a",gpu="{rank}",node="n",phase="{phase}",rank="{rank}"}}'


def _round(gpu_mean_ms: float, host_mean_ms: float, phase: str = "decode", steps: int = 100) -> dict[str, float]:
    """One round's window of a TP=2 engine: each rank ran ``steps`` / 2 steps of ``phase`` at the given means."""
    out = {}
    for rank in ("0", "1"):
        out[_key(GPU_COUNT, rank, phase)] = steps / 2
        out[_key(GPU_SUM, rank, phase)] = steps / 2 * gpu_mean_ms / 1e3
        out[_key(HOST_COUNT, rank, phase)] = steps / 2
        out[_key(HOST_SUM, rank, phase)] = steps / 2 * host_mean_ms / 1e3
    return out


def _arm(name: str, by_round: dict[int, dict[str, float]]) -> ArmResult:
    return ArmResult(name=name, flags=OptimizationFlags(), flags_applied=True, status="ok",
                     requests_planned=1, requests_sent=1, requests_succeeded=1, requests_failed=0, requests_not_sent=0,
                     window_metrics_by_round=by_round, records_file=f"records/{name}.parquet")  # fmt: skip


# --- the analysis -------------------------------------------------------------------------------------------

B_GPU_MS = {0: 11.0, 1: 9.9, 2: 12.0}  # A's decode steps take 10 ms on the GPU in every round


def _pair() -> tuple[ArmResult, ArmResult]:
    a = _arm("a", {r: _round(10.0, 5.0) | _round(30.0, 20.0, phase="mixed") for r in range(3)})
    b = _arm("b", {r: _round(ms, 5.0 if r else 5.5) for r, ms in B_GPU_MS.items()})
    return a, b


def test_each_round_is_an_engine_pair_and_the_pooled_ratio_is_their_geometric_mean_with_a_t_interval():
    a, b = _pair()
    assert round_steps(a)[1]["decode"].gpu_step_mean_ms == pytest.approx(10.0)  # both ranks' steps together
    x = compare_rounds(a, b, "ab", "interleaved")
    decode = x.phase("decode")
    assert decode is not None and [p.phase for p in x.phases] == ["decode", "mixed"]
    assert [r.round for r in decode.rounds] == [0, 1, 2]
    assert [r.gpu_ratio for r in decode.rounds] == pytest.approx([1.1, 0.99, 1.2])
    assert [r.host_ratio for r in decode.rounds] == pytest.approx([1.1, 1.0, 1.0])
    logs = np.log([1.1, 0.99, 1.2])
    half = sps.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    assert decode.gpu.engine_pairs == 3
    assert decode.gpu.ratio == pytest.approx(math.exp(logs.mean()))
    assert decode.gpu.ci == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert decode.gpu.ci[0] < decode.gpu.ratio < decode.gpu.ci[1]
    assert decode.host.ratio == pytest.approx(1.1 ** (1 / 3))
    mixed = x.phase("mixed")  # only A ran mixed steps: rows without a ratio, nothing to pool
    assert mixed is not None and all(r.gpu_ratio is None and r.b.gpu_step_mean_ms is None for r in mixed.rounds)
    assert mixed.gpu.ratio is None and mixed.gpu.ci is None and mixed.gpu.engine_pairs == 0


def test_parallel_engines_are_one_pair_their_rounds_pooled_and_without_an_interval():
    a, b = _pair()
    decode = compare_rounds(a, b, "ab", "parallel").phase("decode")
    assert decode is not None
    assert [r.gpu_ratio for r in decode.rounds] == pytest.approx([1.1, 0.99, 1.2])  # still shown per round
    assert decode.gpu.engine_pairs == 1 and decode.gpu.ci is None
    assert decode.gpu.ratio == pytest.approx(sum(B_GPU_MS.values()) / 3 / 10.0)  # the one engine pair's means


def test_only_rounds_both_arms_have_are_paired():
    a, b = _pair()
    b = b.model_copy(update={"window_metrics_by_round": {1: b.window_metrics_by_round[1]}})
    decode = compare_rounds(a, b, "ab", "interleaved").phase("decode")
    assert decode is not None and [r.round for r in decode.rounds] == [1]
    assert decode.gpu.engine_pairs == 1 and decode.gpu.ci is None and decode.gpu.ratio == pytest.approx(0.99)
