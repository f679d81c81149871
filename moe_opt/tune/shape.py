"""The one MoE shape a tuning run is for, as vLLM keys its tuned configs: per rank, per dtype, per quant block.

vLLM looks a tuned file up by experts, the *per-rank* intermediate width (``w2.shape[2]``, the model's width
divided by the tensor-parallel size), the quantization dtype and the FP8 weight block; a file tuned for another
TP size is never read. So the shape is stated the way the model card does (whole intermediate width and TP) and
the per-rank width is derived here, once, with the checks vLLM would otherwise fail later with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Dtype = Literal["fp8_w8a8", "bf16"]
DTYPES: tuple[Dtype, ...] = ("fp8_w8a8", "bf16")


class ShapeError(ValueError):
    """A shape vLLM cannot run or the options do not describe: the CLI exits 2 with this message."""


@dataclass(frozen=True)
class MoeShape:
    experts: int
    hidden: int
    intermediate: int
    """Per-expert FFN width of the whole model (before tensor parallelism)."""
    tp: int
    top_k: int
    dtype: Dtype
    block_shape: tuple[int, int] | None = None
    """FP8 weight block [block_n, block_k] (block-quantised checkpoints, e.g. Qwen3 FP8: 128x128); None: per tensor."""

    def __post_init__(self) -> None:
        for name in ("experts", "hidden", "intermediate", "tp", "top_k"):
            if getattr(self, name) < 1:
                raise ShapeError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.intermediate % self.tp:
            raise ShapeError(
                f"--intermediate {self.intermediate} is not divisible by --tp {self.tp}: vLLM shards each expert's "
                "intermediate width evenly over the tensor-parallel ranks"
            )
        if self.top_k > self.experts:
            raise ShapeError(f"--top-k {self.top_k} is more than --experts {self.experts}")
        if self.dtype not in DTYPES:
            raise ShapeError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.block_shape is not None:
            if self.dtype != "fp8_w8a8":
                raise ShapeError("--block-shape is an FP8 weight block: it needs --dtype fp8_w8a8")
            bn, bk = self.block_shape
            if bn < 1 or bk < 1:
                raise ShapeError(f"--block-shape must be two positive ints, got {bn},{bk}")
            row_parallel_k = self.tp > 1 and self.intermediate_per_rank % bk  # vLLM 0.26 quantization/fp8.py
            if self.intermediate_per_rank % bn or self.hidden % bk or row_parallel_k:
                raise ShapeError(
                    f"per-rank intermediate {self.intermediate_per_rank} and hidden {self.hidden} must be multiples "
                    f"of the FP8 block {bn},{bk} (vLLM refuses to load such a checkpoint at this --tp)"
                )

    @property
    def intermediate_per_rank(self) -> int:
        """``N`` of vLLM's config file name: ``w2.shape[2]`` on one rank."""
        return self.intermediate // self.tp

    @property
    def vllm_dtype(self) -> str | None:
        """The dtype string of vLLM's file name and lookups: ``fp8_w8a8``, or None for bf16 (no dtype selector)."""
        return "fp8_w8a8" if self.dtype == "fp8_w8a8" else None

    @property
    def block_list(self) -> list[int] | None:
        return list(self.block_shape) if self.block_shape else None

    def describe(self) -> str:
        block = f" block {self.block_shape[0]}x{self.block_shape[1]}" if self.block_shape else ""
        return (
            f"E={self.experts} H={self.hidden} I={self.intermediate}/tp{self.tp}={self.intermediate_per_rank} "
            f"top-k {self.top_k} {self.dtype}{block}"
        )


def shape_from_hf_config(config: dict[str, Any], tp: int, dtype: Dtype | None = None) -> MoeShape:
    """A MoE shape from a Hugging Face config.json (Mixtral, Qwen2/3-MoE, DeepSeek key names).

    ``dtype`` None: fp8_w8a8 when the checkpoint is FP8 (``quantization_config.quant_method: fp8``), else bf16; the
    FP8 weight block comes from ``quantization_config.weight_block_size``.
    """
    cfg = config.get("text_config", config)

    def first(*keys: str) -> int:
        for k in keys:
            if isinstance(cfg.get(k), int):
                return int(cfg[k])
        raise ShapeError(f"the model config has none of {', '.join(keys)}: not a MoE config moeperf can read")

    experts = first("num_experts", "num_local_experts", "n_routed_experts")
    inter = first("moe_intermediate_size", "intermediate_size")
    quant = cfg.get("quantization_config") or config.get("quantization_config") or {}
    fp8 = quant.get("quant_method") == "fp8"
    block = quant.get("weight_block_size") if fp8 else None
    chosen: Dtype = dtype or ("fp8_w8a8" if fp8 else "bf16")
    block_shape = (int(block[0]), int(block[1])) if block and chosen == "fp8_w8a8" else None
    return MoeShape(
        experts=experts,
        hidden=first("hidden_size"),
        intermediate=inter,
        tp=tp,
        top_k=first("num_experts_per_tok", "top_k"),
        dtype=chosen,
        block_shape=block_shape,
    )


def shape_from_model_arg(model: str, tp: int | None, dtype: Dtype | None) -> MoeShape:
    """``--model``: an HF config.json (or a folder holding one), or a moeperf experiment YAML.

    An experiment gives its model's shape (the generated tiny model's, or its model.path's config.json) and its
    ``engine.tensor_parallel_size`` unless ``--tp`` is given; its ``model.quantization: fp8`` or FP8 checkpoint
    makes the dtype fp8_w8a8.
    """
    path = Path(model)
    if path.suffix in (".yaml", ".yml"):
        return _shape_from_experiment(path, tp, dtype)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ShapeError(f"--model {model}: no such config.json or experiment file")
    try:
        config = json.loads(file.read_text())
    except ValueError as e:
        raise ShapeError(f"--model {file}: not JSON ({e})") from None
    return shape_from_hf_config(config, tp or 1, dtype)


def _shape_from_experiment(path: Path, tp: int | None, dtype: Dtype | None) -> MoeShape:
    from experiment.config import ConfigError, load_experiment
    from modelgen.tiny_moe import FP8_BLOCK

    try:
        cfg = load_experiment(path)
    except ConfigError as e:
        raise ShapeError(str(e)) from None
    ranks = tp or cfg.engine.tensor_parallel_size
    fp8_model = cfg.model.quantization == "fp8"
    if cfg.model.path is not None:
        return shape_from_model_arg(cfg.model.path, ranks, dtype or ("fp8_w8a8" if fp8_model else None))
    tiny = cfg.model.tiny
    fp8 = fp8_model or tiny.fp8_checkpoint != "none"
    chosen: Dtype = dtype or ("fp8_w8a8" if fp8 else "bf16")
    block = (FP8_BLOCK, FP8_BLOCK) if tiny.fp8_checkpoint == "block_128" and chosen == "fp8_w8a8" else None
    return MoeShape(
        experts=tiny.num_local_experts,
        hidden=tiny.hidden_size,
        intermediate=tiny.intermediate_size,
        tp=ranks,
        top_k=tiny.num_experts_per_tok,
        dtype=chosen,
        block_shape=block,
    )
