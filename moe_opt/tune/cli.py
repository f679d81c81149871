"""``moeperf tune``: tune vLLM's Triton fused-MoE kernel for one MoE shape on this GPU and write vLLM's config.

    moeperf tune --experts 128 --hidden 2048 --intermediate 768 --tp 2 --top-k 8 --dtype fp8_w8a8 \\
        --block-shape 128,128 --routing from:runs/<id>/result.json --out /shared/tuned/h200
    moeperf tune --model /models/Qwen3-30B-A3B-FP8 --tp 2 --out /shared/tuned/h200

Then give the folder to an arm: ``flags: {moe_backend: triton, tuned_config_dir: /shared/tuned/h200}``.

Swap-AB is not a separate choice here, because vLLM's format cannot carry one: vLLM 0.26 decides it per launch
from the tile alone (``invoke_fused_moe_triton_kernel``: ``SWAP_AB = enable_swap_ab(BLOCK_SIZE_M, BLOCK_SIZE_N)``
for FP8 w8a8, i.e. SM90 and BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64; False otherwise) and passes
``SWAP_AB=`` beside ``**config`` to the kernel, so a ``SWAP_AB`` key in the JSON would be a duplicate keyword.
Every candidate is therefore timed as vLLM will run it, Swap-AB included where vLLM's heuristic turns it on, and
the log records per candidate whether it ran with Swap-AB: choosing a tile with BLOCK_SIZE_M < 64 and
BLOCK_SIZE_N >= 64 *is* choosing Swap-AB for that bucket. The timings hold for arms that leave ``swap_ab`` at
vLLM's default; an arm forcing it runs other kernels than the ones timed.

Exit codes: 0 written, 1 tuning failed, 2 bad arguments or no CUDA GPU (checked after the arguments, before
anything is allocated).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from moe_opt.tune.candidates import SPACES, Space
from moe_opt.tune.shape import DTYPES, Dtype, MoeShape, ShapeError, shape_from_model_arg

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
SHAPE_OPTIONS = ("experts", "hidden", "intermediate", "top_k")


class ArgError(ValueError):
    """Arguments that do not describe a tuning run; exit 2 with the message."""


def build_parser() -> argparse.ArgumentParser:
    from moe_opt.tune.run import VLLM_BUCKETS

    p = argparse.ArgumentParser(
        prog="moeperf tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    shape = p.add_argument_group("MoE shape (or --model)")
    shape.add_argument("--experts", type=int, help="E: routed experts per MoE layer")
    shape.add_argument("--hidden", type=int, help="H: model width")
    shape.add_argument("--intermediate", type=int, help="I: per-expert FFN width of the whole model (before TP)")
    shape.add_argument("--tp", type=int, help="tensor-parallel ranks; per-rank intermediate = I / tp (default 1)")
    shape.add_argument("--top-k", type=int, help="experts per token")
    shape.add_argument("--dtype", choices=DTYPES, help="fp8_w8a8 or bf16 (with --model: from its config)")
    shape.add_argument("--block-shape", help="FP8 weight block N,K (block-quantised checkpoints, e.g. 128,128)")
    shape.add_argument("--model", help="an HF config.json (or its folder) or a moeperf experiment YAML")
    p.add_argument(
        "--buckets",
        default=",".join(map(str, VLLM_BUCKETS)),
        help="batch sizes to tune, comma-separated (default: vLLM's tuner's list)",
    )
    p.add_argument(
        "--routing",
        default="uniform",
        help="uniform | zipf:S | from:RESULT_JSON[:ARM] (tokens per expert a moeperf run observed) | hist:PATH",
    )
    p.add_argument("--space", choices=SPACES, default="small", help="candidate tiles (full: vLLM's tuner's grid)")
    p.add_argument("--trials", type=int, default=10, help="timed graph replays per candidate (median)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="folder for VLLM_TUNED_CONFIG_FOLDER (created)")
    p.add_argument("--log", help="log JSON path (default: OUT/logs/<config file>.tune-log.json)")
    return p


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ArgError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ArgError(f"{what} must be positive integers, got {text!r}")
    return values


def parse_shape(ns: argparse.Namespace) -> MoeShape:
    """The shape from --model or from the explicit options (all of them), never a mix that could disagree."""
    dtype: Dtype | None = ns.dtype
    block = _ints(ns.block_shape, "--block-shape") if ns.block_shape else None
    if block is not None and len(block) != 2:
        raise ArgError(f"--block-shape must be N,K, got {ns.block_shape!r}")
    if ns.model:
        given = [f"--{o.replace('_', '-')}" for o in SHAPE_OPTIONS if getattr(ns, o) is not None]
        if given or block is not None:
            raise ArgError(f"--model gives the shape; drop {', '.join(given or ['--block-shape'])}")
        return shape_from_model_arg(ns.model, ns.tp, dtype)
    missing = [f"--{o.replace('_', '-')}" for o in (*SHAPE_OPTIONS, "dtype") if getattr(ns, o) is None]
    if missing:
        raise ArgError(f"give --model or all of the shape options; missing {', '.join(missing)}")
    assert dtype is not None
    return MoeShape(
        experts=ns.experts,
        hidden=ns.hidden,
        intermediate=ns.intermediate,
        tp=1 if ns.tp is None else ns.tp,
        top_k=ns.top_k,
        dtype=dtype,
        block_shape=(block[0], block[1]) if block else None,
    )


def check_routing(spec: str, experts: int) -> None:
    """Draw-free check of --routing: the same function the tuner draws from, so what passes here runs there."""
    from moe_opt.bench.routing_dist import expert_popularity

    try:
        expert_popularity(spec, experts)
    except (ValueError, OSError) as e:
        raise ArgError(f"--routing {spec}: {e}") from None


def validate(argv: Sequence[str]) -> tuple[argparse.Namespace, MoeShape, list[int]]:
    """Everything checkable without a GPU; raises ArgError / ShapeError (exit 2)."""
    ns = build_parser().parse_args(list(argv))
    shape = parse_shape(ns)
    buckets = sorted(set(_ints(ns.buckets, "--buckets")))
    if ns.trials < 1:
        raise ArgError(f"--trials must be at least 1, got {ns.trials}")
    check_routing(ns.routing, shape.experts)
    out = Path(ns.out)
    if out.exists() and not out.is_dir():
        raise ArgError(f"--out {out} exists and is not a folder")
    return ns, shape, buckets


def cuda_problem() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return (
            "needs a CUDA GPU: vLLM's Triton fused_moe_kernel does not run here (vLLM's CPU build disables Triton); "
            "nothing was timed or written"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        ns, shape, buckets = validate(sys.argv[1:] if argv is None else argv)
    except (ArgError, ShapeError) as e:
        print(f"moeperf tune: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return int(e.code or 0)
    if problem := cuda_problem():
        print(f"moeperf tune: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _run(ns, shape, buckets)


def _run(ns: argparse.Namespace, shape: MoeShape, buckets: list[int]) -> int:
    from moe_opt.bench.env_info import environment
    from moe_opt.tune.run import tune
    from moe_opt.tune.select import BucketChoice, TuneError
    from moe_opt.tune.timing import gpu_time_fn
    from moe_opt.tune.vllm_path import vllm_version

    def progress(c: BucketChoice) -> None:
        w, failed = c.winner, sum(t.time_us is None for t in c.timed)
        print(
            f"[tune] batch {c.bucket:>5}: {len(c.timed)} configs ({failed} failed), vLLM's {c.default.time_us:.1f} us, "
            f"best {w.time_us:.1f} us {w.config} swap_ab={w.swap_ab}: x{c.speedup:.3f}",
            flush=True,
        )

    env = environment() | {"vllm": vllm_version()}
    space: Space = ns.space
    print(f"[tune] {shape.describe()} on {env['gpu']}, vLLM {env['vllm']}, {len(buckets)} buckets", flush=True)
    try:
        outcome = tune(
            shape,
            buckets,
            ns.routing,
            Path(ns.out),
            gpu_time_fn(shape, ns.routing, seed=ns.seed, trials=ns.trials),
            env,
            space=space,
            log_path=Path(ns.log) if ns.log else None,
            on_bucket=progress,
        )
    except TuneError as e:
        print(f"moeperf tune: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"[tune] wrote {outcome.config_path} (log {outcome.log_path})")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
