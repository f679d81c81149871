"""The nightly history store: a flat folder of result files, one per night, oldest first by start time.

Plain files (no database) so CI can keep it as an artefact or on shared storage, and anyone can
drop a past result in by hand. Unreadable files are reported, never silently used or deleted.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from result_format.run_result import RunResult

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def history_file_name(result: RunResult) -> str:
    stamp = _UNSAFE.sub("", result.started_at.replace(":", "").replace("+00:00", "Z"))
    return f"{stamp}_{_UNSAFE.sub('_', result.run_id)}.json"


def add_to_history(history_dir: Path, result: RunResult) -> Path:
    """Store ``result`` (the whole result file, records included) and return its path."""
    history_dir.mkdir(parents=True, exist_ok=True)
    path = history_dir / history_file_name(result)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(result.model_dump_json())
    tmp.replace(path)
    return path


def load_history(history_dir: Path, experiment: str | None = None) -> tuple[list[RunResult], list[str]]:
    """Past ok runs (of ``experiment`` when given), oldest first, and one line per file skipped."""
    results: list[RunResult] = []
    skipped: list[str] = []
    if not history_dir.is_dir():
        return results, skipped
    for path in sorted(history_dir.glob("*.json")):
        try:
            r = RunResult.model_validate_json(path.read_bytes())
        except (ValidationError, ValueError, OSError) as e:
            skipped.append(f"{path.name}: not a readable result file ({str(e).splitlines()[0]})")
            continue
        if experiment is not None and r.experiment != experiment:
            continue
        if r.status != "ok":
            skipped.append(f"{path.name}: run {r.status}, not used as history")
            continue
        results.append(r)
    results.sort(key=lambda r: (r.started_at, r.run_id))
    return results, skipped
