"""The console table prints the same rates, with the same intervals, that the result file stores."""

from pathlib import Path

from cluster.cli.table import arm_table
from result_format.run_result import RunResult
from workloads.metrics import summarize

FIXTURE = Path(__file__).parent / "data" / "analysis_quick_cpu_result.json"


def _row(table: str, label: str) -> list[str]:
    (line,) = [ln for ln in table.splitlines() if ln.startswith(label)]
    return line[len(label) :].split()


def test_rates_and_their_intervals_come_from_the_stored_summary():
    old = RunResult.model_validate_json(FIXTURE.read_text())
    arms = [a.model_copy(update={"summary": summarize(a.records, old.config.slo)}) for a in old.arms]
    result = old.model_copy(update={"arms": arms})
    table = arm_table(result)
    for i, arm in enumerate(result.arms):
        s = arm.summary
        assert s is not None and s.rates is not None and s.rates.requests_per_s.ci is not None
        lo, hi = s.rates.requests_per_s.ci
        cells = " ".join(_row(table, "requests/s")).split("] ")
        assert cells[i].rstrip("]") == f"{s.requests_per_s:.2f} [{lo:.2f}, {hi:.2f}"
    assert len(_row(table, "goodput (req/s)")) == 3 * len(result.arms)


def test_a_summary_from_before_rates_had_intervals_prints_the_rate_alone():
    old = RunResult.model_validate_json(FIXTURE.read_text())
    table = arm_table(old)
    assert [float(c) for c in _row(table, "requests/s")] == [round(a.summary.requests_per_s, 2) for a in old.arms]
