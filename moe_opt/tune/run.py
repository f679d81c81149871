"""One tuning run: time every bucket through vLLM's path, write vLLM's file and the log, and check vLLM reads it.

The timing function and the candidate space are parameters (the GPU timer and ``candidates`` by default in the
CLI), so everything but the timer runs, unchanged, in the CPU tests. After writing, vLLM's own
``try_get_optimal_moe_config`` is asked, with the folder as its tuned folder, for every bucket: a file vLLM would
not find (another device name, TP size or dtype) is an error here, not a silent fallback in an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moe_opt.tune.candidates import Space, Tile, candidates, tile
from moe_opt.tune.output import log_path_for, log_record, write_config, write_log
from moe_opt.tune.select import BucketChoice, TuneError, choose_all
from moe_opt.tune.shape import MoeShape
from moe_opt.tune.timing import TimeFn
from moe_opt.tune.vllm_path import config_file_name, swap_ab, vllm_config

VLLM_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
"""The batch sizes vLLM's own tuner (benchmarks/kernels/benchmark_moe.py) writes configs for."""


@dataclass(frozen=True)
class TuneOutcome:
    config_path: Path
    log_path: Path
    choices: list[BucketChoice]


def tune(
    shape: MoeShape,
    buckets: Sequence[int],
    routing: str,
    out_dir: Path,
    time_us: TimeFn,
    environment: Mapping[str, Any],
    *,
    space: Space = "small",
    candidates_for: Callable[[int], Sequence[Tile]] | None = None,
    log_path: Path | None = None,
    on_bucket: Callable[[BucketChoice], None] = lambda c: None,
) -> TuneOutcome:
    file_name = config_file_name(shape)
    choices = choose_all(
        buckets,
        candidates_for or (lambda b: candidates(b, shape, space)),
        lambda b: vllm_config(shape, b, folder=None),
        time_us,
        lambda c: swap_ab(shape, c),
        on_bucket,
    )
    config_path = write_config(out_dir, file_name, choices, environment.get("triton"))
    for c in choices:
        read = tile(vllm_config(shape, c.bucket, folder=str(out_dir)))
        if read != c.winner.config:
            raise TuneError(f"vLLM read {read} for batch {c.bucket} from {out_dir}, not the winner {c.winner.config}")
    record = log_record(shape, routing, space, file_name, dict(environment), choices)
    log = write_log(log_path or log_path_for(out_dir, file_name), record)
    return TuneOutcome(config_path=config_path, log_path=log, choices=choices)
