"""Synthetic requests: lengths from fixed, uniform, lognormal or empirical distributions.

The empirical kind draws lengths from another trace, to replay a real length mix at a rate or
arrival process of one's choice. An optional shared prefix opens every prompt (system prompt).

Rows are made one at a time, but the lengths are drawn up front (two ints a request, ``num_requests``
being the spec's own size, not a file's): drawing them in pieces could change the seeded sequence.
The empirical pool holds one int per row of the other trace, read as a stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, TypeAdapter

from common.strict import FrozenStrictModel
from workloads.schedule import TraceRow
from workloads.traces.base import LoadedTrace, collect
from workloads.traces.columns import TraceColumns

SHARED_PREFIX_KEY = 1 << 39


class FixedLengths(FrozenStrictModel):
    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=1, description="Every request has this length.")


class UniformLengths(FrozenStrictModel):
    kind: Literal["uniform"] = "uniform"
    min_tokens: int = Field(ge=1, description="Smallest length (inclusive).")
    max_tokens: int = Field(ge=1, description="Largest length (inclusive).")


class RangeLengths(FrozenStrictModel):
    """A target length and a range ratio, as load testers size their requests: uniform in
    [range_ratio x tokens, tokens]. InferenceMAX draws in [0.8, 1.0] of the target (range_ratio 0.8).
    ``vllm bench serve --random-range-ratio r`` drew in [r L, L] before vLLM 0.10; it now draws in
    [(1 - r) L, (1 + r) L], i.e. ``uniform`` with min (1 - r) L and max (1 + r) L here."""

    kind: Literal["range"] = "range"
    tokens: int = Field(ge=1, description="Target (largest) length.")
    range_ratio: float = Field(1.0, gt=0, le=1, description="Smallest length as a share of tokens; 1: fixed.")


class LognormalLengths(FrozenStrictModel):
    kind: Literal["lognormal"] = "lognormal"
    median_tokens: float = Field(gt=0, description="Median length (exp of the log-mean).")
    sigma: float = Field(gt=0, description="Standard deviation of log length.")
    max_tokens: int | None = Field(None, ge=1, description="Redraw-free cap: longer draws are clipped to this.")


class EmpiricalLengths(FrozenStrictModel):
    kind: Literal["empirical"] = "empirical"
    trace: dict[str, object] = Field(
        description="Any trace spec (e.g. {kind: azure, path: ...}); lengths are resampled from its rows."
    )
    side: Literal["input", "output"] = Field(description="Which of the trace's lengths to draw from.")


LengthDistribution = Annotated[
    FixedLengths | UniformLengths | RangeLengths | LognormalLengths | EmpiricalLengths, Field(discriminator="kind")
]


class SyntheticTraceSpec(FrozenStrictModel):
    kind: Literal["synthetic"] = "synthetic"
    num_requests: int = Field(ge=1, description="How many requests.")
    input_tokens: int | LengthDistribution = Field(description="Prompt length: a number or a distribution.")
    output_tokens: int | LengthDistribution = Field(description="Output length: a number or a distribution.")
    rate_rps: float | None = Field(
        None, gt=0, description="Constant-rate timestamps; null: no timestamps (choose a workload.arrival)."
    )
    shared_prefix_tokens: int = Field(
        0, ge=0, description="Tokens at the start of every prompt that are the same for all (a system prompt)."
    )
    seed: int = Field(0, description="Seed of the length draws.")


def _draw(dist: int | LengthDistribution, n: int, rng: np.random.Generator, base_dir: Path | None) -> np.ndarray:
    """Lengths as int64; a draw is truncated toward zero (as ``int``) and kept at 1 or more."""
    if isinstance(dist, int):
        return np.full(n, dist, dtype=np.int64)
    return np.maximum(1, DRAWS[dist.kind](dist, n, rng, base_dir).astype(np.int64))


def _fixed(d: FixedLengths, n: int, rng: np.random.Generator, base_dir: Path | None) -> np.ndarray:
    return np.full(n, d.tokens)


def _uniform(d: UniformLengths, n: int, rng: np.random.Generator, base_dir: Path | None) -> np.ndarray:
    lo, hi = sorted((d.min_tokens, d.max_tokens))
    return rng.integers(lo, hi + 1, size=n)


def _range(d: RangeLengths, n: int, rng: np.random.Generator, base_dir: Path | None) -> np.ndarray:
    lo = max(1, round(d.range_ratio * d.tokens))
    return rng.integers(lo, d.tokens + 1, size=n)


def _lognormal(d: LognormalLengths, n: int, rng: np.random.Generator, base_dir: Path | None) -> np.ndarray:
    v = np.rint(rng.lognormal(np.log(d.median_tokens), d.sigma, size=n))
    return np.minimum(v, d.max_tokens) if d.max_tokens is not None else v


def _empirical(d: EmpiricalLengths, n: int, rng: np.random.Generator, base_dir: Path | None) -> np.ndarray:
    from workloads.traces import TraceSpec, iter_trace  # the union includes this module

    rows = iter_trace(TypeAdapter(TraceSpec).validate_python(d.trace), base_dir)
    pool = np.fromiter((r.input_tokens if d.side == "input" else r.output_tokens for r in rows), dtype=np.int64)
    return rng.choice(pool, size=n, replace=True)


Draw = Callable[[Any, int, np.random.Generator, Path | None], np.ndarray]
DRAWS: dict[str, Draw] = {
    "fixed": _fixed,
    "uniform": _uniform,
    "range": _range,
    "lognormal": _lognormal,
    "empirical": _empirical,
}


def iter_synthetic(spec: SyntheticTraceSpec, base_dir: Path | None, skipped: dict[str, int]) -> Iterator[TraceRow]:
    rng = np.random.default_rng(spec.seed)
    inputs = _draw(spec.input_tokens, spec.num_requests, rng, base_dir)
    outputs = _draw(spec.output_tokens, spec.num_requests, rng, base_dir)
    prefix = ((SHARED_PREFIX_KEY, spec.shared_prefix_tokens),) if spec.shared_prefix_tokens else ()
    return (
        TraceRow(
            arrival_s=None if spec.rate_rps is None else i / spec.rate_rps,
            input_tokens=spec.shared_prefix_tokens + int(inputs[i]),
            output_tokens=int(outputs[i]),
            shared_blocks=prefix,
        )
        for i in range(spec.num_requests)
    )


def synthetic_columns(spec: SyntheticTraceSpec, base_dir: Path | None) -> TraceColumns:
    """The rows ``iter_synthetic`` yields, value for value, made whole-array: a million requests in
    milliseconds, where a million ``TraceRow`` objects take seconds."""
    rng = np.random.default_rng(spec.seed)
    n = spec.num_requests
    inputs = _draw(spec.input_tokens, n, rng, base_dir)
    outputs = _draw(spec.output_tokens, n, rng, base_dir)
    has_prefix = bool(spec.shared_prefix_tokens)
    return TraceColumns(
        arrival_s=np.full(n, np.nan) if spec.rate_rps is None else np.arange(n) / spec.rate_rps,
        input_tokens=spec.shared_prefix_tokens + inputs,
        output_tokens=outputs,
        follows=np.full(n, -1, dtype=np.int64),
        block_keys=np.full(n if has_prefix else 0, SHARED_PREFIX_KEY, dtype=np.int64),
        block_tokens=np.full(n if has_prefix else 0, spec.shared_prefix_tokens, dtype=np.int64),
        block_offsets=np.arange(n + 1, dtype=np.int64) if has_prefix else np.zeros(n + 1, dtype=np.int64),
    )


def load_synthetic(spec: SyntheticTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    skipped: dict[str, int] = {}
    return collect(iter_synthetic(spec, base_dir, skipped), skipped)
