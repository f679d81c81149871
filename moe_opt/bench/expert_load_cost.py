"""What counting tokens per expert costs inside a MoE forward on the GPU: the plugin's count on vs off.

Why a kernel-level measurement: the count is one ``index_add_`` per MoE layer and step, captured into vLLM's CUDA
graphs; an engine A/B could not resolve a cost well under 1 % against engine-to-engine noise (1-1.5 % on an H200).
So this times what a MoE layer runs per step: routing (``topk_softmax``), the plugin's own count (the very
``Slot.add`` the wrapped ``select_experts`` calls, on a ``DeviceCounts`` as the worker builds it) and the experts
(``fused_experts``), in CUDA-graph replay like vLLM's decode steps, alternating off/on trials so drift hits both.
The ratio is against the MoE forward only; a step also runs attention, norms and sampling, so the cost as a share
of step time is lower still (the target: at most 1 %). Before timing it checks that graph replays keep counting
(the sum grows by tokens x top_k per replay) and that padding rows are not counted. It also times the layers
eagerly (prefill steps and ``--enforce-eager`` run the count's launch and Python wrapper on the host: about 7 us
per layer on a slow 2-core CPU box, ``within_target`` judges the graph mode that decode steps run in). The
overlap mode (``MOEPERF_EXPERT_LOAD=overlap``: the count forked onto a side stream after routing and joined after
the experts, as in an engine) is timed beside it, and its graph replays are checked the same way.

    python -m moe_opt.bench.expert_load_cost --out moe_opt/bench/results/h200/expert_load_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from moe_opt.bench.env_info import environment
from moe_opt.bench.layers import Layer, make_layers
from moe_opt.bench.shapes import SHAPES, MoeShape
from moe_opt.bench.timing import time_eager_ms, time_graph_ms
from moe_opt.kernels import fused_experts, topk_softmax
from moe_opt.plugin.expert_load import DeviceCounts, MoeLayer, Slot

DEFAULT_SHAPES = ("qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3")
DEFAULT_BATCHES = (1, 8, 32, 128, 512, 2048)
TARGET_PCT = 1.0


def counting(shape: MoeShape, n_layers: int, max_tokens: int, overlap: bool = False) -> DeviceCounts:
    """The worker's buffer for ``n_layers`` MoE layers of ``shape`` (one slot each, as ``bind`` makes them);
    ``overlap``: counts on a side stream, joined after the experts (``MOEPERF_EXPERT_LOAD=overlap``)."""
    layers = [
        MoeLayer(i, f"model.layers.{i}.mlp.experts", shape.num_experts, shape.top_k, False) for i in range(n_layers)
    ]
    return DeviceCounts(layers, "cuda", max_tokens, overlap=overlap)


def forwards(layers: list[Layer], shape: MoeShape, n: int, counts: DeviceCounts | None) -> list[Callable[[], Any]]:
    """One MoE layer forward per set of weights, with the plugin's count between routing and experts when given,
    forked and joined as the wrapped ``select_experts`` and ``MoERunner._apply_quant_method`` do in an engine."""
    slots = [Slot(counts, i, counts.layers[i]) for i in range(len(layers))] if counts is not None else None

    def one(i: int) -> Callable[[], Any]:
        layer = layers[i]

        def fwd() -> Any:
            w, ids = topk_softmax(layer.logits[:n], shape.top_k)
            if counts is None or slots is None:
                return fused_experts(layer.x[:n], layer.w13, layer.w2, w, ids, scales=layer.scales)
            counts.count(slots[i], ids, joined_later=True)
            out = fused_experts(layer.x[:n], layer.w13, layer.w2, w, ids, scales=layer.scales)
            counts.join()
            return out

        return fwd

    return [one(i) for i in range(len(layers))]


def check_replays_count(
    layers: list[Layer], shape: MoeShape, n: int, max_tokens: int, overlap: bool = False
) -> dict[str, Any]:
    """Capture one forward with the count, replay it: the count must grow by n x top_k per replay (graph-safe),
    and with a mask of n - 1 real tokens by (n - 1) x top_k (padding not counted)."""
    counts = counting(shape, len(layers), max_tokens, overlap)
    fns = forwards(layers[:1], shape, n, counts)
    fns[0]()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fns[0]()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fns[0]()
    counts.reset()
    replays = 5
    for _ in range(replays):
        graph.replay()
    full = int(counts.counts[0].sum().item())
    counts.reset()
    counts.set_real_tokens(max(0, n - 1))
    for _ in range(replays):
        graph.replay()
    masked = int(counts.counts[0].sum().item())
    del graph
    return {
        "replays": replays,
        "counted": full,
        "expected": replays * n * shape.top_k,
        "counted_with_one_padding_row": masked,
        "expected_with_one_padding_row": replays * max(0, n - 1) * shape.top_k,
        "ok": full == replays * n * shape.top_k and masked == replays * max(0, n - 1) * shape.top_k,
    }


def _all(fns: list[Callable[[], Any]]) -> Callable[[], None]:
    def run() -> None:
        for fn in fns:
            fn()

    return run


def _adder(slot: Slot, ids: torch.Tensor) -> Callable[[], None]:
    return lambda: slot.add(ids)


def measure(shape: MoeShape, batches: tuple[int, ...], dtype: str, pairs: int) -> list[dict[str, Any]]:
    max_tokens = max(batches)
    layers = make_layers(shape, dtype, max_tokens)
    rows = []
    for n in batches:
        check = check_replays_count(layers, shape, n, max_tokens)
        check_overlap = check_replays_count(layers, shape, n, max_tokens, overlap=True)
        counts = counting(shape, len(layers), max_tokens)
        counts_overlap = counting(shape, len(layers), max_tokens, overlap=True)
        off_ms, on_ms, overlap_ms = [], [], []
        for _ in range(pairs):  # A B C A B C ...: slow drifts of clocks and temperature hit all three
            off_ms.append(time_graph_ms(forwards(layers, shape, n, None)))
            on_ms.append(time_graph_ms(forwards(layers, shape, n, counts)))
            overlap_ms.append(time_graph_ms(forwards(layers, shape, n, counts_overlap)))
        slots = [Slot(counts, i, counts.layers[i]) for i in range(len(layers))]
        ids = [topk_softmax(layer.logits[:n], shape.top_k)[1] for layer in layers]
        count_only = time_graph_ms([_adder(slot, i) for slot, i in zip(slots, ids, strict=True)])
        eager_off, eager_on = [], []  # eager (prefill, --enforce-eager): the count's launch and Python are paid too
        for _ in range(pairs):
            eager_off.append(time_eager_ms(_all(forwards(layers, shape, n, None))) / len(layers))
            eager_on.append(time_eager_ms(_all(forwards(layers, shape, n, counts))) / len(layers))
        off, on, ovl = statistics.median(off_ms), statistics.median(on_ms), statistics.median(overlap_ms)
        e_off, e_on = statistics.median(eager_off), statistics.median(eager_on)
        rows.append(
            {
                "shape": shape.name,
                "dtype": dtype,
                "num_tokens": n,
                "moe_forward_ms_off": off,
                "moe_forward_ms_on": on,
                "count_only_ms": count_only,
                "overhead_pct_of_moe_forward": 100.0 * (on - off) / off,
                "count_only_pct_of_moe_forward": 100.0 * count_only / off,
                "within_target": 100.0 * count_only / off <= TARGET_PCT,
                "moe_forward_ms_overlap": ovl,
                "overlap_overhead_pct_of_moe_forward": 100.0 * (ovl - off) / off,
                "overlap_within_target": 100.0 * (ovl - off) / off <= TARGET_PCT,
                "eager_moe_forward_ms_off": e_off,
                "eager_moe_forward_ms_on": e_on,
                "eager_overhead_pct_of_moe_forward": 100.0 * (e_on - e_off) / e_off,
                "trials_off_ms": off_ms,
                "trials_on_ms": on_ms,
                "trials_overlap_ms": overlap_ms,
                "graph_replay_check": check,
                "graph_replay_check_overlap": check_overlap,
            }
        )
        print(json.dumps({k: v for k, v in rows[-1].items() if not k.startswith("trials")}))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), choices=sorted(SHAPES))
    ap.add_argument("--batches", nargs="+", type=int, default=list(DEFAULT_BATCHES))
    ap.add_argument("--pairs", type=int, default=5, help="off/on trial pairs per batch size")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU: the count's cost is a GPU question (on CPU it runs in vLLM's eager forward)")
    rows = [r for name in args.shapes for r in measure(SHAPES[name], tuple(args.batches), "bf16", args.pairs)]
    out = {
        "what": "plugin expert-load count (index_add_ per MoE layer) inside a CUDA-graph MoE forward: off, inline, "
        "overlapped on a side stream",
        "target_pct": TARGET_PCT,
        "env": environment(),
        "rows": rows,
        "all_within_target": all(r["within_target"] for r in rows),
        "all_replays_counted": all(r["graph_replay_check"]["ok"] for r in rows),
        "all_overlap_within_target": all(r["overlap_within_target"] for r in rows),
        "all_overlap_replays_counted": all(r["graph_replay_check_overlap"]["ok"] for r in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if out["all_replays_counted"] and out["all_overlap_replays_counted"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
