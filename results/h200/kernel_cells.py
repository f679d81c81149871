"""Time moe_opt's whole fused MoE forward per (shape, dtype, batch) in CUDA graphs, for one version of the code.

Run it once per version, each from its own tree, alternating, on the same machine in one call, so that two
versions of the kernels compare without importing both into one process:
    PYTHONPATH=OLD_TREE python3 results/h200/kernel_cells.py --label old >>cells.jsonl
    PYTHONPATH=. python3 results/h200/kernel_cells.py --label new >>cells.jsonl
Each line: {"label", "shape", "dtype", "batch", "us"}. Needs a GPU, torch and Triton only.
"""

from __future__ import annotations

import argparse
import functools
import json

import torch

from moe_opt.bench.layers import make_layers
from moe_opt.bench.shapes import SHAPES
from moe_opt.bench.timing import time_graph_ms
from moe_opt.kernels import KernelSwitches, fused_moe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--batches", default="1,16,64,256,1024,4096")
    ns = ap.parse_args()
    batches = [int(b) for b in ns.batches.split(",")]
    for name in ns.shapes.split(","):
        shape = SHAPES[name]
        for dtype in ns.dtypes.split(","):
            layers = make_layers(shape, dtype, max(batches))
            sw = KernelSwitches(dtype=dtype)
            for n in batches:
                fns = [
                    functools.partial(
                        fused_moe,
                        lay.x[:n],
                        lay.w13,
                        lay.w2,
                        lay.logits[:n],
                        shape.top_k,
                        switches=sw,
                        scales=lay.scales,
                    )
                    for lay in layers
                ]
                for fn in fns:
                    fn()  # compile outside the graph
                us = time_graph_ms(fns) * 1000
                print(json.dumps({"label": ns.label, "shape": name, "dtype": dtype, "batch": n, "us": round(us, 2)}))
            del layers
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
