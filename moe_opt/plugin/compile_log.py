"""One JSON line per Triton compile of a worker rank, so the harness can tell which requests waited for it.

The Prometheus counters say how many compiles happened and how long they took, but not when: a compile
that stalled the first token of twenty requests and one that ran while the engine idled look the same.
With ``MOEPERF_COMPILE_EVENTS_DIR`` set (the EngineActor sets a fresh directory per engine start), each
rank appends ``rank<N>.jsonl`` with the end time of every compile on the Unix clock the client's record
times are mapped onto. Compiles are rare (a few per kernel and shape), so opening, appending one line
with a single write and closing per event costs nothing that matters and leaves no file handle behind
in vLLM's worker. The line's keys are ``result_format.run_result.CompileEventRecord``'s, less ``round``
(which the harness adds when it collects them); this module cannot import it (vLLM's process).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from moe_opt.plugin.settings import COMPILE_EVENTS_DIR_ENV

Phase = Literal["startup", "serving"]


class CompileEventLog:
    """Appends one rank's compile events to ``<directory>/rank<rank>.jsonl``."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.rank = rank
        self.path = directory / f"rank{rank}.jsonl"

    @classmethod
    def from_env(cls, rank: int, environ: Mapping[str, str] | None = None) -> CompileEventLog | None:
        """None when the engine was not asked for compile events (the plugin then writes nothing)."""
        raw = (os.environ if environ is None else environ).get(COMPILE_EVENTS_DIR_ENV)
        return cls(Path(raw), rank) if raw else None

    def line(self, event: Any, phase: Phase) -> str:
        """``event``: a ``CompileEvent`` (``t_unix`` is when the kernel became ready)."""
        return json.dumps(
            {
                "rank": self.rank,
                "kernel": str(event.kernel),
                "cache_hit": None if event.cache_hit is None else bool(event.cache_hit),
                "wall_s": float(event.wall_s),
                "compiler_s": None if event.compiler_s is None else float(event.compiler_s),
                "end_epoch_s": float(event.t_unix),
                "phase": phase,
            }
        )

    def append(self, event: Any, phase: Phase) -> None:
        """One ``write`` of the whole line with O_APPEND: ranks never share a file, and a reader sees at worst a
        torn last line (the reader skips it). May raise OSError: the caller logs it and carries on."""
        data = (self.line(event, phase) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
