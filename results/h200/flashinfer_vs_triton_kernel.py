"""Claim 2 at the kernel: one MoE layer by FlashInfer CUTLASS against vLLM's Triton fused_moe, per-tensor FP8.

Both sides take what vLLM gives them in serving: the bf16 hidden states, the router's top-k, FP8 weights with
per-expert scales and static per-tensor activation scales. FlashInfer's side includes vLLM's FP8 quantisation of
the input (vLLM runs it before calling FlashInfer; the Triton kernel quantises inside). FlashInfer's tactics are
autotuned per batch first, as vLLM's warm-up does. Both are captured in CUDA graphs (as in decode) over 8 copies
of the weights (so L2 does not hold them) and replayed alternately (moe_opt.bench.timing). Uniform routing.
Run on the H200 after the bundle's stash calls and the FP8-only module's install:
    PYTHONPATH=$PWD:$HOME/moeperf-stash/site python3 results/h200/flashinfer_vs_triton_kernel.py $OUT/k.json
"""

from __future__ import annotations

import functools
import json
import sys
import time
from typing import Any

import torch

E, H, INTER, TOP_K, LAYERS = 128, 2048, 768, 8, 8  # Qwen3-30B-A3B's MoE at TP=1
BATCHES = [1, 4, 16, 64, 256, 1024]


def flashinfer_layer(
    cutlass_fused_moe: Any, ops: Any, x: Any, ids32: Any, topk_w: Any, ly: dict[str, Any], out: Any
) -> Any:
    """vLLM's FlashInfer CUTLASS path for a per-tensor FP8 layer: quantise the input, then the fused MoE."""
    xq, _ = ops.scaled_fp8_quant(x, ly["a1"])
    cutlass_fused_moe(
        input=xq,
        token_selected_experts=ids32,
        token_final_scales=topk_w,
        fc1_expert_weights=ly["w13"],
        fc2_expert_weights=ly["w2"],
        output_dtype=torch.bfloat16,
        quant_scales=ly["fi_scales"],
        output=out,
    )
    return out


def main(out_path: str) -> None:
    from flashinfer.autotuner import autotune
    from flashinfer.fused_moe import cutlass_fused_moe
    from vllm import _custom_ops as ops

    from moe_opt.bench.routing_dist import sample_routing
    from moe_opt.bench.timing import time_graphs_alternating_ms
    from moe_opt.tune.vllm_path import fp8_quant_config, fused_moe_module

    fused_experts = fused_moe_module().fused_experts
    fp8, dev = torch.float8_e4m3fn, "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        w13 = (torch.randn(E, 2 * INTER, H, device=dev, generator=g) / 16).to(fp8)
        w2 = (torch.randn(E, H, INTER, device=dev, generator=g) / 16).to(fp8)
        w13_s = torch.full((E,), 1 / 64, device=dev)
        w2_s = torch.full((E,), 1 / 64, device=dev)
        a1_s, a2_s = torch.tensor(1 / 64, device=dev), torch.tensor(1 / 64, device=dev)
        layers.append(
            {
                "w13": w13,
                "w2": w2,
                "a1": a1_s,
                "triton_q": fp8_quant_config(w13_s, w2_s, a1_s, a2_s),
                "fi_scales": [(w13_s * a1_s).squeeze(), (1.0 / a2_s), (w2_s * a2_s).squeeze(), a1_s],
            }
        )
    x_all = torch.randn(max(BATCHES), H, device=dev, dtype=torch.bfloat16)
    records: list[dict[str, Any]] = []
    for batch in BATCHES:
        topk_w, topk_ids = sample_routing("uniform", batch, E, TOP_K, seed=batch)
        x = x_all[:batch]
        outs = [torch.empty(batch, H, device=dev, dtype=torch.bfloat16) for _ in layers]

        ids32 = topk_ids.to(torch.int32)
        fi_fns = [
            functools.partial(flashinfer_layer, cutlass_fused_moe, ops, x, ids32, topk_w, ly, o)
            for ly, o in zip(layers, outs, strict=True)
        ]
        tr_fns = [
            functools.partial(fused_experts, x, ly["w13"], ly["w2"], topk_w, topk_ids, quant_config=ly["triton_q"])
            for ly in layers
        ]
        try:  # a batch that fails is recorded and the others still run
            t0 = time.monotonic()
            with autotune(True):
                fi_fns[0]()
            torch.cuda.synchronize()
            tune_s = time.monotonic() - t0
            a, b = fi_fns[0]().float(), tr_fns[0]().float()
            rel = float((a - b).norm() / b.norm().clamp_min(1e-9))
            fi_ms, tr_ms = time_graphs_alternating_ms([fi_fns, tr_fns], trials=20, replays_per_trial=5)
            rec: dict[str, Any] = {
                "batch": batch,
                "flashinfer_cutlass_ms": fi_ms,
                "triton_ms": tr_ms,
                "flashinfer_over_triton": fi_ms / tr_ms,
                "autotune_s": tune_s,
                "output_rel_diff": rel,
            }
            print(json.dumps(rec), flush=True)
            records.append(rec)
        except Exception as err:  # noqa: BLE001
            print(f"batch {batch}: {type(err).__name__}: {err}", flush=True)
            records.append({"batch": batch, "error": f"{type(err).__name__}: {err}"})
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [E, H, INTER, TOP_K]}
        with open(out_path, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
