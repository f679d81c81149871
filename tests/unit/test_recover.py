"""``moeperf recover``: a run folder whose driver was killed (inputs saved, records appended, no result.json)
becomes a valid, interrupted result with every record on disk, and the report renders from it."""

import json

import pytest
import yaml

from analysis.report_cli import main as report_main
from cluster.cli.main import main as cli_main
from cluster.orchestration.recover import RECOVERED_ERROR, recover
from experiment.config import ConfigError, parse_experiment
from result_format.records_store import RecordJournal
from result_format.run_result import load_run
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import ScheduleColumns
from workloads.schedule_file import LegacySchedule, read_schedule, write_schedule
from workloads.workload import Schedule

ARMS = [{"name": "baseline"}, {"name": "b", "flags": {"swap_ab": True}}]


def _record(arm: str, i: int, ok: bool = True) -> RequestRecord:
    t0 = 0.1 * i
    return RequestRecord(
        index=i, arm=arm, intended_send_s=t0, actual_send_s=t0, first_token_s=t0 + 0.02,
        token_times_s=[t0 + 0.02, t0 + 0.03, t0 + 0.04], end_s=t0 + 0.05, prompt_tokens_requested=8,
        output_tokens_requested=3, prompt_tokens=8, output_tokens=3,
        error=None if ok else "HTTP 500: x", error_kind=None if ok else "http",
    )  # fmt: skip


def killed_run(tmp_path, torn: bool = True, legacy: bool = False):
    """What a driver SIGKILLed in the middle of arm b leaves behind (``legacy``: a driver from before
    2026-12, which saved the plan as ``schedule.json``)."""
    cfg = parse_experiment({"name": "k", "arms": ARMS, "output_dir": str(tmp_path)})
    run_dir = tmp_path / "k-20261201T000000Z-abcdef"
    (run_dir / "records").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    (run_dir / "environment.json").write_text(json.dumps({"driver": {"versions": {"ray": "2.60.0"}}}))
    plan = [PlannedRequest(index=i, send_offset_s=0.1 * i, prompt_tokens=8, max_tokens=3) for i in range(10)]
    if legacy:
        old = LegacySchedule(requests=plan, clipped_input=0, clipped_output=2, skipped={"blank line": 1})
        (run_dir / "schedule.json").write_text(old.model_dump_json(indent=1))
    else:
        cols = ScheduleColumns.from_requests(plan)
        write_schedule(Schedule(cols, clipped_input=0, clipped_output=2, skipped={"blank line": 1}), run_dir)
    base = RecordJournal(run_dir / "records" / "baseline.arrows")
    for i in range(0, 10, 3):  # batches as the client actors send them
        base.append([_record("baseline", j) for j in range(i, min(i + 3, 10))])
    b = RecordJournal(run_dir / "records" / "b.arrows")
    b.append([_record("b", i, ok=i != 2) for i in range(2)])
    b.append([_record("b", i, ok=i != 2) for i in range(2, 4)])
    b.append([_record("b", i) for i in range(4, 6)])
    # The kill: no journal was closed; b's last batch is cut short.
    if torn:
        cut = b.path.stat().st_size - 50
        with b.path.open("r+b") as f:
            f.truncate(cut)
    return run_dir


@pytest.mark.parametrize("legacy", [False, True], ids=["schedule.parquet", "old schedule.json"])
def test_a_killed_runs_records_become_an_interrupted_result_and_nothing_is_lost(tmp_path, legacy):
    run_dir = killed_run(tmp_path, legacy=legacy)
    assert cli_main(["recover", str(run_dir)]) == 0
    res = load_run(run_dir)
    assert res.status == "interrupted" and res.error == RECOVERED_ERROR
    assert res.schedule.requests == 10 and res.schedule.duration_s == pytest.approx(0.9)
    assert res.schedule.clipped_output == 2 and res.schedule.skipped == {"blank line": 1}
    base, b = res.arms
    assert base.columns.index.tolist() == list(range(10)) and base.requests_succeeded == 10
    assert b.columns.index.tolist() == [0, 1, 2, 3] and b.requests_succeeded == 3 and b.requests_failed == 1
    assert b.requests_not_sent == 6 and b.flags.swap_ab is True
    assert all(a.status == "failed" and "interrupted" in (a.failure_reason or "") for a in res.arms)
    assert any("last batch of records was cut" in n for n in res.notes)
    # The journals are sealed into Parquet, checked against the checksums result.json holds.
    assert not list((run_dir / "records").glob("*.arrows"))
    assert [a.records_file for a in res.arms] == ["records/baseline.parquet", "records/b.parquet"]
    assert [a.records_count for a in res.arms] == [10, 4]
    assert base.summary is not None and base.summary.ttft_s.p50 == pytest.approx(0.02)
    assert report_main([str(run_dir), "--bootstrap", "50"]) == 0
    assert (run_dir / "report.md").exists() and (run_dir / "report.html").exists()


def test_a_run_that_has_its_result_is_left_alone_and_a_folder_that_is_no_run_is_bad_input(tmp_path):
    run_dir = killed_run(tmp_path, torn=False)
    recover(run_dir, ["moeperf", "recover"])
    with pytest.raises(ConfigError, match="exists: the run has its result"):
        recover(run_dir, ["moeperf", "recover"])
    assert recover(run_dir, ["moeperf", "recover"], overwrite=True).status == "interrupted"
    assert cli_main(["recover", str(tmp_path / "nothing-here")]) == 2


def test_old_and_new_schedule_files_read_as_the_same_plan(tmp_path):
    old, new = killed_run(tmp_path / "old", legacy=True), killed_run(tmp_path / "new")
    assert read_schedule(old) == read_schedule(new)
    (new / "schedule.parquet").write_bytes(b"not parquet")
    with pytest.raises(ConfigError, match="schedule.parquet"):
        recover(new, ["moeperf", "recover"])
