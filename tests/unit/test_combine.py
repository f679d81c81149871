"""``moeperf combine``: rounds run in separate stretches of machine time pool into the result one long run
would have given, and what cannot be pooled is refused before anything is written."""

import json

import numpy as np
import pytest

from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run
from cluster.cli.main import main as cli_main
from cluster.orchestration.combine import combine
from cluster.orchestration.driver import arm_order, plan_turns
from experiment.config import ConfigError, parse_experiment
from result_format.records_store import RecordJournal, seal
from result_format.run_result import CompileEventRecord, RunResult, TurnRecord, load_run

T0 = "2026-12-02T02:00:00+00:00"
STEPS = 'moeperf_gpu_step_seconds_count{phase="decode",rank="0"}'
QUICK = AnalysisSettings(bootstrap_resamples=200)
ARMS = [
    SyntheticArm("baseline"),
    SyntheticArm("baseline-control", control_of="baseline"),
    SyntheticArm("b", ttft_scale=0.95, tpot_scale=0.97),
]


def _four_rounds() -> RunResult:
    return synthetic_run("whole", T0, ARMS, 300, seed=5, rounds=4, engine_sd=0.01, engine_rate_sd=0.01,
                         request_sigma=0.5, sigma=0.002)  # fmt: skip


def _write_part(whole: RunResult, rounds: list[int], tmp_path, name: str) -> str:
    """The rounds ``rounds`` of ``whole`` as the run folder a hold that ran only them would have written."""
    run_dir = tmp_path / name
    arms = []
    for arm in whole.arms:
        cols = arm.columns.select(np.isin(arm.columns.round, rounds))
        journal = RecordJournal(run_dir / "records" / f"{arm.name}.arrows")
        journal.append_columns(cols)
        journal.close()
        sealed = seal(journal.path)
        n = len(cols)
        arms.append(
            arm.model_copy(
                update={
                    "records": [],
                    "records_file": f"records/{arm.name}.parquet",
                    "records_count": sealed.rows,
                    "records_sha256": sealed.sha256,
                    "rounds": len(rounds),
                    "requests_planned": n,
                    "requests_sent": n,
                    "requests_succeeded": n,
                    "triton_compiles_in_window": 2,
                    "window_metrics": {"vllm:prompt_tokens_total": 10.0 * n},
                    "window_metrics_by_round": {r: {STEPS: 100.0 + r} for r in rounds},
                    "compile_events": [
                        CompileEventRecord(
                            round=r,
                            rank=0,
                            kernel="fused_moe_kernel",
                            cache_hit=False,
                            wall_s=0.5,
                            compiler_s=0.4,
                            end_epoch_s=1e9 + r,
                            phase="serving",
                        )  # fmt: skip
                        for r in rounds
                    ],
                }
            )
        )
    config = whole.config.model_copy(update={"rounds": len(rounds), "first_round": min(rounds)})
    names = tuple(a.name for a in whole.arms)  # the arms as the driver orders them (synthetic configs name others)
    turns = [TurnRecord(kind="measured", round=r, arms=[n], started_at=T0, ended_at=T0)
             for r in rounds for n in arm_order(names, r)]  # fmt: skip
    part = whole.model_copy(update={"run_id": name, "arms": arms, "config": config, "turns": turns})
    (run_dir / "result.json").write_text(part.model_dump_json(indent=1))
    return str(run_dir)


def _ratios(result: RunResult) -> dict[tuple[str, str], tuple[float, tuple[float, float] | None, int]]:
    out = {}
    for c in analyse_run(result, QUICK).comparisons:
        for m in c.metrics:
            out[(c.b_arm, m.metric)] = (m.ratio, m.ci, m.dof)
    return out


def test_two_holds_of_two_rounds_pool_into_what_one_run_of_four_rounds_gives(tmp_path):
    whole = _four_rounds()
    first = _write_part(whole, [0, 1], tmp_path, "hold-1")
    second = _write_part(whole, [2, 3], tmp_path, "hold-2")
    out = tmp_path / "combined"
    assert cli_main(["combine", first, second, "--out", str(out)]) == 0
    pooled = load_run(out)
    assert pooled.config.rounds == 4 and pooled.config.first_round == 0
    for arm, src in zip(pooled.arms, whole.arms, strict=True):
        assert arm.rounds == 4 and arm.records_count == len(src.columns)
        assert sorted(arm.columns.rounds()) == [0, 1, 2, 3]
        assert arm.triton_compiles_in_window == 4
        assert arm.window_metrics["vllm:prompt_tokens_total"] == 10.0 * len(src.columns)
        assert [e.round for e in arm.compile_events] == [0, 1, 2, 3]
        assert arm.window_metrics_by_round == {r: {STEPS: 100.0 + r} for r in range(4)}  # each under its round
    got, want = _ratios(pooled), _ratios(whole)
    assert got.keys() == want.keys()
    for key, (ratio, ci, dof) in want.items():
        assert got[key][0] == pytest.approx(ratio, rel=1e-9), key
        assert got[key][2] == dof, key  # 4 engine pairs + the control's: the design of the long run
        assert (got[key][1] is None) == (ci is None), key
    sources = pooled.environment["combined_from"]
    assert [(s["run_id"], s["first_round"], s["rounds"]) for s in sources] == [("hold-1", 0, 2), ("hold-2", 2, 2)]
    assert "hold-1 (rounds 0-1); hold-2 (rounds 2-3)" in pooled.notes[0]


def test_overlapping_rounds_are_refused_naming_the_round_and_the_fix(tmp_path, capsys):
    whole = _four_rounds()
    first = _write_part(whole, [0, 1], tmp_path, "hold-1")
    again = _write_part(whole, [1, 2], tmp_path, "hold-2")
    assert cli_main(["combine", first, again, "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "round 1 is also in" in err and "--first_round" in err
    assert not (tmp_path / "c").exists()


def test_an_arms_engine_round_held_by_two_parts_is_refused_before_anything_is_written(tmp_path, capsys):
    """The records' rounds are disjoint, but a part's per-round step times claim a round of another part: pooling
    would take that engine pair twice (or lose one of them), so nothing is combined."""
    whole = _four_rounds()
    first = _write_part(whole, [0, 1], tmp_path, "hold-1")
    second = _write_part(whole, [2, 3], tmp_path, "hold-2")
    data = json.loads((tmp_path / "hold-2" / "result.json").read_text())
    data["arms"][2]["window_metrics_by_round"]["1"] = {STEPS: 7.0}
    (tmp_path / "hold-2" / "result.json").write_text(json.dumps(data))
    assert cli_main(["combine", first, second, "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert f"{second}: arm b: the engine step times of round 1 are also in {first}" in err
    assert not (tmp_path / "c").exists()


def test_a_different_experiment_is_refused_naming_the_setting(tmp_path):
    whole = _four_rounds()
    first = _write_part(whole, [0, 1], tmp_path, "hold-1")
    second = _write_part(whole, [2, 3], tmp_path, "hold-2")
    data = json.loads((tmp_path / "hold-2" / "result.json").read_text())
    data["config"]["engine"]["max_num_seqs"] = 64
    (tmp_path / "hold-2" / "result.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"engine\.max_num_seqs differ"):
        combine([tmp_path / "hold-1", tmp_path / "hold-2"], tmp_path / "c", ["t"])
    del first, second


def test_parallel_runs_are_refused(tmp_path):
    whole = synthetic_run("w", T0, ARMS, 50, seed=1, rounds=2, placement="parallel")
    a = _write_part(whole, [0], tmp_path, "a")
    b = _write_part(whole, [1], tmp_path, "b")
    with pytest.raises(ConfigError, match="only interleaved runs pool"):
        combine([tmp_path / "a", tmp_path / "b"], tmp_path / "c", ["t"])
    del a, b


def test_first_round_continues_the_abba_order_and_numbering():
    cfg = parse_experiment({"name": "x", "rounds": 2, "first_round": 3, "engine": {"cache_state": "as_found"},
                            "arms": [{"name": "a"}, {"name": "b"}]})  # fmt: skip
    turns = [(t.round, t.names[0]) for t in plan_turns(cfg)]
    assert turns == [(3, "b"), (3, "a"), (4, "a"), (4, "b")]


def test_a_hold_warmed_by_a_seed_pools_with_one_warmed_by_a_pass(tmp_path):
    """How the cache got warm (a warm-up pass, or a seed from an earlier hold) is not the experiment."""
    whole = _four_rounds()
    _write_part(whole, [0, 1], tmp_path, "hold-1")
    _write_part(whole, [2, 3], tmp_path, "hold-2")
    for name, engine in (("hold-1", {"cache_state": "shared_warm", "warmup_pass_fraction": 0.25}),
                         ("hold-2", {"cache_state": "seeded", "jit_cache_seed": "/seed/jit-cache"})):  # fmt: skip
        data = json.loads((tmp_path / name / "result.json").read_text())
        data["config"]["engine"].update(engine)
        (tmp_path / name / "result.json").write_text(json.dumps(data))
    pooled = combine([tmp_path / "hold-1", tmp_path / "hold-2"], tmp_path / "c", ["t"])
    assert sorted(pooled.arms[0].columns.rounds()) == [0, 1, 2, 3]
    data = json.loads((tmp_path / "hold-2" / "result.json").read_text())
    data["config"]["engine"].update({"cache_state": "cold_per_arm", "jit_cache_seed": None})
    (tmp_path / "hold-2" / "result.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"engine\.cache_state differ"):  # a cold engine is another experiment
        combine([tmp_path / "hold-1", tmp_path / "hold-2"], tmp_path / "c2", ["t"])


def test_the_control_stuck_in_the_middle_of_two_mirrored_rounds_is_named_and_rounds_2_3_free_it(tmp_path):
    """Rounds 0-1 run A A' B, then B A' A: the control holds the middle place in both, which on the H200 was
    10-11% slow at c=64 both times. The analysis says so; pooled with rounds 2-3 (A' B A, A B A') it does not."""
    whole = _four_rounds()
    first = load_run(tmp_path / _write_part(whole, [0, 1], tmp_path, "hold-1"))
    second = _write_part(whole, [2, 3], tmp_path, "hold-2")
    notes = {c.b_arm: " ".join(c.notes) for c in analyse_run(first, QUICK).comparisons}
    for b in ("baseline-control", "b"):
        assert "baseline-control held one place in every round" in notes[b]
        assert "baseline-control 2, 2" in notes[b]
    pooled = combine([tmp_path / "hold-1", tmp_path / second], tmp_path / "c", ["t"])
    assert [(t.round, t.arms[0]) for t in pooled.turns] == [
        (0, "baseline"), (0, "baseline-control"), (0, "b"), (1, "b"), (1, "baseline-control"), (1, "baseline"),
        (2, "baseline-control"), (2, "b"), (2, "baseline"), (3, "baseline"), (3, "b"), (3, "baseline-control"),
    ]  # fmt: skip
    assert not any("one place in every round" in n for c in analyse_run(pooled, QUICK).comparisons for n in c.notes)


def test_which_requests_the_verdicts_judge_is_not_the_experiment_and_the_last_part_says_it(tmp_path):
    """A hold run before the experiment file said ``steady_state: none`` still pools with one run after."""
    whole = _four_rounds()
    _write_part(whole, [0, 1], tmp_path, "hold-1")
    _write_part(whole, [2, 3], tmp_path, "hold-2")
    data = json.loads((tmp_path / "hold-2" / "result.json").read_text())
    data["config"]["steady_state"] = "none"
    (tmp_path / "hold-2" / "result.json").write_text(json.dumps(data))
    pooled = combine([tmp_path / "hold-1", tmp_path / "hold-2"], tmp_path / "c", ["t"])
    assert pooled.config.steady_state == "none" and analyse_run(pooled, QUICK).warmup_excluded == {}
