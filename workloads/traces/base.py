"""What every trace kind shares: the error that names file and line, path lookup, CSV rows, checks.

Every kind reads its file as a stream of rows (``iter_<kind>``), so a multi-gigabyte trace can be
described without holding it; ``load_<kind>`` collects that stream for the schedule builder.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from workloads.schedule import TraceRow


class TraceFormatError(ValueError):
    """A trace file that cannot be read; the message always names the file (and line if any)."""

    def __init__(self, path: Path | str, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


@dataclass
class LoadedTrace:
    """Rows plus what a loader skipped on purpose (by reason), so nothing is dropped silently."""

    rows: list[TraceRow]
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        count_skip(self.skipped, reason)


def count_skip(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1


def json_lines(path: Path, f: TextIO, skipped: dict[str, int]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of a JSON Lines file; blank lines are counted as
    skipped, a line that is not JSON names its line."""
    for line, text in enumerate(f, start=1):
        if not text.strip():
            count_skip(skipped, "blank line")
            continue
        try:
            yield line, json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceFormatError(path, f"not JSON: {e.msg}", line=line) from None


def resolve_trace_path(path: Path, base_dir: Path | None) -> Path:
    """Relative paths are relative to the experiment file, then to the packaged data folder."""
    if path.is_absolute():
        if not path.exists():
            raise TraceFormatError(path, "trace file not found")
        return path
    candidates = [] if base_dir is None else [base_dir / path]
    candidates += [Path.cwd() / path, Path(__file__).resolve().parent.parent / "data" / path]
    for c in candidates:
        if c.exists():
            return c
    raise TraceFormatError(path, "trace file not found (looked in: " + ", ".join(str(c) for c in candidates) + ")")


def csv_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for every data row, after checking the header names every column."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise TraceFormatError(path, f"empty file; expected a header with {list(columns)}", line=1)
        missing = [c for c in columns if c not in reader.fieldnames]
        if missing:
            raise TraceFormatError(path, f"missing column(s) {missing}; expected {list(columns)}", line=1)
        for row in reader:
            if None in row or any(row.get(c) is None for c in columns):
                raise TraceFormatError(path, f"wrong number of fields in {row!r}", line=reader.line_num)
            yield reader.line_num, row


def parse_int(path: Path, line: int, name: str, text: str) -> int:
    try:
        value = int(float(text)) if "." in text or "e" in text.lower() else int(text)
    except ValueError:
        raise TraceFormatError(path, f"{name}: not a number: {text!r}", line=line) from None
    if value < 0:
        raise TraceFormatError(path, f"{name}: negative token count {value}", line=line)
    return value


def check_order(path: Path, line: int, prev_arrival_s: float | None, arrival_s: float) -> None:
    """``prev_arrival_s``: the last row kept so far (None before the first), so a reader holds one number, not rows."""
    if prev_arrival_s is not None and arrival_s < prev_arrival_s:
        raise TraceFormatError(
            path, f"timestamps go backwards ({arrival_s:.6f} s after {prev_arrival_s:.6f} s)", line=line
        )


def _no_requests(path: Path, skipped: dict[str, int]) -> TraceFormatError:
    detail = f" (skipped: {skipped})" if skipped else ""
    return TraceFormatError(path, f"no requests in trace{detail}")


def non_empty(path: Path, loaded: LoadedTrace) -> LoadedTrace:
    if not loaded.rows:
        raise _no_requests(path, loaded.skipped)
    return loaded


def limited_rows(
    path: Path, rows: Iterator[TraceRow], max_requests: int | None, skipped: dict[str, int]
) -> Iterator[TraceRow]:
    """Stops right after the ``max_requests``-th row (reading no further, as the list loaders did) and raises the
    empty-trace error once the stream ends with nothing in it, so streaming callers get it too."""
    count = 0
    try:
        for row in itertools.islice(rows, max_requests):
            count += 1
            yield row
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()  # an unfinished reader's file is closed now, not whenever it is collected
    if count == 0:
        raise _no_requests(path, skipped)


def collect(rows: Iterator[TraceRow], skipped: dict[str, int]) -> LoadedTrace:
    """The list form of a stream; ``skipped`` is the dict the stream fills, complete once the stream is."""
    return LoadedTrace(rows=list(rows), skipped=skipped)
