"""``moe_opt.bench.align_paths`` off the GPU: the crossover it reports and its refusal without CUDA.

tests/gpu/test_gpu_kernels.py times both alignment paths on a GPU; here only what decides the limit is checked.
"""

from __future__ import annotations

import pytest
import torch

from moe_opt.bench.align_paths import crossover, main


def _row(experts: int, slots: int, one_us: float, chunked_us: float, block_m: int = 16) -> dict:
    return {"experts": experts, "block_m": block_m, "slots": slots, "one_launch_us": one_us, "chunked_us": chunked_us}


def test_crossover_is_the_last_slot_count_before_one_launch_first_loses():
    rows = [
        _row(128, 4096, 9.0, 8.0),  # one launch loses here ...
        _row(128, 1024, 5.0, 6.0),
        _row(128, 2048, 6.0, 6.0),  # a tie keeps one launch
        _row(128, 8192, 8.0, 9.0),  # ... and a later win does not count: the limit is one number
        _row(8, 1024, 7.0, 6.0),  # one launch never wins
        _row(8, 1024, 5.0, 6.0, block_m=64),
    ]
    assert crossover(rows) == {"E=8 block_m=16": None, "E=8 block_m=64": 1024, "E=128 block_m=16": 2048}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a box without CUDA")
def test_refuses_without_cuda(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["--out", str(out)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("bad", [["--slots", "1024,x"], ["--block-m", "0"], ["--slots", ""]])
def test_bad_arguments_exit_2_with_the_field(bad, tmp_path, capsys):
    out = tmp_path / "a.json"
    with pytest.raises(SystemExit) as exc:
        main([*bad, "--out", str(out)])
    assert exc.value.code == 2 and bad[0] in capsys.readouterr().err and not out.exists()
