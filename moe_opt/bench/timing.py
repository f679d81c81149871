"""GPU timing: CUDA-graph replay for the Triton path (launch gaps out), events for eager code."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch
import triton


def time_graph_ms(fns: Sequence[Callable[[], object]], trials: int = 20, replays_per_trial: int = 5) -> float:
    """Median milliseconds per call of a graph that runs each fn once (fns rotate inputs so that the
    weights of consecutive calls are different buffers and the L2 cannot serve them)."""
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
    samples = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays_per_trial):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / (replays_per_trial * len(fns)))
    del graph
    return statistics.median(samples)


def time_eager_ms(fn: Callable[[], object], rep_ms: int = 100) -> float:
    """Median milliseconds of an eager call (host syncs inside are allowed: the torch twin has them)."""
    return float(triton.testing.do_bench(fn, warmup=10, rep=rep_ms, return_mode="median"))
