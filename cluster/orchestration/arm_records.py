"""One arm's records on their way to disk, and what its result says of them.

The driver keeps no record in memory while a run goes on (a production-length run has millions): each
batch goes to the arm's journal as it arrives, and the few counts the run needs on the way (records
kept, timeouts of a round) are counted. When the arm ends the journal is sealed into Parquet and read
back as columns once, for the summaries. ``moeperf recover`` seals a dead driver's journals the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiment.slo import SloSpec
from result_format.records_store import (
    JOURNAL_SUFFIX,
    PARQUET_SUFFIX,
    RecordJournal,
    SealedRecords,
    read_columns,
    seal,
    sha256_of,
)
from workloads.health import client_bound
from workloads.metrics import summarize
from workloads.record_columns import RecordColumns
from workloads.records import RequestRecord


class ArmRecords:
    """Append-only until ``sealed``; not thread-safe by itself (the arm runner holds its lock around it)."""

    def __init__(self, records_dir: Path, name: str) -> None:
        self.journal = RecordJournal(records_dir / f"{name}{JOURNAL_SUFFIX}")
        self.path = records_dir / f"{name}{PARQUET_SUFFIX}"
        self.kept = 0
        self.timeouts_by_round: Counter[int] = Counter()
        self._sealed: tuple[SealedRecords, RecordColumns] | None = None

    def append(self, batch: Sequence[RequestRecord]) -> None:
        """Raises ``OSError`` (or pyarrow's) when the disk refuses; then nothing of the batch is counted."""
        if self._sealed is not None:
            raise OSError(f"{self.path.name} is sealed: the arm's result was already built")
        self.journal.append(batch)
        self.kept += len(batch)
        self.timeouts_by_round.update(r.round for r in batch if r.error_kind == "timeout")

    def seal(self) -> tuple[SealedRecords, RecordColumns]:
        """The Parquet file and its columns; sealed once, later calls give the same."""
        if self._sealed is None:
            self.journal.close()
            sealed = seal(self.journal.path)
            self._sealed = (sealed, read_columns(sealed.path, sealed.sha256))
        return self._sealed


def seal_found(records_dir: Path, name: str) -> tuple[SealedRecords, RecordColumns]:
    """An arm's records as a dead driver left them: its Parquet file if sealed, else its journal sealed now
    (a batch cut by the kill is dropped: ``torn_tail``), else an empty file."""
    parquet = records_dir / f"{name}{PARQUET_SUFFIX}"
    journal = records_dir / f"{name}{JOURNAL_SUFFIX}"
    if parquet.exists() and not journal.exists():
        sealed = SealedRecords(parquet, 0, sha256_of(parquet))
    else:
        records_dir.mkdir(parents=True, exist_ok=True)
        sealed = seal(journal)
    cols = read_columns(sealed.path, sealed.sha256)
    return SealedRecords(sealed.path, len(cols), sealed.sha256, sealed.torn_tail), cols


@dataclass(frozen=True)
class RecordsOutcome:
    """What an arm's result says of its records: counts, summaries and where they are."""

    sent: int
    fields: dict[str, Any]

    @classmethod
    def of(
        cls, sealed: SealedRecords, cols: RecordColumns, run_dir: Path, slo: SloSpec, max_lag_ms: float
    ) -> RecordsOutcome:
        sent = int((~np.isnan(cols.actual_send_s)).sum())
        ok = int(cols.ok.sum())
        return cls(
            sent=sent,
            fields={
                "requests_sent": sent,
                "requests_succeeded": ok,
                "requests_failed": sent - ok,
                "summary": summarize(cols, slo) if len(cols) else None,
                "client_bound": client_bound(cols, max_lag_ms) if len(cols) else None,
                "records_file": str(sealed.path.relative_to(run_dir)),
                "records_count": sealed.rows,
                "records_sha256": sealed.sha256,
            },
        )
