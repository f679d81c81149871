"""Equal warmth: a comparison where only one side paid Triton JIT compiles while being measured.

A request that waits for a kernel compile is slow for a reason that has nothing to do with the
steady-state speed of the configuration: a cold cache. When one arm compiled inside its measured
window and the other did not (in total, or for some kernel), B/A mixes the optimization with that
artefact. The comparison is then flagged, not dropped: avoiding compiles may be the optimization
itself (re-specialisation off), and the reader is the one who knows.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.engine_window import compile_rows
from result_format.run_result import ArmResult


@dataclass(frozen=True)
class ArmCompiles:
    total: int | None  # None: not exported by this engine (no plugin), not zero
    per_kernel: dict[str, int]


def arm_compiles(arm: ArmResult) -> ArmCompiles:
    """Compiles in the measured window: ``triton_compiles_in_window``, else the per-kernel counters."""
    per_kernel = {k.kernel: k.compiles for k in compile_rows(arm) if k.compiles > 0}
    total = arm.triton_compiles_in_window
    if total is None and per_kernel:
        total = sum(per_kernel.values())
    return ArmCompiles(total, per_kernel)


@dataclass(frozen=True)
class CompileCheck:
    confounded: bool
    compiles_a: int | None
    compiles_b: int | None
    note: str | None


def compile_check(a: ArmResult, b: ArmResult) -> CompileCheck:
    """Confounded when one side compiled in its window and the other did not, overall or for a kernel."""
    ca, cb = arm_compiles(a), arm_compiles(b)
    if ca.total is None or cb.total is None:
        unknown = [x.name for x, c in ((a, ca), (b, cb)) if c.total is None]
        note = None
        if len(unknown) == 1:
            note = f"Triton compiles in the measured window not recorded for {unknown[0]}: equal warmth unchecked"
        return CompileCheck(False, ca.total, cb.total, note)
    one_sided = sorted(set(ca.per_kernel) ^ set(cb.per_kernel))
    confounded = (ca.total == 0) != (cb.total == 0) or bool(one_sided)
    note = None
    if confounded:
        kernels = "; ".join(
            f"{k}: {ca.per_kernel.get(k, 0)} in {a.name}, {cb.per_kernel.get(k, 0)} in {b.name}" for k in one_sided
        )
        note = (
            f"confounded by compilation: {a.name} compiled {ca.total} Triton kernel(s) inside its measured window, "
            f"{b.name} {cb.total}{f' ({kernels})' if kernels else ''}. Latency differences may be a cold-cache "
            "artefact rather than steady-state speed, unless avoiding the compiles is the optimization; warm both "
            "(client warm-up, vLLM's own warm-up) to measure steady state"
        )
    return CompileCheck(confounded, ca.total, cb.total, note)
