"""The report's routing check: skew shown per arm, and a collapsed routing (every token to the same experts) named."""

from __future__ import annotations

from analysis.html_report import render_html
from analysis.markdown import render_markdown
from analysis.routing import HEADERS, SECTION_TITLE, arm_routing, run_routing
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run
from result_format.run_result import ExpertLoad

QUICK = AnalysisSettings(bootstrap_resamples=60)
COLLAPSED = [ExpertLoad(layer=n, tokens=[900, 900, 0, 0, 0, 0]) for n in range(3)]  # top-2 of 6, every token
SKEWED = [ExpertLoad(layer=0, tokens=[600, 300, 200, 150, 0, 10]), ExpertLoad(layer=1, tokens=[210] * 6)]


def _run(loads: dict[str, list[ExpertLoad]]):
    run = synthetic_run("routing", "2026-12-02T16:00:00+00:00", [SyntheticArm(a) for a in ("a", "b", "c")], 40)
    arms = [a.model_copy(update={"expert_load": loads.get(a.name, [])}) for a in run.arms]
    return run.model_copy(update={"arms": arms})


def test_a_skewed_routing_is_summarised_over_layers_and_not_flagged() -> None:
    (arm,) = run_routing(_run({"a": SKEWED}).arms)
    assert (arm.arm, arm.layers, arm.experts, arm.routed) == ("a", 2, 6, 1260 + 1260)
    assert arm.min_experts_used == 5 and arm.max_hottest_share == 600 / 1260
    assert arm.max_imbalance == 600 / 210 and arm.median_imbalance == (600 / 210 + 1.0) / 2
    assert arm.collapsed_layers == 0 and arm.warning() is None
    assert len(arm.row()) == len(HEADERS) and arm.row()[3] == "5 of 6"


def test_every_token_to_the_same_experts_is_named_as_collapsed() -> None:
    arm = arm_routing(_run({"b": COLLAPSED}).arms[1])
    assert arm is not None and arm.collapsed_layers == 3 and arm.collapsed_width == 2
    assert "in 3 of 3 MoE layers every token went to the same 2 of 6 experts" in (arm.warning() or "")
    # Even over every expert is not collapsed, nor is a layer whose used experts got different counts.
    even = arm_routing(_run({"b": [ExpertLoad(layer=0, tokens=[5] * 6), *SKEWED]}).arms[1])
    assert even is not None and even.collapsed_layers == 0


def test_both_reports_show_the_table_and_the_warning_only_for_runs_that_counted() -> None:
    run = _run({"a": SKEWED, "c": COLLAPSED})
    analysis = analyse_run(run, QUICK)
    md, html = render_markdown(run, analysis), render_html(run, analysis)
    for text in (md, html):
        assert SECTION_TITLE in text and text.count("every token went to the same 2 of 6 experts") == 1
    assert "| a | 2 |" in md and "| c | 3 |" in md and "| b |" not in md.split(SECTION_TITLE)[1].split("##")[0]
    plain = _run({})
    assert SECTION_TITLE not in render_markdown(plain, analyse_run(plain, QUICK))
    assert SECTION_TITLE not in render_html(plain, analyse_run(plain, QUICK))
