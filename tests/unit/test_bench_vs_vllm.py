"""``moe_opt.bench.vs_vllm`` on CPU: everything but the timed GPU run.

The arguments (exit 2 with the message, before any GPU check), the cell grid, vLLM's side of a cell as the
installed vLLM decides it (its CPU build: no shipped file for ``device_name=cpu``, no Swap-AB), the summary's
verdict per cell and the refusal without CUDA. tests/gpu/test_gpu_bench_vs_vllm.py runs the comparison itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from moe_opt.bench import vs_vllm
from moe_opt.bench.shapes import SHAPES
from moe_opt.bench.vs_vllm import Cell, cells, main, parse_args, summarize, vllm_choice, vllm_shape
from moe_opt.flags import TUNED_CONFIG_ENV_VAR
from moe_opt.tune.vllm_path import config_file_name, fused_moe_module

REPO = Path(__file__).resolve().parents[2]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a box without CUDA")


# --- arguments and cells ---------------------------------------------------------------------------------------


def test_the_default_grid_is_four_shapes_two_dtypes_seven_batches() -> None:
    ns = parse_args([])
    assert ns.shapes == ["mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"] == list(SHAPES)
    assert ns.dtypes == ["bf16", "fp8"]
    assert ns.batches == [1, 4, 16, 64, 256, 1024, 4096]
    assert (ns.trials, ns.routing, ns.swap_ab) == (20, "uniform", False)
    assert ns.out == "moe_opt/bench/results/h200/vs_vllm.json"
    grid = cells(ns.shapes, ns.dtypes, ns.batches)
    assert len(grid) == 56 == len(set(grid))
    # shape-major, then dtype, then batch: one set of weights per (shape, dtype)
    assert grid[:8] == [Cell("mixtral-8x7b", "bf16", b) for b in ns.batches] + [Cell("mixtral-8x7b", "fp8", 1)]
    assert grid[-1] == Cell("deepseek-v3", "fp8", 4096)


def test_options_choose_the_cells(tmp_path: Path) -> None:
    out = tmp_path / "new" / "vs.json"
    ns = parse_args(
        ["--shapes", "qwen3-30b-a3b,mixtral-8x7b", "--dtypes", "fp8", "--batches", "64,1,64", "--trials", "3"]
        + ["--routing", "zipf:1.2", "--swap-ab", "--out", str(out)]
    )
    assert cells(ns.shapes, ns.dtypes, ns.batches) == [
        Cell("qwen3-30b-a3b", "fp8", 1),
        Cell("qwen3-30b-a3b", "fp8", 64),
        Cell("mixtral-8x7b", "fp8", 1),
        Cell("mixtral-8x7b", "fp8", 64),
    ]
    assert (ns.trials, ns.routing, ns.swap_ab, ns.out) == (3, "zipf:1.2", True, str(out))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shapes", "llama-70b"], "argument --shapes: unknown shape llama-70b (one of mixtral-8x7b, "),
        (["--shapes", ","], "argument --shapes: unknown shape ','"),
        (["--dtypes", "bf16,fp16"], "argument --dtypes: unknown dtype fp16 (one of bf16, fp8)"),
        (["--batches", "0,4"], "argument --batches: positive integers expected, got '0,4'"),
        (["--batches", "1,x"], "argument --batches: comma-separated integers expected, got '1,x'"),
        (["--trials", "0"], "--trials must be at least 1, got 0"),
        (["--routing", "gauss"], "--routing gauss: unknown routing spec 'gauss'"),
        (["--routing", "zipf:steep"], "--routing zipf:steep:"),
    ],
)
def test_bad_arguments_exit_2_with_a_message_before_anything_else(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "vs.json"
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "CUDA" not in err and not out.exists()  # refused on the arguments, not on the machine


def test_a_folder_is_no_output_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} is a folder; give the JSON file's path" in capsys.readouterr().err


def test_help_says_what_the_claim_is(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "at least as fast as vLLM's" in capsys.readouterr().out


# --- vLLM's side of a cell -------------------------------------------------------------------------------------


def test_vllms_side_is_what_the_installed_vllm_launches_without_a_tuned_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shape = vllm_shape(SHAPES["mixtral-8x7b"], "fp8")
    assert (shape.experts, shape.hidden, shape.intermediate_per_rank, shape.top_k) == (8, 4096, 1792, 2)
    assert shape.vllm_dtype == "fp8_w8a8" and shape.block_shape is None  # per-tensor, as moe_opt's FP8 path
    assert vllm_shape(SHAPES["deepseek-v3"], "bf16").vllm_dtype is None
    name = config_file_name(shape)
    assert name.startswith("E=8,N=1792,device_name=") and name.endswith(",dtype=fp8_w8a8.json")

    # A tuned folder in the environment is not what an engine without one runs: the lookup ignores it, and the
    # variable is back afterwards.
    tuned = {"triton_version": "x", "16": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128}}
    (tmp_path / name).write_text(json.dumps(tuned))
    monkeypatch.setenv(TUNED_CONFIG_ENV_VAR, str(tmp_path))
    choice = vllm_choice(shape, 16)
    default = fused_moe_module().get_default_config(16, 8, 1792, 4096, 2, "fp8_w8a8", None)
    assert choice == {"config": default, "config_source": "default", "config_file": name, "swap_ab": False}
    assert os.environ[TUNED_CONFIG_ENV_VAR] == str(tmp_path)


# --- the summary -----------------------------------------------------------------------------------------------


def record(shape: str, batch: int, ratio: float, ok: bool = True) -> dict[str, Any]:
    return {
        "shape": shape,
        "dtype": "fp8",
        "batch": batch,
        "moe_opt_us": 100.0,
        "vllm_us": 100.0 * ratio,
        "ratio": ratio,
        "check": {"ok": ok, "error": None if ok else "fp8: max abs error 1 > 0.2 x max|ref| 2"},
    }


def test_a_cell_within_one_percent_is_a_tie_and_slower_ones_are_listed() -> None:
    assert vs_vllm.AT_LEAST_AS_FAST_TOLERANCE == 0.01
    cells_ = [record("a", 1, 1.25), record("a", 4, 0.99), record("b", 1, 0.9899), record("b", 4, 1.0, ok=False)]
    s = summarize(cells_)
    assert s["cells"] == 4 and s["tolerance"] == 0.01
    assert s["at_least_as_fast"] == 3
    assert s["slower_cells"] == [
        {"shape": "b", "dtype": "fp8", "batch": 1, "moe_opt_us": 100.0, "vllm_us": 98.99, "ratio": 0.9899}
    ]
    assert s["mismatched_cells"] == [
        {"shape": "b", "dtype": "fp8", "batch": 4, "error": "fp8: max abs error 1 > 0.2 x max|ref| 2"}
    ]
    assert s["min_ratio"] == 0.9899
    assert s["geomean_ratio"] == pytest.approx((1.25 * 0.99 * 0.9899 * 1.0) ** 0.25)
    assert s["claim_holds"] is False


def test_the_claim_holds_only_when_every_cell_is_as_fast_and_agrees() -> None:
    assert summarize([record("a", 1, 1.0), record("a", 4, 0.995)])["claim_holds"] is True
    assert summarize([record("a", 1, 1.5, ok=False)])["claim_holds"] is False  # fast by computing something else
    empty = summarize([])
    assert empty["claim_holds"] is False and empty["min_ratio"] is None and empty["slower_cells"] == []


# --- no GPU ----------------------------------------------------------------------------------------------------


@NO_CUDA
def test_without_cuda_it_exits_2_after_checking_the_arguments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "vs.json"
    assert main(["--shapes", "mixtral-8x7b", "--batches", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python3 -m moe_opt.bench.vs_vllm: needs a CUDA GPU")
    assert "nothing was timed or written" in err and not out.exists()


@NO_CUDA
def test_the_module_command_exits_2_without_cuda(tmp_path: Path) -> None:
    out = tmp_path / "vs.json"
    r = subprocess.run(
        [sys.executable, "-m", "moe_opt.bench.vs_vllm", "--dtypes", "bf16", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr, r.stderr[-2000:]
    assert not out.exists()


def test_a_profile_is_summed_per_kernel_per_call_most_expensive_first() -> None:
    from moe_opt.bench.kernel_profile import NAME_CHARS, per_call_us

    long_a, long_b = "k" * NAME_CHARS + "_a", "k" * NAME_CHARS + "_b"  # alike once shortened: one row
    rows = [("align", 40.0, 10), ("gemm", 900.0, 20), ("host_event", 0.0, 10), (long_a, 10.0, 10), (long_b, 10.0, 10)]
    got = per_call_us(rows, calls=10)
    assert list(got) == ["gemm", "align", "k" * NAME_CHARS]
    assert got["gemm"] == {"us_per_call": 90.0, "launches_per_call": 2.0}
    assert got["k" * NAME_CHARS] == {"us_per_call": 2.0, "launches_per_call": 2.0}
    with pytest.raises(ValueError, match="calls must be at least 1"):
        per_call_us(rows, calls=0)


def test_the_tuner_can_try_vllms_own_tile_beside_its_search_space() -> None:
    """``bench/tune.py --seed-vllm``: the tile the installed vLLM would launch for the cell, exactly, among the
    candidates of both GEMMs, once; without the flag the search space alone."""
    from moe_opt.bench.tune import bucket_candidates, candidates, vllm_seed

    shape = SHAPES["qwen3-30b-a3b"]
    for dtype, bucket in (("bf16", 1024), ("fp8", 4096), ("fp8", 1)):
        config = vllm_choice(vllm_shape(shape, dtype), bucket)["config"]
        seed = vllm_seed(shape, dtype, bucket)
        assert (seed.block_m, seed.block_n, seed.block_k, seed.num_warps, seed.num_stages) == (
            config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"], config["num_warps"],
            config["num_stages"],
        )  # fmt: skip
        assert seed.group_m == config.get("GROUP_SIZE_M", 1)
        seeded = bucket_candidates(bucket, shape, dtype, seed_vllm=True)
        assert seeded.count(seed) == 1 and set(candidates(bucket, shape, dtype)) <= set(seeded)
        assert bucket_candidates(bucket, shape, dtype, seed_vllm=False) == candidates(bucket, shape, dtype)


def test_seeding_from_vllm_without_vllm_exits_2_before_tuning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from moe_opt.bench import tune

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    out = tmp_path / "table.json"
    with pytest.raises(SystemExit) as exit_:
        tune.main(["--seed-vllm", "--out", str(out)])
    assert exit_.value.code == 2 and not out.exists()
    assert "--seed-vllm needs vLLM installed" in capsys.readouterr().err
