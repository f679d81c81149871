"""Choosing each bucket's config from measured times, and its speedup over the config vLLM would use otherwise.

The timing function is a parameter so that this logic (what is timed, what wins, what is recorded) is tested on
CPU with given numbers, and runs unchanged with the GPU timer. vLLM's own config for the bucket is always timed
and competes: a bucket where nothing beats it keeps it, so the written file never makes a bucket slower than
vLLM's fallback as measured (speedup >= 1 by construction, up to timing noise).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from moe_opt.tune.candidates import Tile, tile, tile_key
from moe_opt.tune.timing import TimeFn


class TuneError(RuntimeError):
    """No config could be timed for a bucket (not even vLLM's own)."""


@dataclass(frozen=True)
class Timed:
    config: Tile
    time_us: float | None
    """None: the config failed to compile or run (``error`` says why)."""
    swap_ab: bool
    """Whether vLLM launches it with SWAP_AB on this device (a property of the tile, see the package docs)."""
    error: str | None = None
    vllm_default: bool = False


@dataclass(frozen=True)
class BucketChoice:
    bucket: int
    default: Timed
    winner: Timed
    timed: list[Timed] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """vLLM's fallback time over the winner's: > 1 means the tuned file makes this bucket faster."""
        assert self.default.time_us is not None and self.winner.time_us is not None
        return self.default.time_us / self.winner.time_us


def _time(time_us: TimeFn, bucket: int, config: Mapping[str, int], swap: bool, default: bool) -> Timed:
    try:
        t = float(time_us(bucket, config))
    except Exception as e:  # noqa: BLE001 - a tile Triton cannot build (shared memory, registers) is skipped
        return Timed(tile(config), None, swap, f"{type(e).__name__}: {str(e)[:200]}", default)
    return Timed(tile(config), t, swap, None, default)


def choose(
    bucket: int,
    candidates: Sequence[Tile],
    default_config: Mapping[str, int],
    time_us: TimeFn,
    swap_ab: Callable[[Mapping[str, int]], bool] = lambda c: False,
) -> BucketChoice:
    """Time vLLM's config and every candidate for ``bucket``; the fastest wins (ties: vLLM's, then the first)."""
    default = _time(time_us, bucket, default_config, swap_ab(default_config), True)
    if default.time_us is None:
        raise TuneError(f"bucket {bucket}: vLLM's own config {dict(default_config)} did not run: {default.error}")
    timed = [default]
    seen = {tile_key(default_config)}
    for c in candidates:
        if tile_key(c) in seen:
            continue
        seen.add(tile_key(c))
        timed.append(_time(time_us, bucket, c, swap_ab(c), False))
    ok = [t for t in timed if t.time_us is not None]
    winner = min(ok, key=lambda t: t.time_us or 0.0)  # min keeps the first of equals: vLLM's config is first
    return BucketChoice(bucket=bucket, default=default, winner=winner, timed=timed)


def choose_all(
    buckets: Sequence[int],
    candidates_for: Callable[[int], Sequence[Tile]],
    default_for: Callable[[int], Mapping[str, int]],
    time_us: TimeFn,
    swap_ab: Callable[[Mapping[str, int]], bool] = lambda c: False,
    on_bucket: Callable[[BucketChoice], None] = lambda c: None,
) -> list[BucketChoice]:
    """One choice per bucket, in the given order; ``on_bucket`` sees each as it is made (progress lines)."""
    out = []
    for b in buckets:
        choice = choose(b, candidates_for(b), default_for(b), time_us, swap_ab)
        on_bucket(choice)
        out.append(choice)
    return out
