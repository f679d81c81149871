"""Where the chunked alignment should take over from the one-launch one: both paths timed per slot count.

Why: ``kernels.align.moe_align_block_size`` aligns up to ``ONE_LAUNCH_MAX_SLOTS`` (token, k) slots in one launch
of one program per expert, each reading every id twice, and past it counts and places per 1,024-slot chunk in two
launches. The first is cheaper while the ids are few (one launch less in every decode step), the second once the
E x numel reads dominate; where they cross depends on the expert count. With the limit at 1,024 slots the whole
forward lost 1-4% at 2,048 slots on 128 experts (an H100, 2026-12-07). This times both paths alone, in CUDA graphs,
their trials interleaved (``timing.time_graphs_alternating_ms``), over slot counts around the limit, for each
expert count of ``shapes.SHAPES``, and names the largest slot count where one launch is still no slower.

    python3 -m moe_opt.bench.align_paths --out $OUT/align_paths.json [--slots 512,1024,...] [--block-m 16,64]

Exit codes: 0 written, 2 bad arguments or no CUDA GPU (checked after the arguments).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from moe_opt.bench.env_info import environment
from moe_opt.bench.routing_dist import sample_routing
from moe_opt.bench.shapes import SHAPES
from moe_opt.bench.timing import time_graphs_alternating_ms
from moe_opt.bench.vs_vllm import positive_ints
from moe_opt.kernels.align import ONE_LAUNCH_MAX_SLOTS, moe_align_chunked, moe_align_one_launch

SLOTS = (512, 1024, 2048, 3072, 4096, 6144, 8192, 16384, 32768)
"""Decode batches up to prefill chunks of 4,096 tokens x top-8, densest around the limits tried so far."""
INPUTS = 4
"""Distinct id tensors a graph rotates through, so that no replay reads ids the previous one left in L1."""


def time_cell(slots: int, num_experts: int, top_k: int, block_m: int, trials: int) -> dict[str, Any]:
    tokens = -(-slots // top_k)  # whole tokens, rounded up
    ids = [sample_routing("uniform", tokens, num_experts, top_k, seed=seed)[1] for seed in range(INPUTS)]
    sides = [
        [lambda t=t, fn=fn: fn(t, block_m, num_experts, False) for t in ids]
        for fn in (moe_align_one_launch, moe_align_chunked)
    ]
    one_ms, chunked_ms = time_graphs_alternating_ms(sides, trials=trials)
    return {
        "slots": ids[0].numel(),
        "experts": num_experts,
        "top_k": top_k,
        "block_m": block_m,
        "one_launch_us": one_ms * 1000,
        "chunked_us": chunked_ms * 1000,
        "chunked_over_one_launch": chunked_ms / one_ms,
    }


def crossover(rows: list[dict[str, Any]]) -> dict[str, int | None]:
    """Per (experts, block_m): the largest slot count up to which one launch is never slower than chunking."""
    out: dict[str, int | None] = {}
    for key in sorted({(r["experts"], r["block_m"]) for r in rows}):
        cells = sorted((r for r in rows if (r["experts"], r["block_m"]) == key), key=lambda r: r["slots"])
        best = None
        for r in cells:
            if r["one_launch_us"] > r["chunked_us"]:
                break
            best = r["slots"]
        out[f"E={key[0]} block_m={key[1]}"] = best
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--slots", type=positive_ints, default=list(SLOTS), help="comma-separated (token, k) slot counts")
    ap.add_argument("--block-m", type=positive_ints, default=[16, 64], help="comma-separated M tiles to align to")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("align_paths: needs a CUDA GPU", file=sys.stderr)
        return 2
    experts_top_k = sorted({(s.num_experts, s.top_k) for s in SHAPES.values()})
    rows: list[dict[str, Any]] = []
    for num_experts, top_k in experts_top_k:
        for block_m in args.block_m:
            for slots in args.slots:
                rows.append(time_cell(slots, num_experts, top_k, block_m, args.trials))
                print(json.dumps(rows[-1]), flush=True)
    out = {
        "benchmark": "align_paths",
        "environment": environment(),
        "one_launch_max_slots": ONE_LAUNCH_MAX_SLOTS,
        "rows": rows,
        "one_launch_no_slower_up_to_slots": crossover(rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["one_launch_no_slower_up_to_slots"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
