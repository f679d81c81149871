"""Rewrite a saved run's records files in the current Parquet layout, losslessly, and keep its checksums true.

Committed runs travel with every call to a GPU machine, inside a fixed size limit that also has to carry the
vLLM bundle; records written before ``records_store.write_parquet`` took its present layout are 40% larger
than they need to be. A file is replaced only when the rewrite reads back as the very same Arrow table
(values, nulls, types and the schema's version metadata) and is smaller; ``result.json`` (and any other JSON
file of the run that names the old file's SHA-256) then names the new one. Only those checksum strings
change in those files, so every other byte of the saved result stays as it was and a report re-renders
the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from result_format.records_store import (
    PARQUET_SUFFIX,
    RECORDS_VERSION_KEY,
    sha256_of,
    sync_into_place,
    write_parquet,
)


class RepackError(ValueError):
    pass


@dataclass(frozen=True)
class RepackedFile:
    path: Path
    bytes_before: int
    bytes_after: int
    """Equal to ``bytes_before`` when the file was left as it was (the rewrite would not be smaller)."""


def _replace_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    sync_into_place(tmp, path)


def _rewrite(path: Path) -> tuple[str, str, RepackedFile]:
    """(old SHA-256, new SHA-256, sizes); the new file is in place only if it is smaller."""
    before = path.stat().st_size
    old_sha = sha256_of(path)
    table = pq.read_table(path)
    tmp = path.with_name(path.name + ".repack")
    write_parquet(table, tmp)
    again = pq.read_table(tmp)
    if not (again.equals(table) and again.schema.equals(table.schema, check_metadata=True)):
        tmp.unlink()
        raise RepackError(f"{path}: the rewritten file does not read back as the same table; left as it was")
    after = tmp.stat().st_size
    if after >= before:
        tmp.unlink()
        return old_sha, old_sha, RepackedFile(path, before, before)
    new_sha = sha256_of(tmp)
    sync_into_place(tmp, path)
    return old_sha, new_sha, RepackedFile(path, before, after)


def is_records_file(path: Path) -> bool:
    """A records file of any version (its schema says so), not a schedule or another Parquet file of a run."""
    metadata = pq.read_schema(path).metadata or {}
    return RECORDS_VERSION_KEY in metadata


def repack_run(run_dir: Path) -> list[RepackedFile]:
    """Every records file under ``run_dir`` rewritten in the current layout; the run's JSON files follow.

    The folder need not hold a ``result.json`` (a run whose driver died before writing one still has
    records worth keeping small). The JSON files are read before any records file is touched and rewritten
    after all of them. A repack stopped in between leaves checksums that no longer match; loading the run
    then says so (``RecordsChecksumError``) rather than reading wrong data, and ``git checkout`` of the run
    undoes it.
    """
    if not run_dir.is_dir():
        raise RepackError(f"{run_dir}: not a folder")
    records = [p for p in sorted(run_dir.rglob("*" + PARQUET_SUFFIX)) if is_records_file(p)]
    if not records:
        raise RepackError(f"{run_dir}: no records files (*.parquet with moeperf.records in its schema)")
    texts = {p: p.read_text() for p in sorted(run_dir.rglob("*.json"))}
    swaps: dict[str, str] = {}
    done: list[RepackedFile] = []
    for path in records:
        old_sha, new_sha, info = _rewrite(path)
        done.append(info)
        if new_sha != old_sha:
            swaps[old_sha] = new_sha
    for path, text in texts.items():
        new_text = text
        for old_sha, new_sha in swaps.items():
            new_text = new_text.replace(old_sha, new_sha)
        if new_text != text:
            _replace_atomically(path, new_text.encode())
    return done
