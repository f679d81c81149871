"""moe_opt's Triton fused-MoE beside vLLM's own, cell by cell on one GPU.

    python3 -m moe_opt.bench.vs_vllm --out moe_opt/bench/results/h200/vs_vllm.json \\
        [--shapes ...] [--dtypes bf16,fp8] [--batches 1,4,...] [--trials 20] [--routing uniform] [--swap-ab]

The claim under test: moe_opt's kernels are at least as fast as vLLM's everywhere that matters, i.e. at the four
per-rank TP=8 shapes of ``shapes.SHAPES``, in bf16 and in per-tensor FP8 w8a8, from decode (1 token) to prefill
(4096). ``run.py`` times moe_opt alone against rooflines; only timing both on the same GPU in the same process
answers whether an engine would lose anything by launching moe_opt's kernels instead of its own.

What is compared, per cell (shape x dtype x batch): the expert part of the layer on both sides, routing given
(vLLM's ``fused_experts`` takes the top-k ids and weights as inputs, so moe_opt's router stays out as well).
moe_opt: ``moe_opt.kernels.fused_experts`` with the tiles its table for this GPU (``tile_configs*.json``) picks, as it
always does, and the switches that table was tuned with (``bench/tune.py``): no re-specialisation (an engine never
compiles at a new batch size) and Swap-AB off unless ``--swap-ab``. vLLM: its own ``fused_experts``, imported from
the installed vLLM (``moe_opt.tune.vllm_path``, never copied), launched with the config an engine would use: its
shipped config file for the shape on this GPU if there is one, else its default heuristic
(``try_get_optimal_moe_config`` with ``VLLM_TUNED_CONFIG_FOLDER`` unset), with its own Swap-AB decision and its
own shortcuts (no alignment pass for very sparse decode).

Both sides get the same weights (``layers.make_layers``, rotated past the L2 as in ``run.py``), the same top-k ids
and weights and the same input, so they do the same work; FP8 gives vLLM the static per-tensor activation scales
moe_opt's FP8 path uses, so neither side pays for a dynamic scale the other does not compute. Both are captured in
CUDA graphs (vLLM serves decode from graphs) and timed by the same function (``timing.time_graphs_alternating_ms``),
whose trials alternate the sides, so launch gaps and clock drift favour neither. Each cell also compares the two
outputs (max abs difference against moe_opt's own relative bounds, ``kernels.testing.check_close``): a kernel that
is fast because it computes something else is caught.

Writes one JSON file (rewritten after every cell, ``partial: true`` until the end): the environment, every cell
with both times, their ratio vLLM/moe_opt (> 1: moe_opt faster), each side's tile choice and the check (with
``--profile`` also each side's GPU time per kernel, ``kernels_us``), and a summary (cells where moe_opt is at
least as fast, within ``AT_LEAST_AS_FAST_TOLERANCE``, and the slower ones).

Exit codes: 0 written, 1 written but some cell's outputs disagree, 2 bad arguments, no CUDA GPU or no vLLM (checked
after the arguments, before anything is allocated).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from moe_opt.bench.shapes import SHAPES, TP, MoeShape
from moe_opt.tune.shape import MoeShape as VllmShape

EXIT_OK, EXIT_MISMATCH, EXIT_BAD_INPUT = 0, 1, 2
PROG = "python3 -m moe_opt.bench.vs_vllm"
DTYPES = ("bf16", "fp8")
VLLM_DTYPES = {"bf16": "bf16", "fp8": "fp8_w8a8"}
"""moe_opt's dtype names (as in ``run.py``) -> vLLM's (its config file names and lookups)."""
BATCHES = (1, 4, 16, 64, 256, 1024, 4096)
"""Decode (1-64 tokens) through prefill chunks (256-4096), each a different tile regime on both sides."""
DEFAULT_OUT = "moe_opt/bench/results/h200/vs_vllm.json"
DEFAULT_TRIALS = 20
REPLAYS_PER_TRIAL = 5
AT_LEAST_AS_FAST_TOLERANCE = 0.01
"""moe_opt counts as at least as fast when vLLM's time is at least 99% of moe_opt's (ratio >= 0.99): two medians
of CUDA-graph replays are not equal to the last percent even for one kernel, so a cell within 1% is a tie, and a
tie keeps the claim; anything slower is listed."""


def _names(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in choices]
        if not names or unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(unknown) or repr(text)} (one of {', '.join(choices)})"
            )
        return list(dict.fromkeys(names))

    return parse


def positive_ints(text: str) -> list[int]:
    """An argparse type for a comma-separated list of positive integers (sorted, repeats dropped)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers expected, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"positive integers expected, got {text!r}")
    return sorted(set(values))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=_names(list(SHAPES), "shape"), default=list(SHAPES), help="comma-separated")
    p.add_argument("--dtypes", type=_names(DTYPES, "dtype"), default=list(DTYPES), help="bf16 and/or fp8")
    p.add_argument("--batches", type=positive_ints, default=list(BATCHES), help="tokens per forward, comma-separated")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="timed trials per side and cell (median)")
    p.add_argument("--routing", default="uniform", help="uniform | zipf:S | hist:PATH | from:RESULT_JSON[:ARM]")
    p.add_argument("--swap-ab", action="store_true", help="moe_opt with Swap-AB where its tile allows (default off)")
    p.add_argument("--out", default=DEFAULT_OUT, help="JSON file to write (folders created)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile each cell's two sides kernel by kernel (eager, 10 calls each; kernel_profile.py)",
    )
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Everything checkable without a GPU; argparse exits 2 with the message on a bad argument."""
    from moe_opt.bench.routing_dist import expert_popularity

    p = build_parser()
    ns = p.parse_args(list(argv))
    if ns.trials < 1:
        p.error(f"--trials must be at least 1, got {ns.trials}")
    for name in ns.shapes:
        try:
            expert_popularity(ns.routing, SHAPES[name].num_experts)
        except (ValueError, OSError) as e:
            p.error(f"--routing {ns.routing}: {e}")
    if Path(ns.out).is_dir():
        p.error(f"--out {ns.out} is a folder; give the JSON file's path")
    return ns


@dataclasses.dataclass(frozen=True)
class Cell:
    shape: str
    dtype: str
    batch: int


def cells(shapes: Sequence[str], dtypes: Sequence[str], batches: Sequence[int]) -> list[Cell]:
    """Shape-major, then dtype, then batch: one set of weights per (shape, dtype) serves all its batches."""
    return [Cell(s, d, b) for s in shapes for d in dtypes for b in batches]


def vllm_shape(shape: MoeShape, dtype: str) -> VllmShape:
    """The same per-rank layer as vLLM keys its configs: experts, per-rank intermediate width N, dtype (per-tensor
    FP8, no weight block, as moe_opt's FP8 path is)."""
    return VllmShape(
        experts=shape.num_experts,
        hidden=shape.hidden_size,
        intermediate=shape.intermediate_size * TP,
        tp=TP,
        top_k=shape.top_k,
        dtype=VLLM_DTYPES[dtype],  # type: ignore[arg-type]
    )


def vllm_choice(shape: VllmShape, batch: int) -> dict[str, Any]:
    """What an engine without a tuned folder launches for ``batch`` tokens, and where that came from: a file vLLM
    ships for this GPU (``shipped``) or its default heuristic (``default``), and whether its Swap-AB fires."""
    from moe_opt.tune.vllm_path import config_file_name, swap_ab, tuned_table, vllm_config

    config = vllm_config(shape, batch, folder=None)
    return {
        "config": config,
        "config_source": "shipped" if tuned_table(shape, None) is not None else "default",
        "config_file": config_file_name(shape),
        "swap_ab": swap_ab(shape, config),
    }


def at_least_as_fast(ratio: float) -> bool:
    return ratio >= 1.0 - AT_LEAST_AS_FAST_TOLERANCE


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The claim per cell: moe_opt at least as fast (within the tolerance) and computing the same thing."""
    keys = ("shape", "dtype", "batch", "moe_opt_us", "vllm_us", "ratio")
    slower = [{k: r[k] for k in keys} for r in records if not at_least_as_fast(r["ratio"])]
    wrong = [
        {k: r[k] for k in ("shape", "dtype", "batch")} | {"error": r["check"]["error"]}
        for r in records
        if not r["check"]["ok"]
    ]
    ratios = [r["ratio"] for r in records]
    return {
        "cells": len(records),
        "tolerance": AT_LEAST_AS_FAST_TOLERANCE,
        "at_least_as_fast": len(records) - len(slower),
        "slower_cells": slower,
        "mismatched_cells": wrong,
        "min_ratio": min(ratios) if ratios else None,
        "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
        "claim_holds": bool(records) and not slower and not wrong,
    }


def gpu_problem(dtypes: Sequence[str]) -> str | None:
    """Why this machine cannot run the comparison, or None."""
    import importlib.util

    from moe_opt.tune.cli import cuda_problem

    if problem := cuda_problem():
        return problem
    if importlib.util.find_spec("vllm") is None:
        return "needs vLLM with CUDA (pip install -e '.[gpu]'); nothing was timed or written"
    import torch

    if "fp8" in dtypes and torch.cuda.get_device_capability() < (8, 9):
        return "fp8 needs compute capability >= 8.9 (e4m3 dot); run with --dtypes bf16; nothing was timed or written"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        ns = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # argparse: --help (0) or a bad argument (2), already printed
        return int(e.code or 0)
    if problem := gpu_problem(ns.dtypes):
        print(f"{PROG}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _run(ns)


def _run(ns: argparse.Namespace) -> int:
    from moe_opt.bench.env_info import environment
    from moe_opt.kernels import default_table
    from moe_opt.tune.vllm_path import vllm_version

    out = Path(ns.out)
    env = environment() | {"vllm": vllm_version()}
    grid = cells(ns.shapes, ns.dtypes, ns.batches)
    table = default_table()  # what fused_experts reads on this GPU: its own table, else the packaged H200 one
    settings = {
        "routing": ns.routing,
        "trials": ns.trials,
        "replays_per_trial": REPLAYS_PER_TRIAL,
        "moe_opt_switches": {"swap_ab": ns.swap_ab, "respecialize": False},
        "vllm_tuned_config_folder": None,
        "moe_opt_tile_table": {"file": table.path.name if table.path else None, "tuned_on": table.meta.get("device")},
        "tolerance": AT_LEAST_AS_FAST_TOLERANCE,
    }
    print(f"[vs_vllm] {len(grid)} cells on {env['gpu']}, vLLM {env['vllm']}, Triton {env['triton']}", flush=True)
    records: list[dict[str, Any]] = []

    def write(partial: bool) -> None:
        doc = {"environment": env, "settings": settings, "cells": records, "summary": summarize(records)}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc | ({"partial": True} if partial else {}), indent=1) + "\n")

    for name in ns.shapes:
        for dtype in ns.dtypes:
            batches = [c.batch for c in grid if c.shape == name and c.dtype == dtype]
            for record in _bench_shape_dtype(name, dtype, batches, ns):
                records.append(record)
                write(partial=True)
    write(partial=False)
    summary = summarize(records)
    print(
        f"[vs_vllm] moe_opt at least as fast in {summary['at_least_as_fast']} of {summary['cells']} cells "
        f"(tolerance {AT_LEAST_AS_FAST_TOLERANCE:.0%}); slower: "
        f"{[(c['shape'], c['dtype'], c['batch'], round(c['ratio'], 3)) for c in summary['slower_cells']]}; "
        f"outputs disagree in {len(summary['mismatched_cells'])}; wrote {out}",
        flush=True,
    )
    return EXIT_MISMATCH if summary["mismatched_cells"] else EXIT_OK


def _bench_shape_dtype(
    name: str, dtype: str, batches: Sequence[int], ns: argparse.Namespace
) -> Iterator[dict[str, Any]]:
    """Every batch of one (shape, dtype) on one set of weights (allocated once), a record per cell as it is timed."""
    import torch

    from moe_opt.bench.kernel_profile import profile_calls
    from moe_opt.bench.layers import make_layers
    from moe_opt.bench.routing_dist import sample_routing
    from moe_opt.bench.timing import time_graphs_alternating_ms
    from moe_opt.kernels import KernelSwitches, fused_experts, plan_fused_moe
    from moe_opt.tune.vllm_path import fp8_quant_config, fused_experts_call

    shape, vshape = SHAPES[name], vllm_shape(SHAPES[name], dtype)
    sw = KernelSwitches(swap_ab=ns.swap_ab, respecialize=False, dtype=dtype)  # type: ignore[arg-type]
    layers = make_layers(shape, dtype, max(batches))
    quant = [
        None
        if ly.scales is None
        else fp8_quant_config(ly.scales.w13_scale, ly.scales.w2_scale, ly.scales.a1_scale, ly.scales.a2_scale)
        for ly in layers
    ]
    for batch in batches:
        plan = plan_fused_moe(batch, shape.num_experts, shape.hidden_size, shape.intermediate_size, shape.top_k, sw)
        vllm = vllm_choice(vshape, batch)
        topk_weights, topk_ids = sample_routing(ns.routing, batch, shape.num_experts, shape.top_k, seed=batch)
        xs = [ly.x[:batch] for ly in layers]
        moe_fns = [
            functools.partial(fused_experts, x, ly.w13, ly.w2, topk_weights, topk_ids, switches=sw, scales=ly.scales)
            for x, ly in zip(xs, layers, strict=True)
        ]
        vllm_fns = [
            fused_experts_call(x, ly.w13, ly.w2, topk_weights, topk_ids, vllm["config"], q)
            for x, ly, q in zip(xs, layers, quant, strict=True)
        ]
        check = compare(moe_fns[0](), vllm_fns[0](), dtype)
        moe_ms, vllm_ms = time_graphs_alternating_ms(
            [moe_fns, vllm_fns], trials=ns.trials, replays_per_trial=REPLAYS_PER_TRIAL
        )
        profiled = {"moe_opt": profile_calls(moe_fns[0]), "vllm": profile_calls(vllm_fns[0])} if ns.profile else None
        record = {
            "shape": name,
            "dtype": dtype,
            "batch": batch,
            "moe_opt_us": 1000.0 * moe_ms,
            "vllm_us": 1000.0 * vllm_ms,
            "ratio": vllm_ms / moe_ms,
            "moe_opt": {"switches": sw.label(), **dataclasses.asdict(plan)},
            "vllm": vllm,
            "check": check,
        } | ({"kernels_us": profiled} if profiled else {})
        print(
            f"[vs_vllm] {name:16s} {dtype:4s} T={batch:5d} moe_opt {record['moe_opt_us']:8.1f} us  "
            f"vLLM {record['vllm_us']:8.1f} us ({vllm['config_source']}, swap_ab={int(vllm['swap_ab'])})  "
            f"ratio {record['ratio']:.3f}  max|diff| {check['max_abs_diff']:.3g} {'ok' if check['ok'] else 'MISMATCH'}",
            flush=True,
        )
        yield record
    del layers, quant
    torch.cuda.empty_cache()


def compare(moe_out: Any, vllm_out: Any, dtype: str) -> dict[str, Any]:
    """moe_opt's output against vLLM's by the bounds moe_opt's own tests judge a kernel with (relative to vLLM's
    max |value|): both compute the same layer with different accumulation orders and rounding points."""
    from moe_opt.kernels.testing import BOUNDS, check_close

    diff = moe_out.float() - vllm_out.float()
    record: dict[str, Any] = {
        "max_abs_diff": diff.abs().max().item(),
        "rms_diff": diff.pow(2).mean().sqrt().item(),
        "vllm_max_abs": vllm_out.float().abs().max().item(),
        "bounds_rel": {"max": BOUNDS[dtype][0], "rms": BOUNDS[dtype][1]},
        "ok": True,
        "error": None,
    }
    try:
        check_close(moe_out, vllm_out, dtype)
    except AssertionError as e:
        record.update(ok=False, error=str(e))
    return record


if __name__ == "__main__":
    sys.exit(main())
