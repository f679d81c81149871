"""Night summaries: the gate judges past nights from them alone, with the verdicts it gave from their records,
never opens a past night's records, and a summary stays small however many requests the night served."""

import math

import numpy as np
import pytest

import result_format.run_result as run_result
from analysis import stats
from analysis.gate import gate_night
from analysis.history import add_to_history, history_file_name, load_history
from analysis.night_summary import SERIES_CAP, SUMMARY_SUFFIX, NightSummary, gated_view, summarise_night
from analysis.nightly import judge_night
from analysis.steady_state import judged_arms
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.synthetic_sweep import SweepArmTruth, synthetic_sweep_run
from result_format.records_store import RecordJournal, seal
from result_format.run_result import RunResult, load_run
from tests.unit.test_sweep_nightly import LEVELS, LOW_CAPACITY, POLICY  # the same nights as the gate tests


def night(day: int, tpot_scale: float = 1.0, n: int = 300, status: str = "ok") -> RunResult:
    arms = [SyntheticArm("baseline", tpot_scale=tpot_scale), SyntheticArm("all-optimizations", tpot_scale=tpot_scale)]
    return synthetic_run(f"nightly-{day:02d}", f"2026-11-{day:02d}T02:00:00+00:00", arms, n, seed=day, status=status)


def sweep_night(day: int, levels=LEVELS) -> RunResult:
    return synthetic_sweep_run(f"sweep-{day:02d}", [SweepArmTruth("A"), SweepArmTruth("B")], levels, seed=day,
                               rounds=1, started_at=f"2026-11-{day:02d}T02:00:00+00:00")  # fmt: skip


def _stored(result: RunResult) -> NightSummary:
    """The summary as a later night reads it back from the history folder."""
    return NightSummary.model_validate_json(summarise_night(result, POLICY).model_dump_json())


def _as_run_folder(result: RunResult, root) -> RunResult:
    """``result`` as the driver writes a run since schema 3: records in Parquet beside result.json, none inline."""
    run_dir = root / result.run_id
    arms = []
    for a in result.arms:
        journal = RecordJournal(run_dir / "records" / f"{a.name}.arrows")
        journal.append(a.records)
        journal.close()
        sealed = seal(journal.path)
        update = {"records": [], "records_file": str(sealed.path.relative_to(run_dir)), "records_count": sealed.rows,
                  "records_sha256": sealed.sha256}  # fmt: skip
        arms.append(a.model_copy(update=update))
    (run_dir / "result.json").write_text(result.model_copy(update={"arms": arms}).model_dump_json())
    return load_run(run_dir)


SCENARIOS = {
    "calm": lambda: (night(7), [night(d) for d in range(1, 7)]),
    "two bad nights": lambda: (night(8, 1.2), [*(night(d) for d in range(1, 7)), night(7, 1.2)]),
    "bad, good, bad": lambda: (night(9, 1.15), [*(night(d) for d in range(1, 7)), night(7, 1.15), night(8)]),
    "sweep capacity drop": lambda: (
        sweep_night(6, LOW_CAPACITY),
        [*(sweep_night(d) for d in range(1, 5)), sweep_night(5, LOW_CAPACITY)],
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_history_of_summaries_gives_the_verdict_of_the_full_results(scenario):
    tonight, history = SCENARIOS[scenario]()
    from_results = judge_night(tonight, history, POLICY)
    from_summaries = judge_night(tonight, [_stored(r) for r in history], POLICY)
    assert from_summaries.model_dump() == from_results.model_dump()
    if scenario in ("two bad nights", "sweep capacity drop"):  # the previous night was re-judged from summaries
        assert from_summaries.status == "regression"
        assert all(c.consecutive_flagged == 2 for c in from_summaries.regressions)


def test_a_summary_holds_the_values_the_full_records_give():
    history = [night(d) for d in range(1, 7)]
    tonight = night(7, 1.15)
    v = judge_night(tonight, [_stored(r) for r in history], POLICY)
    window = history[-POLICY.baseline_nights :]
    judged = [judged_arms(r, r.config.slo, POLICY.steady_state or r.config.steady_state).samples for r in window]
    for check in v.checks:
        j = stats.METRIC_KEYS.index(check.metric)
        logs = [math.log(stats.point_values(s[check.arm])[j]) for s in judged]
        assert check.baseline == float(np.exp(np.median(logs)))
        assert check.baseline_nights == len(window)
    summary = _stored(tonight)
    for g in summary.gated:
        s = judged_arms(tonight, tonight.config.slo, POLICY.steady_state or tonight.config.steady_state).samples[g.name]
        assert np.array_equal(g.point_array(), stats.point_values(s), equal_nan=True)
        assert g.series["tpot_s"] == stats.per_request_series(s, "tpot_s").tolist()  # under the cap: all of it


def test_the_gate_never_reads_a_past_nights_records(tmp_path, monkeypatch):
    runs_dir, hist = tmp_path / "runs", tmp_path / "history"
    runs_dir.mkdir()
    past = [_as_run_folder(r, runs_dir) for r in [*(night(d) for d in range(1, 7)), night(7, 1.2)]]
    tonight = _as_run_folder(night(8, 1.2), runs_dir)
    expected = judge_night(tonight, past, POLICY)  # from the past nights' full records
    for r in past:
        add_to_history(hist, r, POLICY)
    assert sorted(p.name for p in hist.iterdir()) == sorted(history_file_name(r) for r in past)
    for r in past:  # the past nights' records and result files: gone or garbage
        for p in (runs_dir / r.run_id / "records").iterdir():
            p.write_bytes(b"poison")
        (runs_dir / r.run_id / "result.json").unlink()
    opened = []
    read_columns = run_result.read_columns

    def spy(path, sha256=None):
        opened.append(path)
        return read_columns(path, sha256)

    monkeypatch.setattr(run_result, "read_columns", spy)
    out = tmp_path / "out"
    v = gate_night(tonight, hist, out, POLICY)
    assert v.status == "regression" and v.model_dump() == expected.model_dump()
    assert all(p.parent.parent == runs_dir / tonight.run_id for p in opened)
    # The report folder's result.json still finds tonight's records, its folder being another one.
    copy = load_run(out / "result.json")
    for arm in tonight.arms:
        assert np.array_equal(copy.arm(arm.name).columns.ttft_s, arm.columns.ttft_s, equal_nan=True)
    assert len(load_history(hist, policy=POLICY)[0]) == len(past) + 1


def test_a_summary_does_not_grow_with_the_nights_requests():
    small, large = night(1, n=200), night(1, n=5000)
    size = {
        n: len(summarise_night(r, POLICY, series_cap=200).model_dump_json()) for n, r in ((200, small), (5000, large))
    }
    assert size[5000] / size[200] < 2
    capped = summarise_night(large, POLICY)
    assert capped == summarise_night(large, POLICY)  # the subsample is seeded: one summary per night
    for g in capped.gated:
        assert all(len(v) == SERIES_CAP for v in g.series.values())
        assert g.series_requests["ttft_s"] == g.requests > SERIES_CAP
    at_cap = len(summarise_night(night(1, n=2 * SERIES_CAP), POLICY).model_dump_json())
    assert len(capped.model_dump_json()) / at_cap < 1.1


def test_an_old_style_history_of_full_result_files_still_loads(tmp_path):
    history = [night(d) for d in range(1, 7)]
    for r in [*history, night(7, status="failed")]:
        (tmp_path / history_file_name(r).replace(SUMMARY_SUFFIX, ".json")).write_text(r.model_dump_json())
    (tmp_path / "zz-broken.json").write_text("{not json")
    nights, skipped = load_history(tmp_path, experiment="nightly", policy=POLICY)
    assert [s.run_id for s in nights] == [r.run_id for r in history]
    assert len(skipped) == 2 and any("broken" in s for s in skipped) and any("failed" in s for s in skipped)
    assert [s.model_dump() for s in nights] == [summarise_night(r, POLICY).model_dump() for r in history]
    # Summarised once: the next load reads the summaries written beside the full files, not the files.
    assert all((tmp_path / history_file_name(r)).is_file() for r in history)
    for r in history:
        (tmp_path / history_file_name(r).replace(SUMMARY_SUFFIX, ".json")).write_text("poison")
    again, skipped_again = load_history(tmp_path, experiment="nightly", policy=POLICY)
    assert [s.model_dump() for s in again] == [s.model_dump() for s in nights]
    assert len(skipped_again) == 2 and any("broken" in s for s in skipped_again)
    tonight = night(8, 1.15)
    assert judge_night(tonight, again, POLICY).model_dump() == judge_night(tonight, history, POLICY).model_dump()


def test_a_summary_made_under_another_policy_is_used_and_said_so():
    history = [summarise_night(night(d), POLICY.model_copy(update={"seed": 5})) for d in range(1, 7)]
    v = judge_night(night(7), history, POLICY)
    assert v.status == "ok" and len(v.history_runs) == 5
    assert any("another seed" in n for n in v.notes)
    assert not any(
        "another" in n for n in judge_night(night(7), [_stored(night(d)) for d in range(1, 7)], POLICY).notes
    )


def test_a_sweep_summary_keeps_every_level_and_capacity():
    run = sweep_night(1)
    summary = _stored(run)
    assert [g.name for g in summary.gated] == list(gated_view(run)[1])
    assert [c.arm for c in summary.capacities] == ["A", "B"]
    assert summary.capacities[0].capacity.capacity_load == pytest.approx(4.3077, abs=1e-3)
    with pytest.raises(ValueError, match="another policy"):
        judge_night(
            run, [], POLICY, tonight=summarise_night(run, POLICY.model_copy(update={"bootstrap_resamples": 50}))
        )
