"""Equal warmth: a comparison where only one side compiled Triton kernels while measured is marked confounded."""

from analysis.compilation import compile_check
from analysis.report import write_report
from analysis.summary import summary_lines
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run

T0 = "2026-11-01T00:00:00+00:00"
QUICK = AnalysisSettings(bootstrap_resamples=50)
KERNEL = "vllm.model_executor.layers.fused_moe.fused_moe.fused_moe_kernel"


def _run(a_compiles, b_compiles):
    arms = [SyntheticArm("baseline", compiles_in_window=a_compiles), SyntheticArm("b", compiles_in_window=b_compiles)]
    return synthetic_run("w", T0, arms, 60, seed=1)


def _with_kernels(run, arm, kernels):
    window = {f'moeperf_triton_compiles_total{{kernel="{k}",rank="0"}}': float(n) for k, n in kernels.items()}
    arms = [a.model_copy(update={"window_metrics": window}) if a.name == arm else a for a in run.arms]
    return run.model_copy(update={"arms": arms})


def test_one_side_cold_is_confounded_and_the_report_says_so(tmp_path):
    run = _run(36, 0)
    (c,) = analyse_run(run, QUICK).comparisons
    assert c.confounded_by_compilation and (c.compiles_a, c.compiles_b) == (36, 0)
    assert any(n.startswith("confounded by compilation") for n in c.notes)
    write_report(run, tmp_path, settings=QUICK)
    assert "confounded by compilation" in (tmp_path / "report.md").read_text()
    assert "confounded by compilation" in (tmp_path / "report.html").read_text()
    assert "CONFOUNDED BY COMPILATION" in summary_lines(run, settings=QUICK)[0]


def test_equal_warmth_is_not_flagged_and_unknown_warmth_is_not_claimed():
    assert not analyse_run(_run(0, 0), QUICK).comparisons[0].confounded_by_compilation
    assert not analyse_run(_run(20, 36), QUICK).comparisons[0].confounded_by_compilation
    unknown = analyse_run(_run(None, None), QUICK).comparisons[0]
    assert not unknown.confounded_by_compilation and unknown.compiles_a is None and not unknown.notes


def test_a_kernel_compiled_on_one_side_only_is_confounded_from_the_window_metrics():
    run = _with_kernels(_with_kernels(_run(None, None), "baseline", {KERNEL: 20}), "b", {KERNEL: 10, "other_k": 2})
    check = compile_check(run.arm("baseline"), run.arm("b"))
    assert (check.compiles_a, check.compiles_b) == (20, 12)  # totals from the per-kernel counters
    assert check.confounded and "other_k" in (check.note or "")
    same = _with_kernels(_with_kernels(_run(None, None), "baseline", {KERNEL: 20}), "b", {KERNEL: 10})
    assert not compile_check(same.arm("baseline"), same.arm("b")).confounded
