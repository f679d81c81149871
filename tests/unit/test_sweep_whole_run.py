"""Whole-run analysis of a sweep run: warm-up shares never judged, requests paired by (level, index),
rates over the levels' summed windows, a note saying what is pooled; runs without a sweep unchanged.
Also the console summary of a sweep run."""

from pathlib import Path

import numpy as np
import pytest

from analysis import stats
from analysis.report import load_result
from analysis.samples import arm_samples, record_slots, slot_stride
from analysis.steady_state import judged_arms
from analysis.summary import summary_lines
from analysis.sweep import analyse_sweep
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.synthetic_sweep import DEFAULT_LEVELS, SweepArmTruth, SweepLevelTruth, synthetic_sweep_run
from analysis.verdicts import AnalysisSettings, analyse_run
from experiment.slo import SloSpec
from workloads.metrics import arm_rates
from workloads.record_columns import RecordColumns

SETTINGS = AnalysisSettings(bootstrap_resamples=200)
CPU_RESULT = Path(__file__).parent / "data" / "analysis_quick_cpu_result.json"


@pytest.fixture(scope="module")
def faster_b():
    """B is 5% faster (time axis, so every rate) at every level; A2 is an A/A control of A."""
    arms = [SweepArmTruth("A"), SweepArmTruth("B", rate_scale=1.05), SweepArmTruth("A2", control_of="A")]
    return synthetic_sweep_run("whole-run", arms, rounds=2)


def _with_records(run, fn):
    arms = [a.model_copy(update={"records": [x for r in a.records if (x := fn(r)) is not None]}) for a in run.arms]
    return run.model_copy(update={"arms": arms})


def _slower(r, factor):
    """The request with its first token and every gap ``factor`` times later (latencies x factor)."""
    t0 = r.intended_send_s
    times = [t0 + (t - t0) * factor for t in r.token_times_s]
    return r.model_copy(update={"first_token_s": times[0], "token_times_s": times, "end_s": times[-1]})


def test_b_faster_at_every_level_is_an_improvement_pooled_over_levels(faster_b):
    analysis = analyse_run(faster_b, SETTINGS)
    c = next(x for x in analysis.comparisons if x.kind == "ab")
    assert (c.a_arm, c.b_arm) == ("A", "B")
    tok = c.metric("output_tokens_per_s")
    assert tok.verdict == "improved"
    assert tok.ratio == pytest.approx(1.05, abs=0.005)
    assert tok.ci is not None and 1.0 < tok.ci[0] < 1.05 < tok.ci[1] < 1.1
    # Every level's measured requests, nothing of the warm-up shares, no steady-state cut.
    assert (c.n_a, c.n_b) == (4 * 120 * 2, 4 * 120 * 2) and analysis.warmup_excluded == {}
    assert any("pool all 4 load levels" in n and "sweep section" in n for n in c.notes)
    # The pooled rate is total tokens over the levels' summed windows: the console table's number.
    measured = [r for r in faster_b.arm("A").records if not r.warmup]
    assert tok.a_value == pytest.approx(arm_rates(measured).output_tokens_per_s.per_s, rel=1e-9)
    assert analysis.arm_rates["A"].output_tokens_per_s.per_s == pytest.approx(tok.a_value, rel=1e-9)
    # Latencies are unchanged by a pure rate change: no verdict either way on TPOT.
    assert c.metric("tpot_s_p50").verdict == "no detectable difference"


def test_warmup_records_are_never_judged(faster_b):
    much_slower = _with_records(faster_b, lambda r: _slower(r, 20.0) if r.warmup else r)
    without = _with_records(faster_b, lambda r: None if r.warmup else r)
    ref = analyse_run(faster_b, SETTINGS).model_dump()
    assert analyse_run(much_slower, SETTINGS).model_dump() == ref
    assert analyse_run(without, SETTINGS).model_dump() == ref
    # The same records judged as measured (9% of them, 100x the TTFT) would move TTFT p99 tenfold.
    unmarked = _with_records(much_slower, lambda r: r.model_copy(update={"warmup": False}))
    moved = analyse_run(unmarked, SETTINGS).comparisons[0]
    kept = ref["comparisons"][0]["metrics"][2]
    assert (moved.n_a, kept["metric"]) == (4 * 132 * 2, "ttft_s_p99")
    assert moved.metric("ttft_s_p99").a_value > 10 * kept["a_value"]


def test_warmup_records_of_a_run_without_a_sweep_are_not_judged_either():
    run = synthetic_run("plain", "2026-11-01T02:00:00+00:00", [SyntheticArm("A"), SyntheticArm("B")], 100)
    marked = _with_records(run, lambda r: r.model_copy(update={"warmup": r.index < 20}))
    judged = judged_arms(marked, SloSpec(), "none")
    assert {k: s.n for k, s in judged.samples.items()} == {"A": 80, "B": 80}
    assert sorted(set(judged.samples["A"].slots.tolist())) == list(range(20, 100))


def test_slots_are_unique_per_level_and_index_and_pair_the_same_request():
    run = synthetic_sweep_run("slots", [SweepArmTruth("A"), SweepArmTruth("B")], DEFAULT_LEVELS[:3],
                              requests_per_level=20, warmup_per_level=2, rounds=1)  # fmt: skip
    records = run.arm("A").records
    assert sorted({r.index for r in records}) == list(range(22))  # indices repeat at every level
    stride = slot_stride([a.records for a in run.arms])
    assert stride == 22
    slots = record_slots(RecordColumns.from_records(records), stride)
    assert slots[:3].tolist() == [0, 1, 2]
    at = next(i for i, r in enumerate(records) if r.level == 2 and r.index == 5)
    assert slots[at] == 2 * 22 + 5
    samples = judged_arms(run, SloSpec()).samples
    a, b = samples["A"], samples["B"]
    assert a.n == b.n == 3 * 20
    assert len(set(a.slots.tolist())) == a.n  # unique: 3 levels x 20 measured indices
    assert sorted(a.slots.tolist()) == [lv * 22 + i for lv in range(3) for i in range(2, 22)]
    lookup = a.slot_lookup(0, 3 * 22)
    assert np.array_equal(lookup[a.slots], np.arange(a.n))  # every request found at its own slot
    ca, cb = stats.slot_bootstrap([a, b], [0], 300, np.random.default_rng(1))
    order_a, order_b = np.argsort(a.slots), np.argsort(b.slots)
    # The same draws for the same (level, index) in both arms, and every level drawn (nothing overwritten).
    assert np.array_equal(ca[:, order_a], cb[:, order_b])
    assert (ca.sum(axis=1) == a.n).all()
    levels = a.slots // 22
    assert all(ca[:, levels == lv].sum() == pytest.approx(300 * 20, rel=0.1) for lv in range(3))


def test_a_level_laid_after_another_keeps_its_own_latencies_and_window():
    run = synthetic_sweep_run("layout", [SweepArmTruth("A")], DEFAULT_LEVELS[:2], requests_per_level=10,
                              warmup_per_level=0, rounds=1)  # fmt: skip
    recs = run.arm("A").records
    s = arm_samples("A", recs, SloSpec())
    level0 = [r for r in recs if r.level == 0]
    end0 = max(r.end_s for r in level0 if r.end_s is not None)
    lv1 = s.slots >= 10
    assert np.allclose(s.start_s[~lv1], [r.intended_send_s for r in level0])
    assert s.start_s[lv1].min() == pytest.approx(end0)  # level 1 starts where level 0 ended
    assert np.allclose(s.ttft_s, [r.ttft_s for r in recs]) and np.allclose(s.e2e_s, s.end_s - s.start_s)


# Before the sweep changes: analyse_run(synthetic run below, 200 resamples): B vs A, (ratio, ci, verdict).
GOLDEN = {
    # TTFT's two intervals widened a little on 2026-12-03, when W got its floor V / K (analysis/design.py)
    "ttft_s_p50": (0.9620947016344896, (0.8531836584085633, 1.0849085138828385), "no detectable difference"),
    "ttft_s_p90": (1.0083158844143616, (0.8393020273624096, 1.2113647883794594), "no detectable difference"),
    "ttft_s_p99": (1.0324223997663522, None, "not measured"),
    "tpot_s_p50": (1.0580828679459822, (0.9379416543734669, 1.1936130037732815), "no detectable difference"),
    "tpot_s_p90": (1.0539961168902752, (0.8895644061729466, 1.2488222400883684), "no detectable difference"),
    "tpot_s_p99": (0.9670070046389635, None, "not measured"),
    "itl_s_p50": (1.0471645707174368, (0.9202952138222898, 1.1915237868199757), "no detectable difference"),
    "itl_s_p90": (1.0640178669217144, (0.888955032705294, 1.273556006183228), "no detectable difference"),
    "itl_s_p99": (1.0391109506816132, None, "not measured"),
    "e2e_s_p50": (1.0593990208862736, (0.8871930809110168, 1.265030476006791), "no detectable difference"),
    "e2e_s_p90": (1.0362056272946218, (0.8639237016182398, 1.2428436678213848), "no detectable difference"),
    "e2e_s_p99": (1.0064447117810067, None, "not measured"),
    "output_tokens_per_s": (1.0031495403951154, (0.9839625278716628, 1.0227106946558264), "no detectable difference"),
    "goodput_rps": (1.0031495403951156, (0.9538852148844869, 1.054958169696333), "no detectable difference"),
}
CPU_GOLDEN = {
    "ttft_s_p50": 1.6578883711881007,
    "tpot_s_p50": 2.019788934050869,
    "output_tokens_per_s": 0.9625698519722411,
}


def test_a_run_without_a_sweep_gets_the_same_analysis_as_before():
    arms = [SyntheticArm("A"), SyntheticArm("B", tpot_scale=1.05), SyntheticArm("A2", control_of="A")]
    run = synthetic_run("syn", "2026-11-01T00:00:00+00:00", arms, 200, seed=3, rounds=3, engine_sd=0.01,
                        request_sigma=0.3)  # fmt: skip
    analysis = analyse_run(run, SETTINGS)
    assert analysis.warmup_excluded == {0: 30, 1: 15, 2: 35}  # the MSER-5 cut still applies
    c = analysis.comparisons[1]
    assert (c.b_arm, c.n_a, c.n_b, c.notes) == ("B", 520, 520, [])
    for m in c.metrics:
        ratio, ci, verdict = GOLDEN[m.metric]
        rel = 1e-6 if m.metric.startswith("itl_") else 1e-12  # gaps are single precision since (ITL_DTYPE)
        assert (m.ratio, m.verdict) == (pytest.approx(ratio, rel=rel), verdict), m.metric
        assert (m.ci is None) == (ci is None) and (ci is None or m.ci == pytest.approx(ci, rel=rel)), m.metric
    cpu = analyse_run(load_result(CPU_RESULT), SETTINGS).comparisons[0]
    assert {k: cpu.metric(k).ratio for k in CPU_GOLDEN} == pytest.approx(CPU_GOLDEN, rel=1e-12)
    assert [m.verdict for m in cpu.metrics].count("no verdict (design)") == 6 and cpu.notes == []


def test_the_run_summary_of_a_sweep_gives_matched_interactivity_and_capacity():
    levels = (
        SweepLevelTruth(1, 2.0, 0.010),
        SweepLevelTruth(2, 4.0, 0.014, ttft_miss_share=0.02),
        SweepLevelTruth(4, 8.0, 0.020, ttft_miss_share=0.08),
        SweepLevelTruth(8, 16.0, 0.028, ttft_miss_share=0.3),
    )
    arms = [SweepArmTruth("A"), SweepArmTruth("B", rate_scale=1.1), SweepArmTruth("A2", control_of="A")]
    run = synthetic_sweep_run("summary", arms, levels, rounds=2)
    settings = AnalysisSettings(bootstrap_resamples=100)
    sweep = analyse_sweep(run, settings)
    assert sweep is not None
    lines = summary_lines(run, settings=settings)
    assert lines == summary_lines(run, sweep=sweep)
    matched = sweep.comparison("B").throughput_at_matched_interactivity
    assert matched.verdict == "improved" and matched.ratio == pytest.approx(1.1, abs=0.03)
    assert matched.ci is not None
    ab, cap_a, cap_b, cap_a2, aa = lines
    assert ab.startswith("B vs A (sweep): output tok/s per GPU at matched interactivity ")
    assert f"{matched.ratio:.3f} [{matched.ci[0]:.3f}, {matched.ci[1]:.3f}] improved" in ab
    assert "capacity 1.000 " in ab and "noise from A2" in ab
    cap = sweep.capacity("A")
    assert cap.capacity_load == pytest.approx(4.31, abs=0.01) and cap.ci_load is not None
    assert cap_a == f"A: capacity at SLO: 4.31 concurrency [{cap.ci_load[0]:.3f}, {cap.ci_load[1]:.3f}]"
    assert cap_b.startswith("B: capacity at SLO: 4.31 concurrency [") and cap_a2.startswith("A2: capacity")
    assert aa.startswith("A/A noise floor A2 vs A (sweep): |A'/A - 1| output tok/s per GPU at matched interactivity ")
    assert aa.endswith("capacity 0.0% [2 engine pair(s)]")
    # A run without a sweep keeps its per-metric lines.
    plain = synthetic_run("plain", "2026-11-01T02:00:00+00:00", [SyntheticArm("A"), SyntheticArm("B")], 100)
    (line,) = summary_lines(plain, settings=settings)
    assert line.startswith("B vs A: TTFT p50 ")
