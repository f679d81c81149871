"""``moeperf tune`` on CPU: argument checks (exit 2), routing from a result file, the candidate space, winners
chosen from given timings, and the written folder read back by the installed vLLM's own ``get_moe_configs``.

Only the timer is replaced (by given numbers): shapes, vLLM's file names, its fallback configs and its lookups are
the installed vLLM's, which on CPU name the device ``cpu``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from moe_opt.bench.env_info import environment
from moe_opt.bench.routing_dist import expert_load_counts, expert_popularity, sample_routing
from moe_opt.flags import TUNED_CONFIG_ENV_VAR, OptimizationFlags
from moe_opt.tune import cli
from moe_opt.tune.candidates import SHARED_MEMORY_BYTES, TILE_KEYS, candidates, fits
from moe_opt.tune.folder import folder_problem
from moe_opt.tune.run import VLLM_BUCKETS, tune
from moe_opt.tune.select import TuneError, choose
from moe_opt.tune.shape import MoeShape, ShapeError, shape_from_model_arg
from moe_opt.tune.vllm_path import config_file_name, fused_moe_module, vllm_config, vllm_version

REPO = Path(__file__).resolve().parents[2]
QWEN3 = MoeShape(experts=128, hidden=2048, intermediate=768, tp=2, top_k=8, dtype="fp8_w8a8", block_shape=(128, 128))
SMALL = MoeShape(experts=8, hidden=256, intermediate=512, tp=2, top_k=2, dtype="fp8_w8a8", block_shape=(128, 128))
SHAPE_ARGS = ["--experts", "8", "--hidden", "256", "--intermediate", "512", "--top-k", "2", "--dtype", "bf16"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(list(args))
    return code, capsys.readouterr().err


# --- arguments -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (SHAPE_ARGS + ["--tp", "3"], "--intermediate 512 is not divisible by --tp 3"),
        (SHAPE_ARGS[:-2], "missing --dtype"),
        (["--experts", "8"], "missing --hidden, --intermediate, --top-k, --dtype"),
        (SHAPE_ARGS + ["--block-shape", "128,128"], "--block-shape is an FP8 weight block: it needs --dtype fp8_w8a8"),
        (SHAPE_ARGS + ["--buckets", "1,x"], "--buckets must be comma-separated integers"),
        (SHAPE_ARGS + ["--buckets", "0,4"], "--buckets must be positive integers"),
        (SHAPE_ARGS + ["--routing", "zipf:steep"], "--routing zipf:steep:"),
        (SHAPE_ARGS + ["--routing", "gauss"], "unknown routing spec 'gauss'"),
        (["--model", "nowhere.json", "--experts", "8"], "--model gives the shape; drop --experts"),
        (["--model", "nowhere/config.json"], "--model nowhere/config.json: no such config.json"),
        (SHAPE_ARGS[:2] + ["--top-k", "9"] + SHAPE_ARGS[2:6] + SHAPE_ARGS[8:], "--top-k 9 is more than --experts 8"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    code, err = run_cli(capsys, *args, "--out", str(tmp_path / "out"))
    assert code == 2
    assert message in err, err
    assert not (tmp_path / "out").exists()


def test_out_must_be_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert run_cli(capsys, *SHAPE_ARGS, "--out", str(tmp_path / "file")) == (
        2,
        f"moeperf tune: --out {tmp_path / 'file'} exists and is not a folder\n",
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a box without CUDA")
def test_without_cuda_it_exits_2_after_checking_the_arguments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = run_cli(capsys, *SHAPE_ARGS, "--tp", "2", "--out", str(tmp_path / "out"))
    assert code == 2 and "needs a CUDA GPU" in err and "nothing was timed or written" in err
    assert not (tmp_path / "out").exists()
    # through the moeperf command, as a delegated subcommand
    from cluster.cli.main import main as moeperf_main

    assert moeperf_main(["tune", *SHAPE_ARGS, "--out", str(tmp_path / "out")]) == 2


def test_a_shape_from_an_hf_config_and_from_an_experiment(tmp_path: Path) -> None:
    qwen3 = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 2048,
        "moe_intermediate_size": 768,
        "intermediate_size": 6144,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
    }
    (tmp_path / "config.json").write_text(json.dumps(qwen3))
    assert shape_from_model_arg(str(tmp_path), 2, None) == QWEN3
    assert shape_from_model_arg(str(tmp_path / "config.json"), 4, "bf16").intermediate_per_rank == 192
    with pytest.raises(ShapeError, match="per-rank intermediate 96 and hidden 2048 must be multiples of the FP8 block"):
        shape_from_model_arg(str(tmp_path), 8, None)  # vLLM cannot load Qwen3-30B-A3B-FP8 at TP 8 either
    tiny = shape_from_model_arg(str(REPO / "experiments" / "quick-cpu.yaml"), None, None)
    assert (tiny.experts, tiny.hidden, tiny.intermediate, tiny.tp, tiny.top_k, tiny.dtype) == (
        8,
        128,
        256,
        1,
        2,
        "bf16",
    )


# --- routing from a result file --------------------------------------------------------------------------------


def result_json(path: Path) -> Path:
    """A result-like file: two ok arms and a failed one, per-layer tokens per expert (as the plugin records)."""
    arms = [
        {
            "name": "baseline",
            "status": "ok",
            "expert_load": [{"layer": 0, "tokens": [6, 2, 0, 0]}, {"layer": 1, "tokens": [2, 2, 0, 0]}],
        },
        {"name": "tuned", "status": "ok", "expert_load": [{"layer": 0, "tokens": [0, 0, 4, 4]}]},
        {"name": "broken", "status": "failed", "expert_load": [{"layer": 0, "tokens": [100, 0, 0, 0]}]},
        {"name": "old", "status": "ok"},
    ]
    path.write_text(json.dumps({"schema_version": 3, "arms": arms}))
    return path


def test_routing_from_a_result_file_sums_layers_and_ok_arms(tmp_path: Path) -> None:
    path = result_json(tmp_path / "result.json")
    assert expert_load_counts(path) == [8, 4, 4, 4]
    assert expert_load_counts(path, "tuned") == [0, 0, 4, 4]
    assert expert_popularity(f"from:{path}", 4).tolist() == pytest.approx([0.4, 0.2, 0.2, 0.2])
    assert expert_popularity(f"from:{path}:baseline", 4).tolist() == pytest.approx([2 / 3, 1 / 3, 0, 0])
    _, ids = sample_routing(f"from:{path}:tuned", 64, 4, 2, device="cpu")
    assert set(ids.flatten().tolist()) == {2, 3}  # experts the arm never used are never drawn
    with pytest.raises(ValueError, match="arm 'old' hold no expert_load"):
        expert_load_counts(path, "old")
    with pytest.raises(ValueError, match="no arm 'ghost'"):
        expert_load_counts(path, "ghost")
    with pytest.raises(ValueError, match="expert_load has 4 experts, the shape has 8"):
        expert_popularity(f"from:{path}", 8)


def test_routing_from_a_result_without_expert_load_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"arms": [{"name": "baseline", "status": "ok"}]}))
    code, err = run_cli(capsys, *SHAPE_ARGS, "--routing", f"from:{path}", "--out", str(tmp_path / "o"))
    assert code == 2
    assert f"{path}: the ok arms ['baseline'] hold no expert_load" in err


# --- candidate space -------------------------------------------------------------------------------------------


def test_the_candidate_space_fits_the_shape_and_follows_tokens_per_expert() -> None:
    bf16 = MoeShape(experts=8, hidden=4096, intermediate=14336, tp=8, top_k=2, dtype="bf16")
    for shape in (QWEN3, bf16):
        for bucket in VLLM_BUCKETS:
            cands = candidates(bucket, shape)
            assert cands and all(list(c) == list(TILE_KEYS) and fits(c, shape) for c in cands)
            assert len({tuple(c.values()) for c in cands}) == len(cands)
    # Block FP8: N tiles divide the 128 block, K tiles are the block (vLLM clamps larger ones to it).
    assert {c["BLOCK_SIZE_N"] for c in candidates(64, QWEN3)} == {64, 128}
    assert {c["BLOCK_SIZE_K"] for c in candidates(64, QWEN3)} == {128}
    # Decode (1 token x 8 of 128 experts) gets small M tiles; 4096 tokens (256 per expert) large ones.
    assert {c["BLOCK_SIZE_M"] for c in candidates(1, QWEN3)} == {16, 32}
    assert {c["BLOCK_SIZE_M"] for c in candidates(4096, QWEN3)} == {32, 64, 128}
    assert len(candidates(64, bf16, "full")) > 5 * len(candidates(64, bf16))
    too_deep = {"BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 256, "num_stages": 5}
    assert (256 * 256 * 2) * 2 * 5 > SHARED_MEMORY_BYTES and not fits(too_deep, bf16)


# --- choosing winners from given timings -----------------------------------------------------------------------

DEFAULT = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "SPLIT_K": 1,
    "num_warps": 4,
    "num_stages": 4,
}


def tile_of(bm: int, bn: int) -> dict[str, int]:
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": 128,
        "GROUP_SIZE_M": 1,
        "num_warps": 4,
        "num_stages": 3,
    }


def timer(times: Mapping[tuple[int, int], float]):  # noqa: ANN201 - a TimeFn
    def time_us(bucket: int, config: Mapping[str, int]) -> float:
        key = (config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"])
        if key not in times:
            raise RuntimeError("out of resources: shared memory")
        return times[key] * bucket

    return time_us


def test_the_fastest_config_wins_and_its_speedup_is_over_vllms_own() -> None:
    times = {(16, 64): 10.0, (32, 64): 8.0, (64, 128): 12.0}
    swap = lambda c: c["BLOCK_SIZE_M"] < 64 and c["BLOCK_SIZE_N"] >= 64  # noqa: E731 - vLLM's SM90 rule
    c = choose(2, [tile_of(64, 128), tile_of(32, 64), tile_of(128, 256), tile_of(16, 64)], DEFAULT, timer(times), swap)
    assert c.winner.config == tile_of(32, 64) and c.winner.time_us == 16.0 and c.winner.swap_ab
    assert c.default.vllm_default and c.default.time_us == 20.0 and "SPLIT_K" not in c.default.config
    assert c.speedup == pytest.approx(1.25)
    failed = [t for t in c.timed if t.time_us is None]
    assert [t.config for t in failed] == [tile_of(128, 256)] and "out of resources" in (failed[0].error or "")
    assert len(c.timed) == 5  # vLLM's and the four candidates
    again = choose(2, [tile_of(16, 64) | {"num_stages": 4}, tile_of(32, 64)], DEFAULT, timer(times))
    assert [t.vllm_default for t in again.timed] == [True, False]  # a candidate equal to vLLM's is timed once
    # Nothing beats vLLM's own: it is kept (speedup 1), ties included.
    keep = choose(1, [tile_of(64, 128)], DEFAULT, timer({(16, 64): 5.0, (64, 128): 5.0}))
    assert keep.winner.vllm_default and keep.speedup == 1.0
    with pytest.raises(TuneError, match="bucket 4: vLLM's own config"):
        choose(4, [tile_of(32, 64)], DEFAULT, timer({(32, 64): 1.0}))


# --- the written folder, read back by the installed vLLM -------------------------------------------------------


def test_the_written_folder_is_what_vllms_get_moe_configs_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TUNED_CONFIG_ENV_VAR, raising=False)
    out = tmp_path / "tuned"
    env = environment() | {"vllm": vllm_version()}
    buckets = [1, 16, 64]

    def time_us(bucket: int, config: Mapping[str, int]) -> float:  # prefers deep pipelines, then small M tiles
        return 100.0 - 10 * config["num_stages"] + config["BLOCK_SIZE_M"] / 100 + config["num_warps"] / 1000

    outcome = tune(SMALL, buckets, "zipf:1.2", out, time_us, env)
    name = config_file_name(SMALL)
    assert "device_name=" in name and name.endswith(",dtype=fp8_w8a8,block_shape=[128,128].json")
    assert outcome.config_path == out / name and folder_problem(str(out)) is None
    written = json.loads(outcome.config_path.read_text())
    assert written.pop("triton_version") == env["triton"]
    assert list(written) == ["1", "16", "64"] and all(list(v) == list(TILE_KEYS) for v in written.values())
    assert written["1"]["num_stages"] == 5 and written["1"]["BLOCK_SIZE_M"] == 16

    # An engine of an arm with tuned_config_dir gets the folder through the flags' environment; vLLM's own,
    # lru-cached lookup then returns exactly the written table.
    fm = fused_moe_module()
    for var, value in OptimizationFlags(moe_backend="triton", tuned_config_dir=str(out)).engine_env().items():
        monkeypatch.setenv(var, value)
    fm.get_moe_configs.cache_clear()
    try:
        loaded = fm.get_moe_configs(SMALL.experts, SMALL.intermediate_per_rank, "fp8_w8a8", 128, 128)
    finally:
        fm.get_moe_configs.cache_clear()
    assert loaded == {int(k): v for k, v in written.items()}
    assert vllm_config(SMALL, 20, folder=str(out)) == written["16"]  # vLLM's nearest bucket
    assert vllm_config(SMALL, 20, folder=None) != written["16"]  # without the folder: its default heuristic

    log = json.loads(outcome.log_path.read_text())
    assert outcome.log_path.parent == out / "logs"  # beside the config file, never matched as one
    assert log["config_file"] == name and log["routing"] == "zipf:1.2"
    assert {"gpu", "torch", "triton", "vllm", "date_utc", "command"} <= set(log["environment"])
    first = log["buckets"][0]
    assert first["bucket"] == 1 and first["winner"]["config"] == written["1"]
    assert first["vllm_default"]["config"] == {k: v for k, v in vllm_config(SMALL, 1).items() if k in TILE_KEYS}
    assert first["speedup_vs_vllm_default"] == pytest.approx(
        first["vllm_default"]["time_us"] / first["winner"]["time_us"]
    )
    assert len(first["candidates"]) == 1 + len(candidates(1, SMALL)) - 1 * any(
        c == first["vllm_default"]["config"] for c in candidates(1, SMALL)
    )
