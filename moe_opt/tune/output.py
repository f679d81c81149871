"""What a tune writes: vLLM's tuned-config file, read by ``get_moe_configs`` via VLLM_TUNED_CONFIG_FOLDER, and a
log of every timed candidate with the environment it was measured in.

The config file is vLLM's format and nothing else (``{"triton_version": ..., "<batch>": {BLOCK_SIZE_M, ...}}``;
vLLM drops ``triton_version`` on load), under vLLM's own file name, so an engine reads it unmodified. The log sits
in ``logs/`` beside it, whose names do not match vLLM's ``E=...`` pattern.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from moe_opt.tune.select import BucketChoice
from moe_opt.tune.shape import MoeShape

LOG_DIR = "logs"
LOG_VERSION = 1


def vllm_table(choices: Sequence[BucketChoice]) -> dict[str, dict[str, int]]:
    """The winners as vLLM's JSON maps them: batch size (a string key) -> config, in ascending batch order."""
    return {str(c.bucket): dict(c.winner.config) for c in sorted(choices, key=lambda c: c.bucket)}


def write_config(folder: Path, file_name: str, choices: Sequence[BucketChoice], triton_version: str | None) -> Path:
    """Write (replace) vLLM's config file ``folder/file_name``; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {"triton_version": triton_version} if triton_version else {}
    body |= vllm_table(choices)
    path = folder / file_name
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=4) + "\n")
    tmp.replace(path)  # an engine starting meanwhile reads the old file or the new one, never half of one
    return path


def log_path_for(folder: Path, file_name: str) -> Path:
    return folder / LOG_DIR / (Path(file_name).stem + ".tune-log.json")


def log_record(
    shape: MoeShape,
    routing: str,
    space: str,
    file_name: str,
    environment: dict[str, Any],
    choices: Sequence[BucketChoice],
) -> dict[str, Any]:
    """Every candidate's time per bucket, the winner and its speedup over vLLM's fallback config."""
    return {
        "version": LOG_VERSION,
        "config_file": file_name,
        "shape": asdict(shape) | {"intermediate_per_rank": shape.intermediate_per_rank},
        "routing": routing,
        "space": space,
        "environment": environment,
        "buckets": [
            {
                "bucket": c.bucket,
                "vllm_default": asdict(c.default),
                "winner": asdict(c.winner),
                "speedup_vs_vllm_default": c.speedup,
                "candidates": [asdict(t) for t in c.timed],
            }
            for c in choices
        ],
    }


def write_log(path: Path, record: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
