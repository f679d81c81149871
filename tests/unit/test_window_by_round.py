"""The runner keeps each measured round's engine step times beside the pooled window, and results before that load."""

from analysis.synthetic import SyntheticArm, synthetic_run
from cluster.orchestration.arm_runner import ArmRunner
from experiment.config import parse_experiment
from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult, RunResult
from workloads.schedule import PlannedRequest

GPU_COUNT, GPU_SUM = "moeperf_gpu_step_seconds_count", "moeperf_gpu_step_seconds_sum"
HOST_SUM = "moeperf_rank_step_seconds_sum"


def _key(name: str, rank: str, phase: str) -> str:
    return f'{name}{{arm="a",engine="run/a",gpu="{rank}",node="n",phase="{phase}",rank="{rank}"}}'


def _run(*arms: ArmResult) -> RunResult:
    """A result file holding ``arms``."""
    run = synthetic_run("r", "2026-12-04T00:00:00+00:00", [SyntheticArm(a.name) for a in arms], 10)
    return run.model_copy(update={"arms": list(arms)})


def test_the_runner_keeps_each_rounds_step_series_beside_the_pooled_window(tmp_path):
    cfg = parse_experiment({"arms": [{"name": "a"}], "rounds": 2})
    requests = [PlannedRequest(index=0, send_offset_s=0.0, prompt_tokens=2, max_tokens=2)]
    runner = ArmRunner(cfg, cfg.arms[0], "cpu", tmp_path / "run", requests, on_records=lambda *a: None)
    gpu, host, prompt = _key(GPU_COUNT, "0", "decode"), _key(HOST_SUM, "0", "prefill"), "vllm:prompt_tokens_total"
    start = {gpu: 40.0, host: 2.0, prompt: 100.0}  # the engine's counters at the start of round 0 (warm-up's)
    after_0 = {gpu: 50.0, host: 2.5, prompt: 130.0}
    after_1 = {gpu: 57.0, host: 2.5, prompt: 150.0, _key(GPU_SUM, "0", "mixed"): 0.25}  # host: no prefill in 1
    runner._add_window_metrics(3, start, after_0)  # rounds by their index in the run (first_round 3)
    runner._add_window_metrics(4, after_0, after_1)
    runner.rounds_done = 2
    result = runner.result()
    assert result.window_metrics_by_round == {
        3: {gpu: 10.0, host: 0.5},
        4: {gpu: 7.0, _key(GPU_SUM, "0", "mixed"): 0.25},
    }  # step series only: vLLM's prompt tokens are in the pooled window alone
    assert result.window_metrics == {gpu: 17.0, host: 0.5, _key(GPU_SUM, "0", "mixed"): 0.25, prompt: 50.0}
    for key in (gpu, host):  # the rounds add up to the pooled window
        assert sum(w.get(key, 0.0) for w in result.window_metrics_by_round.values()) == result.window_metrics[key]
    again = RunResult.model_validate_json(_run(result).model_dump_json())
    assert again.arms[0].window_metrics_by_round == result.window_metrics_by_round  # int keys survive JSON


def test_a_result_written_before_the_field_loads_with_no_rounds():
    arm = ArmResult(name="a", flags=OptimizationFlags(), flags_applied=True, status="ok", requests_planned=1,
                    requests_sent=1, requests_succeeded=1, requests_failed=0, requests_not_sent=0,
                    records_file="records/a.parquet")  # fmt: skip
    data = _run(arm).model_dump(mode="json")
    del data["arms"][0]["window_metrics_by_round"]
    assert RunResult.model_validate(data).arms[0].window_metrics_by_round == {}
