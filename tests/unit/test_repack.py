"""`moeperf repack`: a saved run's records rewritten in the current layout lose bytes and nothing else: the
same table, the run still loads (its checksums follow), its report is the same to the byte, and anything
that is not a records file is left alone."""

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from analysis.report_cli import main as report_main
from cluster.cli.main import main as moeperf_main
from result_format.records_store import RecordJournal, read_columns, seal, sha256_of, to_arrow
from result_format.repack import repack_run
from result_format.run_result import RunResult, load_run
from workloads.record_columns import RecordColumns
from workloads.records import RequestRecord

OLD_RESULT = Path(__file__).parent / "data" / "analysis_quick_cpu_result.json"


def _records(arm: str, n: int, seed: int) -> list[RequestRecord]:
    """Streams as a client times them: perf_counter offsets, decode gaps of 8-12 ms with jitter."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t0 = 100.0 + 0.37 * i + rng.uniform(0, 1e-3)
        tokens = int(rng.integers(0, 301)) if i % 17 else 0
        times = (t0 + 0.05 + np.cumsum(rng.uniform(0.008, 0.012, tokens))).tolist()
        out.append(
            RequestRecord(
                index=i, arm=arm, round=i % 2, client=0, level=None, warmup=i < 3, intended_send_s=t0,
                actual_send_s=t0 + 1e-4, cap_wait_s=0.0, first_token_s=times[0] if times else None,
                token_times_s=times, end_s=(times[-1] if times else t0 + 0.05) + 1e-4,
                prompt_tokens_requested=1000, output_tokens_requested=tokens, prompt_tokens=1000,
                output_tokens=tokens, tokens_exact=True, http_status=200,
            )
        )  # fmt: skip
    return out


def _old_layout(path: Path) -> None:
    """The layout records were sealed in until 2026-12-05 (plain zstd, token times dictionary-encoded)."""
    split = ["intended_send_s", "actual_send_s", "first_token_s", "end_s", "cap_wait_s"]
    pq.write_table(pq.read_table(path), path, row_group_size=65_536, compression="zstd", use_byte_stream_split=split)


def _saved_run(folder: Path) -> Path:
    """A schema 3 run with two arms whose records files are in the old layout, and a schedule beside them."""
    old = RunResult.model_validate_json(OLD_RESULT.read_text())
    arms = []
    for k, a in enumerate(old.arms):
        journal = RecordJournal(folder / "records" / f"{a.name}.arrows")
        journal.append(_records(a.name, 120, seed=k))
        journal.close()
        sealed = seal(journal.path)
        _old_layout(sealed.path)
        file = {"records_file": f"records/{a.name}.parquet", "records_sha256": sha256_of(sealed.path)}
        arms.append(a.model_copy(update={"records": [], "records_count": sealed.rows, **file}))
    saved = old.model_copy(update={"arms": arms, "schema_version": 3})
    (folder / "result.json").write_text(saved.model_dump_json(indent=1))
    # a Parquet file of the run that is not records: never rewritten
    other = to_arrow(RecordColumns.from_records(_records("x", 3, seed=9))).replace_schema_metadata({b"other": b"1"})
    pq.write_table(other, folder / "schedule.parquet")
    return folder


def test_repack_keeps_every_value_and_the_report_shrinking_the_records(tmp_path):
    before_dir = _saved_run(tmp_path / "before")
    after_dir = tmp_path / "after"
    shutil.copytree(before_dir, after_dir)
    schedule_sha = sha256_of(after_dir / "schedule.parquet")

    repacked = repack_run(after_dir)

    assert [f.path.name for f in repacked] == sorted(p.name for p in (before_dir / "records").glob("*.parquet"))
    for f in repacked:
        assert f.bytes_after < 0.75 * f.bytes_before, f  # token times were most of the file
        assert f.path.stat().st_size == f.bytes_after
        old = pq.read_table(before_dir / "records" / f.path.name)
        assert pq.read_table(f.path).equals(old) and pq.read_schema(f.path).metadata == old.schema.metadata
    assert sha256_of(after_dir / "schedule.parquet") == schedule_sha
    # Only the checksums changed in result.json, and the run loads with them (they are checked on load).
    old_lines = (before_dir / "result.json").read_text().splitlines()
    new_lines = (after_dir / "result.json").read_text().splitlines()
    changed = [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]
    assert len(changed) == len(repacked) and all('"records_sha256"' in a for a, _ in changed)
    loaded = load_run(after_dir / "result.json")
    for arm in loaded.arms:
        again = read_columns(before_dir / arm.records_file)
        assert np.array_equal(arm.columns.token_times_s, again.token_times_s)
    # The report is the same to the byte.
    for run in (before_dir, after_dir):
        assert report_main([str(run), "--bootstrap", "200", "--quiet", "--out", str(run / "report")]) == 0
    for name in ("report.md", "analysis.json"):
        assert (before_dir / "report" / name).read_bytes() == (after_dir / "report" / name).read_bytes()

    # A second repack finds nothing to gain and changes nothing.
    result_before = (after_dir / "result.json").read_bytes()
    assert all(f.bytes_after == f.bytes_before for f in repack_run(after_dir))
    assert (after_dir / "result.json").read_bytes() == result_before


def test_the_cli_repacks_and_refuses_a_folder_without_records_with_exit_2(tmp_path, capsys):
    run = _saved_run(tmp_path / "run")
    assert moeperf_main(["repack", str(run)]) == 0
    out = capsys.readouterr().out
    assert "records:" in out and out.count(".parquet:") == 2 and "schedule" not in out
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "schedule.parquet").write_bytes((run / "schedule.parquet").read_bytes())
    assert moeperf_main(["repack", str(empty)]) == 2
    assert "no records files" in capsys.readouterr().err
    assert moeperf_main(["repack", str(tmp_path / "absent")]) == 2
