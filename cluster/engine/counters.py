"""What the engine itself counted during the measured window: a scrape before and after each replay.

Counters and histogram sums only grow, so after-minus-before is exactly what happened while the
clients were sending: e.g. Triton compilations that stalled real requests, as opposed to the ones
vLLM did during its own start-up and warm-up.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from moe_opt.plugin.metrics import EXPERT_TOKENS_UNPUBLISHED, GPU_STEP_SECONDS, RANK_STEP_SECONDS
from result_format.run_result import series_key

KEEP_PREFIXES = ("moeperf_", "vllm:", "vllm_")
COMPILES = "moeperf_triton_compiles_total"
UNPUBLISHED = EXPERT_TOKENS_UNPUBLISHED
STEP_TIME_PREFIXES = (RANK_STEP_SECONDS + "_", GPU_STEP_SECONDS + "_")


def parse_samples(text: str) -> dict[str, float]:
    """``name{label="v",...}`` -> value for the counters and histogram sums/counts worth a delta."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type not in ("counter", "histogram") or not fam.name.startswith(KEEP_PREFIXES):
            continue
        for s in fam.samples:
            if fam.type == "histogram" and not s.name.endswith(("_sum", "_count")):
                continue
            if s.name.endswith("_created"):
                continue
            out[series_key(s.name, s.labels)] = float(s.value)
    return out


def window_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Non-zero growth per series; a series born during the window counts from zero."""
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: v for k, v in delta.items() if v != 0.0}


def step_time_series(delta: dict[str, float]) -> dict[str, float]:
    """The step-time series of a window (host and GPU, ``_count`` and ``_sum`` per rank and phase): what
    ``ArmResult.window_metrics_by_round`` keeps of each round. Only these, because they are what a round-by-round
    comparison of engines reads, and a round's whole window (vLLM's series, launches and config lookups by bucket,
    compiles by kernel) repeated per round would multiply a result's window by its rounds to answer nothing the
    pooled window does not; the histograms' buckets never reach a window (``parse_samples``)."""
    return {k: v for k, v in delta.items() if k.startswith(STEP_TIME_PREFIXES)}


def compiles_in_window(delta: dict[str, float]) -> int:
    return int(sum(v for k, v in delta.items() if k.startswith(COMPILES + "{")))


def unpublished_ranks(text: str) -> list[str]:
    """Ranks whose plugin has served steps whose routing is not yet in its counters (their gauge is 1).

    The plugin copies its device counts to /metrics off the step path (up to about a second late while serving,
    a few tens of ms once idle); a window read before every rank reports 0 would miss its last steps. Engines
    without the plugin report nothing: no rank to wait for.
    """
    pending = []
    for fam in text_string_to_metric_families(text):
        if fam.name != UNPUBLISHED:
            continue
        pending += [s.labels.get("rank", "?") for s in fam.samples if s.value != 0]
    return sorted(pending)
