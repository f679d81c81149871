"""Reads the Triton compile events an engine's worker ranks append (``moe_opt.plugin.compile_log``).

The EngineActor reads them after each round while the workers may still be writing, so the reader keeps
a byte offset per file and returns only whole lines it has not returned before: a last line without its
newline is being written (or its writer died mid-line) and is left for the next read, and a line that
does not parse is skipped with a warning rather than failing the arm over a diagnostic. Free of Ray.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from result_format.run_result import CompileEventRecord

logger = logging.getLogger(__name__)

FILE_GLOB = "rank*.jsonl"


@dataclass
class CompileEventReader:
    """Everything new in ``directory`` since the last ``read``; each event returned once per reader."""

    directory: Path
    offsets: dict[str, int] = field(default_factory=dict)  # file name -> bytes already consumed

    def read(self, round_index: int) -> list[CompileEventRecord]:
        """New events of every rank, stamped with ``round_index``, ordered by end time."""
        out: list[CompileEventRecord] = []
        if not self.directory.is_dir():
            return out
        for path in sorted(self.directory.glob(FILE_GLOB)):
            try:
                with path.open("rb") as f:
                    f.seek(self.offsets.get(path.name, 0))
                    data = f.read()
            except OSError as e:
                logger.warning("compile events: cannot read %s: %s", path, e)
                continue
            whole = data[: data.rfind(b"\n") + 1]  # a torn last line stays for the next read
            self.offsets[path.name] = self.offsets.get(path.name, 0) + len(whole)
            out += parse_lines(whole, round_index, str(path))
        return sorted(out, key=lambda e: (e.end_epoch_s, e.rank))


def parse_lines(data: bytes, round_index: int, source: str = "") -> list[CompileEventRecord]:
    """Whole lines of one rank file; a line that is not a compile event is skipped with a warning."""
    out = []
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            out.append(CompileEventRecord.model_validate({**json.loads(raw), "round": round_index}))
        except (ValueError, TypeError, ValidationError) as e:  # JSONDecodeError and a non-object are ValueErrors too
            logger.warning("compile events: %s line %d skipped: %s", source, n, str(e)[:200])
    return out
