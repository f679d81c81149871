"""Recompilation study: replay the Azure conversation trace's ContextTokens as batch sizes (prefill
chunks) through the fused MoE, with Triton's integer re-specialisation on and off.

    python -m moe_opt.bench.recompile --out moe_opt/bench/results/h200 [--rows 2000] [--shape mixtral-8x7b]

Each arm runs in its own process with a fresh, empty TRITON_CACHE_DIR, so a compile counted is a
real compile (the counter also records on-disk cache hits separately). Warm-up visits one batch size
per tile-table bucket, as a server warms its capture sizes; then every trace size is replayed in order.
Reported per arm: compiles and compile seconds after warm-up, and first-call vs second-call latency
of every new size.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).with_name("data") / "azure_conv_context_tokens_head2000.csv"


def load_sizes(rows: int, max_tokens: int) -> tuple[list[int], int]:
    """First `rows` ContextTokens, clipped to [1, max_tokens]; also how many were clipped."""
    with DATA.open() as f:
        raw = [int(r["ContextTokens"]) for r in csv.DictReader(f)][:rows]
    return [min(max(1, v), max_tokens) for v in raw], sum(v > max_tokens for v in raw)


def run_arm(shape_name: str, dtype: str, respecialize: bool, rows: int, max_tokens: int) -> dict:
    """Runs inside the child process (fresh cache dir already set in the environment)."""
    import torch

    from moe_opt.bench.shapes import SHAPES
    from moe_opt.kernels import CompileCounter, KernelSwitches, default_table, fused_moe
    from moe_opt.kernels.testing import make_moe

    shape = SHAPES[shape_name]
    sizes, clipped = load_sizes(rows, max_tokens)
    sw = KernelSwitches(swap_ab=True, respecialize=respecialize, dtype=dtype)  # type: ignore[arg-type]
    x, w13, w2, logits, scales = make_moe(
        max_tokens, shape.num_experts, shape.hidden_size, shape.intermediate_size, dtype
    )
    table = default_table()
    e, h, i, k = shape.num_experts, shape.hidden_size, shape.intermediate_size, shape.top_k
    dt = sw.dtype
    warm_sizes = sorted(set(table.buckets_for(e, 2 * i, h, k, dt)) | set(table.buckets_for(e, h, i, k, dt)))
    warm_sizes = [min(s, max_tokens) for s in warm_sizes]

    def call(t: int) -> None:
        fused_moe(x[:t], w13, w2, logits[:t], k, switches=sw, scales=scales)

    counter = CompileCounter().install()
    t0 = time.perf_counter()
    for t in warm_sizes:
        call(t)
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t0
    warm_mark = counter.mark()
    warm_compiles = counter.compiles()

    seen = set(warm_sizes)
    new_sizes = []
    t_replay = time.perf_counter()
    for t in sizes:
        if t in seen:
            call(t)
            continue
        seen.add(t)
        torch.cuda.synchronize()
        mark = counter.mark()
        s0 = time.perf_counter()
        call(t)
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - s0) * 1e3
        s1 = time.perf_counter()
        call(t)
        torch.cuda.synchronize()
        second_ms = (time.perf_counter() - s1) * 1e3
        new_sizes.append(
            {
                "num_tokens": t,
                "first_call_ms": first_ms,
                "second_call_ms": second_ms,
                "compiles": counter.compiles(mark),
                "compile_s": counter.compile_seconds(mark),
            }
        )
    torch.cuda.synchronize()
    replay_s = time.perf_counter() - t_replay
    after = counter.since(warm_mark)
    counter.uninstall()
    firsts = [n["first_call_ms"] for n in new_sizes]
    return {
        "shape": shape_name,
        "dtype": dtype,
        "swap_ab": True,
        "respecialize": respecialize,
        "trace_rows": len(sizes),
        "clipped_to_max_tokens": clipped,
        "max_tokens": max_tokens,
        "distinct_new_sizes": len(new_sizes),
        "warmup_sizes": warm_sizes,
        "warmup_compiles": warm_compiles,
        "warmup_s": warmup_s,
        "replay_s": replay_s,
        "compiles_after_warmup": sum(1 for ev in after if ev.cache_hit is not True),
        "disk_cache_hits_after_warmup": sum(1 for ev in after if ev.cache_hit is True),
        "compile_s_after_warmup": sum(ev.wall_s for ev in after),
        "compiles_per_kernel_after_warmup": counter.per_kernel(warm_mark),
        "first_call_ms_median": statistics.median(firsts) if firsts else None,
        "first_call_ms_max": max(firsts) if firsts else None,
        "events_after_warmup": [
            {
                "kernel": ev.kernel,
                "wall_s": ev.wall_s,
                "cache_hit": ev.cache_hit,
                "specialization": ev.specialization[:400],
            }
            for ev in after
        ],
        "new_sizes": new_sizes,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="moe_opt/bench/results/h200")
    ap.add_argument("--shape", default="mixtral-8x7b")
    ap.add_argument("--dtype", default="fp8")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--arm", choices=["on", "off"], help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--arm-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.arm:
        res = run_arm(args.shape, args.dtype, args.arm == "on", args.rows, args.max_tokens)
        Path(args.arm_out).write_text(json.dumps(res))
        return

    from moe_opt.bench import plots
    from moe_opt.bench.env_info import environment

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = {}
    for arm in ("on", "off"):
        with (
            tempfile.TemporaryDirectory(prefix="triton-cold-") as cache,
            tempfile.NamedTemporaryFile(suffix=".json") as f,
        ):
            env = {**os.environ, "TRITON_CACHE_DIR": cache}
            cmd = [
                sys.executable,
                "-m",
                "moe_opt.bench.recompile",
                "--arm",
                arm,
                "--arm-out",
                f.name,
                "--shape",
                args.shape,
                "--dtype",
                args.dtype,
                "--rows",
                str(args.rows),
                "--max-tokens",
                str(args.max_tokens),
            ]
            subprocess.run(cmd, env=env, check=True)
            arms[f"respecialize_{arm}"] = json.loads(Path(f.name).read_text())
        a = arms[f"respecialize_{arm}"]
        print(
            f"[recompile] respecialize={arm}: warm-up {a['warmup_compiles']} compiles; after warm-up "
            f"{a['compiles_after_warmup']} compiles, {a['compile_s_after_warmup']:.2f} s; first-call median "
            f"{a['first_call_ms_median']} ms, max {a['first_call_ms_max']} ms",
            flush=True,
        )
    result = {"env": environment(), "source": str(DATA.name), "arms": arms}
    (out / "recompile.json").write_text(json.dumps(result, indent=1))
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary["compiles_after_warmup"] = {k: v["compiles_after_warmup"] for k, v in arms.items()}
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    plots.plot_recompile(arms, out)


if __name__ == "__main__":
    main()
