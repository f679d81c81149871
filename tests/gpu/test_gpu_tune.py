"""``moeperf tune`` end to end on a GPU: vLLM's own fused_experts timed over two buckets for a tiny shape, the
file written under vLLM's name for this GPU, and vLLM's lookup returning the winners from the folder.

The CPU suite (tests/unit/test_tune.py) covers everything but the timer; only here does vLLM's Triton
``fused_moe_kernel`` run, so only here is a candidate compiled, timed and, where Triton cannot build it, skipped.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

# vLLM is looked up, not imported: importing it imports Triton, and tests/kernels (collected after this folder)
# can only pick Triton's CPU interpreter while Triton is not imported yet.
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM"),
]


@pytest.mark.parametrize(("dtype", "block"), [("bf16", None), ("fp8_w8a8", "128,128")])
def test_tune_a_tiny_shape_over_two_buckets(tmp_path: Path, dtype: str, block: str | None) -> None:
    from moe_opt.tune import cli
    from moe_opt.tune.candidates import TILE_KEYS
    from moe_opt.tune.shape import MoeShape
    from moe_opt.tune.vllm_path import config_file_name, tuned_table

    out = tmp_path / "tuned"
    args = ["--experts", "8", "--hidden", "512", "--intermediate", "1024", "--tp", "2", "--top-k", "2"]
    args += ["--dtype", dtype, "--buckets", "1,64", "--routing", "zipf:1.2", "--trials", "3", "--out", str(out)]
    args += ["--block-shape", block] if block else []
    assert cli.main(args) == 0

    shape = MoeShape(8, 512, 1024, 2, 2, dtype, (128, 128) if block else None)  # type: ignore[arg-type]
    name = config_file_name(shape)
    assert (out / name).is_file() and "NVIDIA" in name
    written = json.loads((out / name).read_text())
    assert written.pop("triton_version")
    assert tuned_table(shape, str(out)) == {int(k): v for k, v in written.items()}
    assert sorted(map(int, written)) == [1, 64] and all(list(v) == list(TILE_KEYS) for v in written.values())

    log = json.loads((out / "logs" / (Path(name).stem + ".tune-log.json")).read_text())
    assert log["environment"]["gpu"] != "none" and log["environment"]["vllm"]
    for b in log["buckets"]:
        timed = [c for c in b["candidates"] if c["time_us"] is not None]
        assert len(timed) > 1 and b["speedup_vs_vllm_default"] >= 1.0
        assert b["winner"]["time_us"] == min(c["time_us"] for c in timed)
