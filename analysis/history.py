"""The nightly history store: a flat folder of night summaries, one per night, oldest first by start time.

Plain files (no database) so CI can keep it as an artefact or on shared storage, and anyone can
drop a past night in by hand. A night is stored as its summary (``analysis.night_summary``): the
gate never reads a past night's records, so the history stays small and the gate fast however many
requests a night served. Folders of the full result files stored before summaries existed still
work: each is summarised once on load and its summary written beside it. Unreadable files are
reported, never silently used or deleted.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from analysis.night_summary import SUMMARY_SUFFIX, NightSummary, summarise_night
from analysis.nightly import NightlyPolicy
from result_format.run_result import RecordsNotLoadedError, RunResult, load_run

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_READ_ERRORS = (ValidationError, ValueError, OSError, RecordsNotLoadedError)


def history_file_name(night: RunResult | NightSummary) -> str:
    """``<start stamp>_<run id>.summary.json``: names sort in start order, and a night has one."""
    stamp = _UNSAFE.sub("", night.started_at.replace(":", "").replace("+00:00", "Z"))
    return f"{stamp}_{_UNSAFE.sub('_', night.run_id)}{SUMMARY_SUFFIX}"


def _write_summary(path: Path, summary: NightSummary) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(summary.model_dump_json())
    tmp.replace(path)


def add_to_history(history_dir: Path, night: RunResult | NightSummary, policy: NightlyPolicy | None = None) -> Path:
    """Store the night's summary (a RunResult is summarised under ``policy``, the gate's) and return its path."""
    summary = night if isinstance(night, NightSummary) else summarise_night(night, policy or NightlyPolicy())
    history_dir.mkdir(parents=True, exist_ok=True)
    path = history_dir / history_file_name(summary)
    _write_summary(path, summary)
    return path


def _summary_beside(path: Path) -> Path:
    return path.with_suffix(SUMMARY_SUFFIX)


def _from_full_result(path: Path, policy: NightlyPolicy, experiment: str | None) -> NightSummary | None:
    """An old-style history file: the whole result. Summarised once, the summary kept beside it when the
    folder is writable (the next night then reads only that). None: another experiment's."""
    result = load_run(path)
    if experiment is not None and result.experiment != experiment:
        return None
    summary = summarise_night(result, policy)
    try:
        _write_summary(_summary_beside(path), summary)
    except OSError:
        pass  # a read-only history artefact: summarised again next night, still correct
    return summary


def load_history(
    history_dir: Path, experiment: str | None = None, policy: NightlyPolicy | None = None
) -> tuple[list[NightSummary], list[str]]:
    """Past ok nights' summaries (of ``experiment`` when given), oldest first, and one line per file skipped.

    ``policy``: what an old-style full result file is summarised under (the gate's).
    """
    policy = policy or NightlyPolicy()
    nights: list[NightSummary] = []
    skipped: list[str] = []
    if not history_dir.is_dir():
        return nights, skipped
    read: dict[Path, NightSummary] = {}
    for path in sorted(history_dir.glob(f"*{SUMMARY_SUFFIX}")):
        try:
            read[path] = NightSummary.model_validate_json(path.read_bytes())
        except _READ_ERRORS as e:
            skipped.append(f"{path.name}: not a readable night summary ({str(e).splitlines()[0]})")
    found: list[tuple[Path, NightSummary]] = list(read.items())
    for path in sorted(history_dir.glob("*.json")):
        if path.name.endswith(SUMMARY_SUFFIX) or _summary_beside(path) in read:
            continue  # a summary, or a full result summarised on an earlier load: its summary is read
        try:
            summary = _from_full_result(path, policy, experiment)
        except _READ_ERRORS as e:
            skipped.append(f"{path.name}: not a readable result file ({str(e).splitlines()[0]})")
            continue
        if summary is not None:
            found.append((path, summary))
    for path, night in found:
        if experiment is not None and night.experiment != experiment:
            continue
        if night.status != "ok":
            skipped.append(f"{path.name}: run {night.status}, not used as history")
            continue
        nights.append(night)
    nights.sort(key=lambda r: (r.started_at, r.run_id))
    return nights, skipped
