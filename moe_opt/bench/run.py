"""The H200 microbenchmark: time, bytes, FLOPs and roofline fractions of the fused MoE forward.

    python -m moe_opt.bench.run --out moe_opt/bench/results/h200 [--shapes ...] [--batches ...]

For every shape x batch x dtype x Swap-AB arm: CUDA-graph time of the whole Triton forward (routing
included), the bytes and FLOPs the problem needs, and their fractions of the copy bandwidth and the
bf16 matmul rate measured at the start of the same run. The torch twin is timed as the naive baseline
on a subset of batches, and checked against the kernels for the max error per dtype.
Writes bench.json (+ summary figures merged into summary.json) and plots.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from moe_opt.bench import plots
from moe_opt.bench.compile_ahead import precompile_gemms
from moe_opt.bench.cost import bytes_moved_min, flops
from moe_opt.bench.env_info import environment
from moe_opt.bench.layers import make_layers
from moe_opt.bench.roofline import copy_bandwidth_gbs, matmul_tflops
from moe_opt.bench.shapes import BATCH_SIZES, SHAPES
from moe_opt.bench.timing import time_eager_ms, time_graph_ms
from moe_opt.kernels import KernelSwitches, fused_moe, fused_moe_torch, plan_fused_moe, topk_softmax
from moe_opt.kernels.testing import check_close

TWIN_BATCHES = (1, 16, 64, 512, 4096)
ERROR_BATCHES = (1, 13, 64, 1000)


def _plan_dict(plan) -> dict:
    gemms = {
        f"gemm{i}": {
            "tile": g.tile.to_dict(),
            "source": g.source,
            "bucket": g.bucket,
            "swap_ab_applied": g.swap_ab_applied,
        }
        for i, g in ((1, plan.gemm1), (2, plan.gemm2))
    }
    return {**gemms, "naive_slots": plan.naive_slots}


def bench_shape(name: str, batches: list[int], dtypes: list[str], ceilings: dict, errors: dict) -> list[dict]:
    shape = SHAPES[name]
    rows: list[dict] = []
    for dtype in dtypes:
        layers = make_layers(shape, dtype, max(max(batches), max(ERROR_BATCHES)))
        for swap in (False, True):
            sw = KernelSwitches(swap_ab=swap, respecialize=False, dtype=dtype)  # type: ignore[arg-type]
            plans = {
                t: plan_fused_moe(t, shape.num_experts, shape.hidden_size, shape.intermediate_size, shape.top_k, sw)
                for t in batches
            }
            variants = {
                (g, gp.tile, gp.swap_ab_applied, p.naive_slots)
                for p in plans.values()
                for g, gp in ((1, p.gemm1), (2, p.gemm2))
            }
            t0 = time.perf_counter()
            precompile_gemms(layers[0], shape.top_k, sw, variants)
            print(
                f"[bench] {name} {sw.label()}: {len(variants)} GEMM variants compiled in "
                f"{time.perf_counter() - t0:.1f}s",
                flush=True,
            )
            for t in batches:
                fns = [
                    lambda ly=ly, t=t, sw=sw: fused_moe(
                        ly.x[:t], ly.w13, ly.w2, ly.logits[:t], shape.top_k, switches=sw, scales=ly.scales
                    )
                    for ly in layers
                ]
                ms = time_graph_ms(fns)
                active = sum(torch.unique(topk_softmax(ly.logits[:t], shape.top_k)[1]).numel() for ly in layers) / len(
                    layers
                )
                nbytes, nflops = bytes_moved_min(shape, dtype, t, active), flops(shape, t)
                rows.append(
                    {
                        "shape": name,
                        "dtype": dtype,
                        "swap_ab": swap,
                        "respecialize": False,
                        "impl": "triton",
                        "num_tokens": t,
                        "time_ms": ms,
                        "active_experts": active,
                        "bytes_moved": nbytes,
                        "flops": nflops,
                        "achieved_gbs": nbytes / ms / 1e6,
                        "achieved_tflops": nflops / ms / 1e9,
                        "bw_fraction": nbytes / ms / 1e6 / ceilings["copy_bandwidth_gbs"],
                        "matmul_fraction": nflops / ms / 1e9 / ceilings["matmul_bf16_tflops"],
                        "plan": _plan_dict(plans[t]),
                    }
                )
                r = rows[-1]
                print(
                    f"[bench] {name:16s} {dtype} swap={int(swap)} T={t:5d} {ms:8.4f} ms "
                    f"bw {r['bw_fraction']:.3f} mm {r['matmul_fraction']:.3f}",
                    flush=True,
                )
            # Correctness on the same layers: the figure behind max_abs_error_vs_torch.
            ly = layers[0]
            for t in ERROR_BATCHES:
                out = fused_moe(ly.x[:t], ly.w13, ly.w2, ly.logits[:t], shape.top_k, switches=sw, scales=ly.scales)
                ref = fused_moe_torch(
                    ly.x[:t], ly.w13, ly.w2, ly.logits[:t], shape.top_k, switches=sw, scales=ly.scales
                )
                max_err, rms_err = check_close(out, ref, dtype)
                e = errors.setdefault(dtype, {"max_abs": 0.0, "worst": None})
                if max_err >= e["max_abs"]:
                    e.update(
                        max_abs=max_err,
                        worst={
                            "shape": name,
                            "num_tokens": t,
                            "swap_ab": swap,
                            "rms": rms_err,
                            "ref_max": ref.float().abs().max().item(),
                        },
                    )
        sw = KernelSwitches(dtype=dtype)  # type: ignore[arg-type]
        for t in (b for b in TWIN_BATCHES if b in batches):
            ly = layers[0]
            ms = time_eager_ms(
                lambda ly=ly, t=t, sw=sw: fused_moe_torch(  # type: ignore[misc]
                    ly.x[:t], ly.w13, ly.w2, ly.logits[:t], shape.top_k, switches=sw, scales=ly.scales
                )
            )
            rows.append({"shape": name, "dtype": dtype, "impl": "torch", "num_tokens": t, "time_ms": ms})
            print(f"[bench] {name:16s} {dtype} torch twin T={t:5d} {ms:8.4f} ms", flush=True)
        del layers
        torch.cuda.empty_cache()
    return rows


def summarize(rows: list[dict], ceilings: dict, errors: dict) -> dict:
    """The figures checked by script: decode bandwidth fraction, Swap-AB speedup, max error."""
    tri = [r for r in rows if r["impl"] == "triton"]
    decode: dict = {}
    speedup: dict = {}
    for name in sorted({r["shape"] for r in tri}):
        for dtype in sorted({r["dtype"] for r in tri if r["shape"] == name}):
            best: dict[int, float] = {}
            for r in tri:
                if r["shape"] == name and r["dtype"] == dtype and 8 <= r["num_tokens"] <= 64:
                    best[r["num_tokens"]] = max(best.get(r["num_tokens"], 0.0), r["bw_fraction"])
            if best:
                decode.setdefault(name, {})[dtype] = min(best.values())
        t_by = {
            (r["num_tokens"], r["swap_ab"]): r["time_ms"] for r in tri if r["shape"] == name and r["dtype"] == "fp8"
        }
        ratios = [t_by[(t, False)] / t_by[(t, True)] for t, s in t_by if s and t <= 16 and (t, False) in t_by]
        if ratios:
            speedup[name] = min(ratios)
    return {
        "copy_bandwidth_gbs": ceilings["copy_bandwidth_gbs"],
        "matmul_bf16_tflops": ceilings["matmul_bf16_tflops"],
        "decode_bw_fraction": decode,
        "swap_ab_speedup_fp8": speedup,
        "max_abs_error_vs_torch": {d: e["max_abs"] for d, e in errors.items()},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="moe_opt/bench/results/h200")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--batches", default=",".join(map(str, BATCH_SIZES)))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    ceilings = {"copy_bandwidth_gbs": copy_bandwidth_gbs(), "matmul_bf16_tflops": matmul_tflops("bf16")}
    try:
        ceilings["matmul_fp8_tflops"] = matmul_tflops("fp8")
    except Exception as exc:  # noqa: BLE001 - informative only; the goals use bf16
        print(f"[bench] fp8 matmul ceiling unavailable: {exc}")
    print(f"[bench] ceilings {ceilings}", flush=True)
    batches = [int(b) for b in args.batches.split(",")]
    rows: list[dict] = []
    errors: dict = {}
    for name in args.shapes.split(","):
        rows += bench_shape(name, batches, args.dtypes.split(","), ceilings, errors)
        partial = {"env": env, "ceilings": ceilings, "errors": errors, "rows": rows, "partial": True}
        (out / "bench.json").write_text(json.dumps(partial, indent=1))  # survives a cut-short run
    summary = summarize(rows, ceilings, errors)
    (out / "bench.json").write_text(
        json.dumps({"env": env, "ceilings": ceilings, "errors": errors, "rows": rows}, indent=1)
    )
    summary_path = out / "summary.json"
    old = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    keep = {"compiles_after_warmup": old.get("compiles_after_warmup", {})}
    summary_path.write_text(json.dumps({**summary, **keep}, indent=1) + "\n")
    plots.plot_bench(rows, out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
