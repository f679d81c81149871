"""The schedule in the run folder: written before the first engine starts, read back by ``moeperf recover``.

``schedule.parquet`` holds one row per request (the columns of ``ScheduleColumns``) and, in its schema
metadata, the clip counts and skips: a million requests in a few megabytes, written and read in well under
a second. Run folders from before 2026-12 hold ``schedule.json`` (the whole plan as one JSON object); they
still read.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, ValidationError

from common.strict import StrictModel
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import LEGACY_SCHEDULE_FILE, SCHEDULE_FILE, ScheduleColumns
from workloads.workload import Schedule


class ScheduleFileError(ValueError):
    """A saved schedule that cannot be read; the message names the file."""


class _Counts(StrictModel):
    clipped_input: int = Field(ge=0)
    clipped_output: int = Field(ge=0)
    clipped_context: int = Field(0, ge=0)
    skipped: dict[str, int] = Field(default_factory=dict)


class LegacySchedule(_Counts):
    """``schedule.json`` as run folders before 2026-12 wrote it."""

    requests: list[PlannedRequest]


def write_schedule(schedule: Schedule, run_dir: Path) -> Path:
    path = run_dir / SCHEDULE_FILE
    schedule.requests.write_parquet(path, schedule.counts())
    return path


def schedule_file(run_dir: Path) -> Path | None:
    """The run folder's saved schedule, new or old; None when it has neither."""
    for name in (SCHEDULE_FILE, LEGACY_SCHEDULE_FILE):
        if (run_dir / name).exists():
            return run_dir / name
    return None


def read_schedule(run_dir: Path) -> Schedule:
    path = schedule_file(run_dir)
    if path is None:
        raise ScheduleFileError(f"{run_dir}: no {SCHEDULE_FILE} (nor an older {LEGACY_SCHEDULE_FILE})")
    try:
        if path.name == LEGACY_SCHEDULE_FILE:
            old = LegacySchedule.model_validate_json(path.read_text())
            counts = old.model_dump(exclude={"requests"})
            columns = ScheduleColumns.from_requests(old.requests)
        else:
            columns, meta = ScheduleColumns.read_parquet(path)
            counts = _Counts.model_validate(meta).model_dump()
    except (ValidationError, ValueError, OSError, KeyError, json.JSONDecodeError) as e:
        raise ScheduleFileError(f"{path}: not a schedule moeperf can read: {e}") from None
    return Schedule(requests=columns, **counts)
