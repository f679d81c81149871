"""Records as columns and on disk: every field survives the journal and Parquet, the derived per-request
values equal ``RequestRecord``'s, a killed writer loses only its cut batch, and old result files still load."""

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import result_format.records_store as rs
from analysis.verdicts import AnalysisSettings, analyse_run
from result_format.records_store import (
    RecordJournal,
    RecordsChecksumError,
    journal_batches,
    read_columns,
    seal,
)
from result_format.run_result import RecordsNotLoadedError, RunResult, load_run
from workloads.metrics import summarize
from workloads.record_columns import RecordColumns, csr_gaps
from workloads.records import RequestRecord

OLD_RESULT = Path(__file__).parent / "data" / "analysis_quick_cpu_result.json"


def _record(i: int, tokens: int) -> RequestRecord:
    """Every kind of record: tokens 0, 1, 2, odd; failed, never sent, no usage, a sweep level or none."""
    t0 = 0.25 * i
    never_sent = i % 11 == 5
    failed = i % 7 == 3
    times = [t0 + 0.03 + 0.011 * k + 0.001 * (k % 3) for k in range(tokens)]
    return RequestRecord(
        index=i,
        arm="b" if i % 2 else "a",
        round=i % 3,
        client=i % 2,
        level=None if i % 4 == 0 else i % 4,
        warmup=i % 9 == 0,
        intended_send_s=t0,
        actual_send_s=None if never_sent else t0 + 0.0005 * (i % 5),
        cap_wait_s=0.0001 * (i % 4),
        first_token_s=None if never_sent or not times else times[0],
        token_times_s=[] if never_sent else times,
        end_s=None if never_sent or failed else t0 + 0.03 + 0.011 * tokens,
        prompt_tokens_requested=100 + i,
        output_tokens_requested=tokens,
        prompt_tokens=None if i % 5 == 1 else 100 + i,
        output_tokens=None if i % 5 == 1 else tokens,
        tokens_exact=i % 5 != 1,
        http_status=None if never_sent else (500 if failed else 200),
        error_kind=("not_sent" if never_sent else "http") if never_sent or failed else None,
        error=("never sent" if never_sent else "HTTP 500: boom") if never_sent or failed else None,
    )


RECORDS = [_record(i, tokens) for i, tokens in enumerate([0, 1, 2, 3, 7, 0, 1, 64, 5, 2, 9, 1, 0, 3, 17, 4, 2, 300])]


def _same(a: float | None, b: float) -> bool:
    return (a is None and math.isnan(b)) or (a is not None and math.isclose(a, b, rel_tol=0, abs_tol=1e-12))


@pytest.mark.parametrize("n", [0, 1, 5, len(RECORDS)])
def test_columns_round_trip_every_field_and_derive_what_the_record_does(n):
    recs = RECORDS[:n]
    cols = RecordColumns.from_records(recs)
    assert [r.model_dump() for r in cols.to_records()] == [r.model_dump() for r in recs]
    itl, offsets = cols.itl
    for i, r in enumerate(recs):
        assert cols.ok[i] == r.ok
        for name in ("ttft_s", "e2e_s", "tpot_s", "send_lag_ms", "dispatch_lag_ms"):
            assert _same(getattr(r, name), float(getattr(cols, name)[i])), (i, name)
        assert itl[offsets[i] : offsets[i + 1]].tolist() == pytest.approx(r.itl_s, abs=1e-12)


def test_select_keeps_each_requests_tokens_with_it():
    cols = RecordColumns.from_records(RECORDS)
    pick = np.array([17, 0, 4, 4, 7])
    sub = cols.select(pick)
    assert [r.model_dump() for r in sub.to_records()] == [RECORDS[i].model_dump() for i in pick]
    assert len(cols.select(np.zeros(len(cols), dtype=bool))) == 0


def test_journal_then_parquet_keeps_every_record_sorted_and_checked(tmp_path):
    journal = RecordJournal(tmp_path / "a.arrows")
    for i in range(0, len(RECORDS), 4):
        journal.append(RECORDS[i : i + 4])
    journal.append([])
    journal.close()
    sealed = seal(journal.path)
    assert not journal.path.exists() and sealed.rows == len(RECORDS) and not sealed.torn_tail
    back = read_columns(sealed.path, sealed.sha256).to_records()
    want = sorted(RECORDS, key=lambda r: (r.round, -1 if r.level is None else r.level, r.index))
    assert [r.model_dump() for r in back] == [r.model_dump() for r in want]
    # A plain Parquet file: other tools read it, nulls where the record has none.
    table = pq.read_table(sealed.path)
    assert table.num_rows == len(RECORDS) and table.column("actual_send_s").null_count == 2
    # A file changed after the run no longer matches its checksum.
    with sealed.path.open("ab") as f:
        f.write(b"x")
    with pytest.raises(RecordsChecksumError, match="SHA-256"):
        read_columns(sealed.path, sealed.sha256)


def test_a_file_of_many_row_groups_reads_row_group_by_row_group_as_one_table_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(rs, "ROW_GROUP_ROWS", 4)  # 18 records: 5 row groups, empty token lists among them
    journal = RecordJournal(tmp_path / "a.arrows")
    journal.append(RECORDS)
    journal.close()
    sealed = seal(journal.path)
    assert pq.ParquetFile(sealed.path).metadata.num_row_groups == 5
    whole = rs.from_arrow(pq.read_table(sealed.path, schema=rs.SCHEMA))
    parts = read_columns(sealed.path, sealed.sha256)
    assert [r.model_dump() for r in parts.to_records()] == [r.model_dump() for r in whole.to_records()]
    assert parts.token_offsets.tolist() == whole.token_offsets.tolist()


@pytest.mark.parametrize("chunk", [1, 3, 10**7])
def test_gaps_read_in_chunks_are_each_requests_own(chunk):
    cols = RecordColumns.from_records(RECORDS)
    rows = np.array([0, 2, 3, 7, 8, 12, 17])
    gaps, offsets = csr_gaps(cols.token_times_s, cols.token_offsets, rows, chunk)
    for k, i in enumerate(rows):
        assert gaps[offsets[k] : offsets[k + 1]].tolist() == np.diff(RECORDS[i].token_times_s).tolist()


def test_a_killed_writer_loses_only_the_batch_it_was_cutting(tmp_path):
    journal = RecordJournal(tmp_path / "a.arrows")
    journal.append(RECORDS[:6])
    journal.append(RECORDS[6:12])
    size = journal.path.stat().st_size
    journal.append(RECORDS[12:])
    with journal.path.open("r+b") as f:  # the process died half-way through writing its third batch
        f.truncate(size + (journal.path.stat().st_size - size) // 2)
    batches, torn = journal_batches(journal.path)
    assert torn and sum(b.num_rows for b in batches) == 12
    sealed = seal(journal.path)
    assert sealed.torn_tail and sealed.rows == 12
    assert sorted(read_columns(sealed.path).index.tolist()) == list(range(12))


def test_an_absent_journal_seals_into_an_empty_file(tmp_path):
    sealed = seal(tmp_path / "none.arrows")
    assert sealed.rows == 0 and len(read_columns(sealed.path, sealed.sha256)) == 0
    assert summarize(read_columns(sealed.path)).ttft_s.count == 0


def test_an_old_file_with_inline_records_loads_and_analyses_as_before(tmp_path):
    old = RunResult.model_validate_json(OLD_RESULT.read_text())
    assert old.schema_version < 3 and all(a.records for a in old.arms)
    shutil.copy(OLD_RESULT, tmp_path / "result.json")
    loaded = load_run(tmp_path)  # its records_file (JSON Lines) is not there: the inline records are used
    for a, b in zip(old.arms, loaded.arms, strict=True):
        assert len(b.columns) == len(a.records)
        assert summarize(b.columns, old.config.slo).model_dump() == summarize(a.records, old.config.slo).model_dump()
    settings = AnalysisSettings(bootstrap_resamples=60)
    assert analyse_run(loaded, settings).model_dump() == analyse_run(old, settings).model_dump()


def test_a_schema_3_result_reads_its_records_from_its_folder_and_only_there(tmp_path):
    old = RunResult.model_validate_json(OLD_RESULT.read_text())
    arms = []
    for a in old.arms:
        journal = RecordJournal(tmp_path / "records" / f"{a.name}.arrows")
        journal.append(a.records)
        journal.close()
        sealed = seal(journal.path)
        arms.append(
            a.model_copy(
                update={
                    "records": [],
                    "records_file": f"records/{a.name}.parquet",
                    "records_count": sealed.rows,
                    "records_sha256": sealed.sha256,
                }
            )
        )
    new = old.model_copy(update={"arms": arms, "schema_version": 3})
    (tmp_path / "result.json").write_text(new.model_dump_json())
    assert '"token_times_s"' not in (tmp_path / "result.json").read_text()
    loaded = load_run(tmp_path / "result.json")
    for a, b in zip(old.arms, loaded.arms, strict=True):
        assert sorted(b.columns.index.tolist()) == sorted(r.index for r in a.records)
    # Without its folder a schema 3 result cannot pretend to have no records.
    bare = RunResult.model_validate_json((tmp_path / "result.json").read_text())
    with pytest.raises(RecordsNotLoadedError, match="load_run"):
        _ = bare.arms[0].columns


def test_report_of_a_run_whose_records_file_is_gone_or_changed_exits_2_naming_it(tmp_path, capsys):
    from analysis.report_cli import main as report_main

    old = RunResult.model_validate_json(OLD_RESULT.read_text())
    arms = []
    for a in old.arms:
        journal = RecordJournal(tmp_path / "records" / f"{a.name}.arrows")
        journal.append(a.records)
        journal.close()
        sealed = seal(journal.path)
        arms.append(a.model_copy(update={"records": [], "records_file": f"records/{a.name}.parquet",
                                         "records_count": sealed.rows, "records_sha256": sealed.sha256}))  # fmt: skip
    (tmp_path / "result.json").write_text(old.model_copy(update={"arms": arms, "schema_version": 3}).model_dump_json())
    first = tmp_path / arms[0].records_file
    with first.open("ab") as f:
        f.write(b"x")
    assert report_main([str(tmp_path), "--bootstrap", "50", "--quiet"]) == 2
    assert "SHA-256" in capsys.readouterr().err
    first.unlink()
    assert report_main([str(tmp_path), "--bootstrap", "50", "--quiet"]) == 2
    assert arms[0].records_file.split("/")[-1] in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()  # nothing half-written
