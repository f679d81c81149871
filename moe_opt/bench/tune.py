"""Tune GEMM tiles per (experts, N, K, top-k, dtype, batch bucket) and write the JSON tile table.

    python -m moe_opt.bench.tune --routing zipf:1.2 [--shapes mixtral-8x7b,...] [--dtypes bf16,fp8]
        [--buckets 1,8,16,...] [--out TABLE] [--log tune_log.json]

Each GEMM is timed alone (CUDA graph, rotated weights) on a routing drawn from --routing: uniform
routing fills every expert's M tile equally and mis-tunes skewed real traffic, so the default is Zipf.
GEMM2's candidates keep GEMM1's winning block_m, so one alignment serves both GEMMs.
Tiles are tuned with Swap-AB off and re-used with it on, so the Swap-AB comparison is tile-for-tile.

--seed-vllm adds, per bucket, the tile vLLM itself would launch for the same layer (its shipped config file for
this GPU, else its default heuristic: ``vs_vllm.vllm_choice``) to both GEMMs' candidates. Why: the claim is that
moe_opt is at least as fast as vLLM in every cell of ``vs_vllm``, and where vLLM's tile wins (on the H200 with
vLLM 0.26, wider or differently grouped tiles at 1024-4096 tokens) the search space below never tried it.
Re-tuning some buckets keeps the table's other rows and records the run in the table's ``retunes`` list.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

from moe_opt.bench.compile_ahead import precompile_gemms
from moe_opt.bench.env_info import environment
from moe_opt.bench.layers import Layer, make_layers
from moe_opt.bench.routing_dist import sample_routing
from moe_opt.bench.shapes import SHAPES, MoeShape
from moe_opt.bench.timing import time_graph_ms
from moe_opt.kernels import KernelSwitches, TileConfig, TileTable, moe_align_block_size, moe_gemm, table_key
from moe_opt.kernels.tile_configs import DEFAULT_TABLE_PATH, current_device_name, table_path_for

DEFAULT_BUCKETS = (1, 8, 16, 32, 64, 256, 1024, 4096)


def candidates(num_tokens: int, shape: MoeShape, dtype: str) -> list[TileConfig]:
    """A small search space per regime (the lease is short): token tile follows tokens per expert."""
    per_expert = num_tokens * shape.top_k / shape.num_experts
    kx = 2 if dtype == "fp8" else 1  # fp8 halves the bytes of a K step: go twice as deep
    out: list[TileConfig] = []
    if per_expert <= 12:
        for bn in (64, 128):
            for bk in (64 * kx, 128 * kx, 256 * kx):
                for stages in (3, 4, 5):
                    if (16 + bn) * bk * stages * 2 // kx <= 200 * 1024:  # shared memory budget
                        out.append(TileConfig(16, bn, bk, 1, 4, stages))
    elif per_expert <= 80:
        for bm in (16, 32, 64):
            for bn in (64, 128):
                for bk in (64 * kx, 128 * kx):
                    out.append(TileConfig(bm, bn, bk, 8 if bm >= 64 else 1, 4, 4 if bm < 64 else 3))
    else:
        for bm in (64, 128):
            for bn in (128, 256):
                for bk in (64, 64 * kx):
                    warps = 8 if bm * bn >= 128 * 128 else 4
                    out.append(TileConfig(bm, bn, bk, 8, warps, 3 if bn * bk * kx <= 256 * 64 * 2 else 2))
    return sorted(set(out), key=str)


def vllm_seed(shape: MoeShape, dtype: str, bucket: int) -> TileConfig:
    """vLLM's own config for this layer and bucket (what ``vs_vllm`` times against) as a moe_opt tile."""
    from moe_opt.bench.vs_vllm import vllm_choice, vllm_shape

    c = vllm_choice(vllm_shape(shape, dtype), bucket)["config"]
    block = (c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"])
    return TileConfig(*block, c.get("GROUP_SIZE_M", 1), c["num_warps"], c["num_stages"])


def bucket_candidates(bucket: int, shape: MoeShape, dtype: str, seed_vllm: bool) -> list[TileConfig]:
    seeds = [vllm_seed(shape, dtype, bucket)] if seed_vllm else []
    return list(dict.fromkeys([*candidates(bucket, shape, dtype), *seeds]))


def _gemm_fns(layers: list[Layer], gemm: int, tile: TileConfig, topk_w, topk_ids, top_k: int, dtype: str):
    fns = []
    fp8 = dtype == "fp8"
    for layer in layers:
        num_experts, two_i, hidden = layer.w13.shape
        num_tokens = topk_ids.shape[0]
        aligned = moe_align_block_size(topk_ids, tile.block_m, num_experts, False)
        sc = layer.scales
        if gemm == 1:
            a = layer.x[:num_tokens].to(torch.float8_e4m3fn) if fp8 else layer.x[:num_tokens]
            c = torch.empty((num_tokens * top_k, two_i), device=a.device, dtype=torch.bfloat16)
            args = (
                a,
                layer.w13,
                c,
                None,
                *aligned,
                top_k,
                top_k,
                tile,
                False,
                False,
                sc.a1_scale if sc else None,
                sc.w13_scale if sc else None,
            )
        else:
            a = torch.randn(num_tokens * top_k, two_i // 2, device=layer.x.device).to(
                torch.float8_e4m3fn if fp8 else torch.bfloat16
            )
            c = torch.empty((num_tokens * top_k, hidden), device=a.device, dtype=torch.bfloat16)
            args = (
                a,
                layer.w2,
                c,
                topk_w,
                *aligned,
                top_k,
                1,
                tile,
                False,
                False,
                sc.a2_scale if sc else None,
                sc.w2_scale if sc else None,
            )
        fns.append(lambda args=args: moe_gemm(*args))
    return fns


def tune_shape(
    shape: MoeShape, dtype: str, buckets: list[int], routing: str, table: TileTable, log: list, seed_vllm: bool = False
) -> None:
    layers = make_layers(shape, dtype, max(buckets))
    sw = KernelSwitches(swap_ab=False, respecialize=False, dtype=dtype)  # type: ignore[arg-type]
    per_bucket = {b: bucket_candidates(b, shape, dtype, seed_vllm) for b in buckets}
    variants = {(g, t, False, False) for cands in per_bucket.values() for t in cands for g in (1, 2)}
    t0 = time.perf_counter()
    precompile_gemms(layers[0], shape.top_k, sw, variants)
    print(f"[tune] {shape.name} {dtype}: precompiled {len(variants)} variants in {time.perf_counter() - t0:.1f}s")
    e, h, i, k = shape.num_experts, shape.hidden_size, shape.intermediate_size, shape.top_k
    for bucket in buckets:
        topk_w, topk_ids = sample_routing(routing, bucket, e, k, seed=bucket)
        best: dict[int, tuple[float, TileConfig]] = {}
        for gemm in (1, 2):
            cands = per_bucket[bucket]
            if gemm == 2:
                cands = [c for c in cands if c.block_m == best[1][1].block_m]
            for tile in cands:
                try:
                    ms = time_graph_ms(_gemm_fns(layers, gemm, tile, topk_w, topk_ids, k, dtype), trials=7)
                except Exception as exc:  # noqa: BLE001 - an infeasible tile (e.g. shared memory) is skipped
                    print(f"[tune] skip {tile}: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                log.append(
                    {
                        "shape": shape.name,
                        "dtype": dtype,
                        "bucket": bucket,
                        "gemm": gemm,
                        "tile": tile.to_dict(),
                        "time_ms": ms,
                    }
                )
                if gemm not in best or ms < best[gemm][0]:
                    best[gemm] = (ms, tile)
        table.set(table_key(e, 2 * i, h, k, dtype), bucket, best[1][1])  # type: ignore[arg-type]
        table.set(table_key(e, h, i, k, dtype), bucket, best[2][1])  # type: ignore[arg-type]
        print(
            f"[tune] {shape.name} {dtype} T={bucket}: gemm1 {best[1][1]} {best[1][0]:.4f} ms | "
            f"gemm2 {best[2][1]} {best[2][0]:.4f} ms",
            flush=True,
        )
    del layers
    torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--buckets", default=",".join(map(str, DEFAULT_BUCKETS)))
    ap.add_argument("--routing", default="zipf:1.2", help="uniform | zipf:S | hist:PATH")
    ap.add_argument(
        "--out",
        default=None,
        help="table to write (default: this GPU's own, tile_configs.<gpu>.json, or tile_configs.json on the H200; "
        "a new file named as this GPU's table starts from the packaged rows, so the shapes not tuned here keep their "
        "H200 tiles)",
    )
    ap.add_argument("--log", default=None, help="JSON file for every timed candidate")
    ap.add_argument("--seed-vllm", action="store_true", help="also try vLLM's own tile per bucket (needs vLLM)")
    args = ap.parse_args(argv)
    if args.seed_vllm and importlib.util.find_spec("vllm") is None:
        ap.error("--seed-vllm needs vLLM installed (its configs are the seeds); nothing was tuned or written")
    this_gpus_table = table_path_for(current_device_name())
    out = Path(args.out) if args.out else this_gpus_table
    # A GPU's first own table starts from the packaged rows, so the shapes not tuned here keep their H200 tiles.
    first_own_table = not out.exists() and this_gpus_table != DEFAULT_TABLE_PATH and out.name == this_gpus_table.name
    table = TileTable.load(DEFAULT_TABLE_PATH if first_own_table else out)
    earlier = {} if first_own_table else dict(table.meta)
    inherited: dict = {}
    if first_own_table:
        inherited = {
            "untuned_rows_from": f"{DEFAULT_TABLE_PATH.name} ({table.meta.get('device', 'unknown GPU')})",
            "shapes": args.shapes,
            "dtypes": args.dtypes,
        }
    log: list = []
    buckets = [int(b) for b in args.buckets.split(",")]
    for name in args.shapes.split(","):
        for dtype in args.dtypes.split(","):
            tune_shape(SHAPES[name], dtype, buckets, args.routing, table, log, args.seed_vllm)
    env = environment()
    this_run = {
        "device": env["gpu"],
        "routing": args.routing,
        "tuned_utc": env["date_utc"],
        "command": env["command"],
        "torch": env["torch"],
        "triton": env["triton"],
    }
    if "tuned_utc" in earlier:  # a re-tune of some rows: the table's first run stays its header
        retune = this_run | {"shapes": args.shapes, "dtypes": args.dtypes, "buckets": buckets}
        table.meta = earlier | {"retunes": [*earlier.get("retunes", []), retune]}
    else:
        table.meta = this_run | inherited
    table.save(out)
    if args.log:
        Path(args.log).write_text(json.dumps({"env": env, "routing": args.routing, "candidates": log}, indent=1))
    print(f"[tune] wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
