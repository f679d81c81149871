"""GPU timing: CUDA-graph replay for the Triton path (launch gaps out), events for eager code."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch
import triton


def capture_graph(fns: Sequence[Callable[[], object]]) -> torch.cuda.CUDAGraph:
    """A warmed-up graph that runs each fn once; compiling and allocating happen before the capture."""
    for fn in fns:  # compile and allocate outside the capture
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    return graph


def replay_ms(graph: torch.cuda.CUDAGraph, calls_per_replay: int, replays: int) -> float:
    """One trial: milliseconds per call over ``replays`` back-to-back replays (events, no host gap counted)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / (replays * calls_per_replay)


def time_graph_ms(fns: Sequence[Callable[[], object]], trials: int = 20, replays_per_trial: int = 5) -> float:
    """Median milliseconds per call of a graph that runs each fn once (fns rotate inputs so that the
    weights of consecutive calls are different buffers and the L2 cannot serve them)."""
    graph = capture_graph(fns)
    samples = [replay_ms(graph, len(fns), replays_per_trial) for _ in range(trials)]
    del graph
    return statistics.median(samples)


def time_graphs_alternating_ms(
    sides: Sequence[Sequence[Callable[[], object]]], trials: int = 20, replays_per_trial: int = 5
) -> list[float]:
    """``time_graph_ms`` of several implementations at once, their trials interleaved (A B, B A, A B, ...).

    Clock, temperature and neighbour drift over a run then falls on every side alike instead of on whichever
    was timed last, so the ratio of two medians measures the kernels, not the order they ran in.
    """
    graphs = [capture_graph(fns) for fns in sides]
    samples: list[list[float]] = [[] for _ in sides]
    for trial in range(trials):
        order = range(len(sides)) if trial % 2 == 0 else reversed(range(len(sides)))
        for i in order:
            samples[i].append(replay_ms(graphs[i], len(sides[i]), replays_per_trial))
    del graphs
    return [statistics.median(s) for s in samples]


def time_eager_ms(fn: Callable[[], object], rep_ms: int = 100) -> float:
    """Median milliseconds of an eager call (host syncs inside are allowed: the torch twin has them)."""
    return float(triton.testing.do_bench(fn, warmup=10, rep=rep_ms, return_mode="median"))
