"""What a vLLM server says at start-up and its config does not: which MoE kernel it chose.

With ``moe_backend: auto`` vLLM picks the backend itself (FlashInfer CUTLASS, Triton, Marlin, ...) from the
checkpoint's quantization scheme and the GPU, and only its log says which. On the H200 an "auto" baseline ran
Triton, not FlashInfer CUTLASS, because online FP8 has dynamic activation scales; a result that did not record
this would let a reader believe the baseline was FlashInfer. So the engine's choice is kept with every arm.
"""

from __future__ import annotations

import re
import time
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


# When, in seconds after the server process was spawned, vLLM's processes reached each point of a start (vLLM
# 0.26 and 0.32 log these lines). On the H200 a warm 48-layer engine took 57-66 s to get healthy outside model
# loading and init engine (the phases above), and the phases could not say where: before the API server's first
# line (imports), building its config, spawning the engine core, or between the engine's readiness and the
# server listening. vLLM stamps each line with the wall clock to the second, so these are whole seconds.
_MILESTONES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (key, re.compile(pattern))
    for key, pattern in (
        ("api_server_first_line_s", r"^\(APIServer pid=\d+\) "),
        ("config_resolved_s", r"Resolved architecture: "),
        ("engine_core_started_s", r"Initializing a V1 LLM engine"),
        ("model_loading_started_s", r"Starting to load model "),
        ("engine_initialized_s", r"init engine \(profile, create kv cache, warmup model\) took "),
        ("api_server_listening_s", r"Starting vLLM (?:API )?server\b"),
    )
)
_STAMP = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[")


def _stamp_epoch_s(line: str, year: int) -> float | None:
    m = _STAMP.search(line)
    if m is None:
        return None
    month, day, hour, minute, second = (int(g) for g in m.groups())
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


def startup_timeline(log_text: str, spawned_at_epoch_s: float) -> dict[str, float]:
    """Whole seconds from the spawn to the first line of each milestone above that the log holds, in their order.

    The log's stamps are local time without a year: the spawn's year is taken (the next one for a start that
    runs over New Year), and a stamp that reads as earlier than the spawn (the second it fell in) counts as 0.
    """
    year = time.localtime(spawned_at_epoch_s).tm_year
    spawned = float(int(spawned_at_epoch_s))  # the stamps are whole seconds: compare like with like
    found: dict[str, float] = {}
    for line in log_text.splitlines():
        for key, pattern in _MILESTONES:
            if key in found or pattern.search(line) is None:
                continue
            stamp = _stamp_epoch_s(line, year)
            if stamp is not None and stamp < spawned - 86_400:  # "01-01 00:00:05" of a start at 12-31 23:59:50
                stamp = _stamp_epoch_s(line, year + 1)
            if stamp is not None:
                found[key] = max(0.0, stamp - spawned)
    return {key: found[key] for key, _ in _MILESTONES if key in found}
