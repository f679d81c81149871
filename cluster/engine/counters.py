"""What the engine itself counted during the measured window: a scrape before and after each replay.

Counters and histogram sums only grow, so after-minus-before is exactly what happened while the
clients were sending: e.g. Triton compilations that stalled real requests, as opposed to the ones
vLLM did during its own start-up and warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from moe_opt.plugin.metrics import EXPERT_TOKENS, EXPERT_TOKENS_UNPUBLISHED, GPU_STEP_SECONDS, RANK_STEP_SECONDS
from result_format.run_result import series_key

KEEP_PREFIXES = ("moeperf_", "vllm:", "vllm_")
COMPILES = "moeperf_triton_compiles_total"
UNPUBLISHED = EXPERT_TOKENS_UNPUBLISHED
STEP_TIME_PREFIXES = (RANK_STEP_SECONDS + "_", GPU_STEP_SECONDS + "_")


def parse_samples(text: str) -> dict[str, float]:
    """``name{label="v",...}`` -> value for the counters and histogram sums/counts worth a delta."""
    return _kept_samples(text_string_to_metric_families(text))


def _kept_samples(families: Iterable[Metric]) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in families:
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
    return read_scrape(text).pending_ranks


def expert_counts(samples: dict[str, float]) -> dict[str, float]:
    """The ``moeperf_expert_tokens_total`` series of parsed samples: what a settled read must have stopped
    changing."""
    return {k: v for k, v in samples.items() if k.startswith(EXPERT_TOKENS + "{")}


@dataclass(frozen=True)
class Scrape:
    """One /metrics text with its parsed samples (``parse_samples``), so a window read parses a scrape once: at
    48 layers x 128 experts the expert series alone are 6,144 samples a rank."""

    text: str
    samples: dict[str, float]
    pending_ranks: list[str]


def read_scrape(text: str) -> Scrape:
    """The text, its kept samples and its pending ranks from one parse of the text."""
    families = list(text_string_to_metric_families(text))
    pending = [s.labels.get("rank", "?") for f in families if f.name == UNPUBLISHED for s in f.samples if s.value != 0]
    return Scrape(text, _kept_samples(families), sorted(pending))


def settled_scrape(
    scrape: Callable[[], str],
    timeout_s: float,
    poll_s: float,
    on_timeout: Callable[[list[str]], None] = lambda _: None,
) -> Scrape:
    """A scrape whose expert counts hold every step the engine served: no rank unpublished, and the counts the
    same as in the scrape before, which also had none.

    Why two: vLLM's /metrics reads prometheus_client's multiprocess files one after another (counter_<pid>.db
    before gauge_all_<pid>.db here), so a rank that publishes between the two reads shows its old counts beside
    its cleared flag. One such torn scrape made a CPU run's window miss the last 34 of 153 tokens (CI,
    2026-12-07). Publishing writes the counts before it clears the flag, so a scrape begun after one that saw the
    flag cleared reads the published counts; equal counts twice show no publish fell between. An engine without
    the plugin's flag (no expert count) has nothing to wait for: its first scrape is returned. After
    ``timeout_s`` the last scrape is returned as it is, ``on_timeout`` told the ranks still pending.
    """
    deadline = time.monotonic() + timeout_s
    settled: dict[str, float] | None = None  # the previous scrape's counts, when it had no rank pending
    while True:
        got = read_scrape(scrape())
        if UNPUBLISHED not in got.text:
            return got
        counts = None if got.pending_ranks else expert_counts(got.samples)
        if counts is not None and counts == settled:
            return got
        if time.monotonic() >= deadline:
            on_timeout(got.pending_ranks)
            return got
        settled = counts
        time.sleep(poll_s)  # polling the plugin's gauge: there is no event to wait on across processes
