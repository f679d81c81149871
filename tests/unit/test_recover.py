"""``moeperf recover``: a run folder whose driver was killed (inputs saved, records appended, no result.json)
becomes a valid, interrupted result with every record on disk, and the report renders from it."""

import json
import os

import pytest
import yaml

from analysis.places import arm_places
from analysis.report_cli import main as report_main
from cluster.cli.main import main as cli_main
from cluster.orchestration.driver import plan_run
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
    # The turns are the plan up to the last engine that wrote (interleaved: baseline, then b), without times.
    assert [(t.kind, t.round, t.arms, t.started_at) for t in res.turns] == [
        ("measured", 0, ["baseline"], None),
        ("measured", 0, ["b"], None),
    ]
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


SWEEP_LEVELS = [
    {"kind": "concurrency", "concurrency": 1, "requests": 4},
    {"kind": "concurrency", "concurrency": 2, "requests": 6},
]
SYNTH = {"kind": "synthetic", "num_requests": 8, "input_tokens": {"kind": "fixed", "tokens": 8},
         "output_tokens": {"kind": "fixed", "tokens": 3}}  # fmt: skip
CONTROL_ARMS = [{"name": "a"}, {"name": "a-control", "control_of": "a"}, {"name": "b", "flags": {"swap_ab": True}}]


def _sweep_run(tmp_path, name: str, first_round: int, rounds: int, cut: dict[str, int]):
    """A sweep run whose hold ended mid-round: every arm wrote its rounds in full but for ``cut``, arm -> the
    number of its last round's records that reached the journal. Returns the folder and its records per round."""
    cfg = parse_experiment({"name": "w", "arms": CONTROL_ARMS, "output_dir": str(tmp_path), "rounds": rounds,
                            "first_round": first_round, "workload": {"trace": SYNTH},
                            "sweep": {"levels": SWEEP_LEVELS, "warmup_fraction": 0.25}})  # fmt: skip
    schedule, levels = plan_run(cfg, None)
    run_dir = tmp_path / name
    (run_dir / "records").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    write_schedule(schedule, run_dir)
    for arm in cfg.arms:
        journal = RecordJournal(run_dir / "records" / f"{arm.name}.arrows")
        for rnd in range(first_round, first_round + rounds):
            batch = [
                _record(arm.name, int(r.index)).model_copy(update={"round": rnd, "level": lv.index, "warmup": bool(w)})
                for lv in levels
                for r, w in zip(lv.requests, lv.requests.warmup, strict=True)
            ]
            if rnd == first_round + rounds - 1 and arm.name in cut:
                batch = batch[: cut[arm.name]]
            journal.append(batch)
        journal.close()
    return run_dir, len(schedule.requests)


def test_whole_rounds_keeps_what_every_arm_finished_as_ok_arms_and_sets_the_rest_aside(tmp_path):
    run_dir, per_round = _sweep_run(tmp_path, "w-hold1", first_round=0, rounds=2, cut={"b": 3})
    assert cli_main(["recover", str(run_dir), "--whole_rounds"]) == 0
    res = load_run(run_dir)
    assert res.status == "interrupted" and res.config.rounds == 1 and res.config.first_round == 0
    assert [a.status for a in res.arms] == ["ok", "ok", "ok"]
    for arm in res.arms:
        assert arm.columns.rounds() == [0] and arm.records_count == per_round == arm.requests_planned
        assert [(lv.label, lv.requests_planned, lv.warmup_requests) for lv in arm.levels] == [
            ("c=1", 4, 1),
            ("c=2", 6, 2),  # at least the level's concurrency, as the planner marks it
        ]
        assert [lv.summary is not None and lv.summary.ttft_s.count for lv in arm.levels] == [3, 4]
    # Nothing is lost: the unfinished round's records are sealed beside the kept ones.
    aside = {p.name for p in (run_dir / "records").glob("*.after-whole-rounds.parquet")}
    assert aside == {
        "a.after-whole-rounds.parquet",
        "a-control.after-whole-rounds.parquet",
        "b.after-whole-rounds.parquet",
    }
    assert any("3 record(s) of rounds after 0" in n for n in res.notes)
    assert report_main([str(run_dir), "--bootstrap", "50"]) == 0
    assert "fewer than two usable arms" not in (run_dir / "report.md").read_text()
    # A plain recover afterwards brings every record back, each arm failed again. It keeps the replaced result's
    # times although the files' modification times changed since (as a git checkout changes them).
    os.utime(run_dir / "config.yaml", (2e9, 2e9))
    assert cli_main(["recover", str(run_dir), "--force"]) == 0
    again = load_run(run_dir)
    assert (again.started_at, again.finished_at) == (res.started_at, res.finished_at)
    assert [a.records_count for a in again.arms] == [2 * per_round, 2 * per_round, per_round + 3]
    assert all(a.status == "failed" for a in again.arms) and not list((run_dir / "records").glob("*.after-*"))


def test_whole_rounds_pool_with_the_hold_that_continues_them(tmp_path):
    first, per_round = _sweep_run(tmp_path, "w-hold1", first_round=0, rounds=2, cut={"a-control": 0})
    second, _ = _sweep_run(tmp_path, "w-hold2", first_round=1, rounds=1, cut={})
    recover(first, ["moeperf", "recover"], keep_whole_rounds=True)
    recover(second, ["moeperf", "recover"], keep_whole_rounds=True)
    assert cli_main(["combine", str(first), str(second), "--out", str(tmp_path / "pooled")]) == 0
    pooled = load_run(tmp_path / "pooled")
    assert pooled.status == "ok" and [a.rounds for a in pooled.arms] == [2, 2, 2]
    assert all(a.columns.rounds() == [0, 1] and a.records_count == 2 * per_round for a in pooled.arms)


def test_whole_rounds_with_no_round_every_arm_finished_is_bad_input_and_changes_nothing(tmp_path, capsys):
    run_dir, per_round = _sweep_run(tmp_path, "w-hold1", first_round=0, rounds=1, cut={"b": 7})
    assert cli_main(["recover", str(run_dir), "--whole_rounds"]) == 2
    assert f"round 0 needs {per_round} records per arm; found a {per_round}, a-control {per_round}, b 7" in (
        capsys.readouterr().err
    )
    assert not (run_dir / "result.json").exists()


def _hold_cut_after_c1_and_a_whole_one(tmp_path):
    """Hold 1's round 0 lost b after its first level (c=1: 4 records), recovered as it was; hold 2's round 1 is
    whole. Returns both folders and the records of one round."""
    first, per_round = _sweep_run(tmp_path, "w-hold1", first_round=0, rounds=1, cut={"b": 4})
    second, _ = _sweep_run(tmp_path, "w-hold2", first_round=1, rounds=1, cut={})
    recover(first, ["moeperf", "recover"])
    recover(second, ["moeperf", "recover"], keep_whole_rounds=True)
    return first, second, per_round


def test_a_round_cut_part_way_pools_at_the_levels_every_arm_finished(tmp_path):
    first, second, per_round = _hold_cut_after_c1_and_a_whole_one(tmp_path)
    out = tmp_path / "pooled-c1"
    assert cli_main(["combine", str(first), str(second), "--levels", "c=1", "--out", str(out)]) == 0
    pooled = load_run(out)
    assert pooled.status == "ok" and [a.status for a in pooled.arms] == ["ok", "ok", "ok"]
    assert [lv.label() for lv in pooled.config.sweep.levels] == ["c=1"]
    for arm in pooled.arms:
        assert arm.rounds == 2 and arm.columns.rounds() == [0, 1] and arm.requests_planned == 8
        assert arm.records_count == 8 and set(arm.columns.level.tolist()) == {0}
        assert [(lv.index, lv.label, lv.requests_planned, lv.warmup_requests) for lv in arm.levels] == [
            (0, "c=1", 4, 1)
        ]
        assert arm.levels[0].summary is not None and arm.levels[0].summary.ttft_s.count == 6
        assert arm.window_metrics_by_round == {}  # whole rounds' step times do not describe one level
    assert any("cut to levels c=1 and rounds 0-0" in n for n in pooled.notes)
    # The recovered hold's engine places count too: round 0 ran a, a-control, b and round 1 the mirror, so the
    # control held the middle in both and the report says its noise floor may be its place's.
    assert arm_places(pooled.turns) == {"a": {0: 1, 1: 3}, "a-control": {0: 2, 1: 2}, "b": {0: 3, 1: 1}}
    assert report_main([str(out), "--bootstrap", "50"]) == 0
    report = (out / "report.md").read_text()
    assert "### Per level: b vs a" in report and "To get verdicts" not in report
    assert "engine places in rounds 0, 1 (a 1, 3; b 3, 1; a-control 2, 2): a-control held one place" in report
    # The hold's files are untouched: every record of its cut round is still there.
    assert [a.records_count for a in load_run(first).arms] == [per_round, per_round, 4]


def test_levels_no_arm_finished_or_that_the_run_lacks_are_bad_input_and_nothing_is_written(tmp_path, capsys):
    first, second, _ = _hold_cut_after_c1_and_a_whole_one(tmp_path)
    out = tmp_path / "pooled"
    assert cli_main(["combine", str(first), str(second), "--levels", "c=2", "--out", str(out)]) == 2
    assert "no round in which every arm finished c=2 (6 records per round; found a 6, a-control 6, b 0)" in (
        capsys.readouterr().err
    )
    assert cli_main(["combine", str(first), str(second), "--levels", "c=8", "--out", str(out)]) == 2
    assert "--levels c=8: its levels are c=1, c=2" in capsys.readouterr().err
    assert cli_main(["combine", str(first), str(second), "--levels", ",", "--out", str(out)]) == 2
    assert "--levels ',' names no level" in capsys.readouterr().err
    assert not out.exists()
