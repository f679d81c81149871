"""What a vLLM server says at start-up and its config does not: which MoE kernel it chose.

With ``moe_backend: auto`` vLLM picks the backend itself (FlashInfer CUTLASS, Triton, Marlin, ...) from the
checkpoint's quantization scheme and the GPU, and only its log says which. On the H200 an "auto" baseline ran
Triton, not FlashInfer CUTLASS, because online FP8 has dynamic activation scales; a result that did not record
this would let a reader believe the baseline was FlashInfer. So the engine's choice is kept with every arm.
"""

from __future__ import annotations

import re
from pathlib import Path

# vLLM's oracles log "Using TRITON Fp8 MoE backend out of ...", "Using 'marlin' Mxfp4 MoE backend." and, for the
# kernel class, "Using CPUUnquantizedExperts MoE backend"; every TP rank logs its own copy.
MOE_BACKEND_LINE = re.compile(
    r"Using '?(?P<backend>[\w.-]+)'? (?:(?P<scheme>Fp8|Int8|WNA16|Mxfp4|MxFp8|NvFp4|Unquantized|W4A8) )?MoE backend\b"
)


def selected_moe_backends(log_text: str) -> list[str]:
    """Each distinct choice once, in the order logged: '<scheme>: <backend>' or the bare kernel class."""
    found = (
        f"{m['scheme']}: {m['backend']}" if m["scheme"] else m["backend"] for m in MOE_BACKEND_LINE.finditer(log_text)
    )
    return list(dict.fromkeys(found))


def read_log(log_path: Path) -> str:
    """The server's log so far; empty if there is none (yet)."""
    try:
        return log_path.read_text(errors="replace")
    except OSError:
        return ""


def moe_backends_in_log(log_path: Path) -> list[str]:
    return selected_moe_backends(read_log(log_path))


# Where an engine's start-up time went, in vLLM's own words. On the H200 a seeded first engine (its JIT cache
# copied from an earlier hold) still took 228 s to get healthy, the next ones 82 s, and "healthy after" alone
# could not say whether compiling, graph capture, weight loading or the process itself took the difference.
# (key, pattern whose group 1 is seconds, whether one process's matches add up). vLLM 0.26 and 0.32 log these.
_PHASES: tuple[tuple[str, re.Pattern[str], bool], ...] = tuple(
    (key, re.compile(pattern), summed)
    for key, pattern, summed in (
        ("model_load_s", r"Model loading took .*? and ([\d.]+) seconds", False),
        ("weights_load_s", r"Loading weights took ([\d.]+) seconds", False),
        ("model_init_s", r"Initializing model took ([\d.]+) seconds", False),
        ("dynamo_transform_s", r"Dynamo bytecode transform time: ([\d.]+) s", True),
        ("compile_graphs_s", r"Compiling a graph for .*? takes ([\d.]+) s", True),
        ("compile_cache_load_s", r"Directly load the compiled graph\(s\) .*? took ([\d.]+) s", True),
        ("compilation_s", r"warmup model\) took [\d.]+ s \(compilation: ([\d.]+) s", False),
        ("cuda_graph_capture_s", r"Graph capturing finished in ([\d.]+) secs", False),
        ("init_engine_s", r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s", False),
    )
)
_PROCESS = re.compile(r"^\((?P<process>[^)]*?pid=\d+)\)")


def startup_phases(log_text: str) -> dict[str, float]:
    """Seconds per start-up phase vLLM logged, in the order above. With several processes (TP ranks) the slowest
    one's: a start is as slow as its slowest rank. Phases are nested, not disjoint (``init_engine_s`` contains
    ``compilation_s`` and ``cuda_graph_capture_s``); what lies outside ``model_load_s`` and ``init_engine_s``
    (process start, imports, the API server) is the engine's ``startup_s`` less those two."""
    per_process: dict[str, dict[str, float]] = {}
    for line in log_text.splitlines():
        for key, pattern, summed in _PHASES:
            m = pattern.search(line)
            if m is None:
                continue
            who = _PROCESS.match(line)
            seen = per_process.setdefault(who["process"] if who else "", {})
            seconds = float(m.group(1))
            seen[key] = seen.get(key, 0.0) + seconds if summed else seconds
    return {
        key: max(p[key] for p in per_process.values() if key in p)
        for key, _, _ in _PHASES
        if any(key in p for p in per_process.values())
    }
