"""Result files written before a format change still load, and say what they could not record."""

from pathlib import Path

import pytest

from result_format.run_result import RESULT_SCHEMA_VERSION, RunResult, load_run

REPO = Path(__file__).resolve().parents[2]
OLD_CPU_RESULT = REPO / "tests" / "unit" / "data" / "analysis_quick_cpu_result.json"  # written by version 1
H200_RESULTS = sorted((REPO / "results" / "h200").glob("*/result.json"))
OLD_H200_RESULTS = [p for p in H200_RESULTS if '"schema_version": 1' in p.read_text()[:200]]


def test_a_version_1_cpu_result_loads_with_a_typed_config_and_an_unknown_cache_state():
    r = RunResult.model_validate_json(OLD_CPU_RESULT.read_text())
    assert r.schema_version == 1 and r.config.name == r.experiment
    assert r.config.slo.ttft_s == 2.0  # the SLO analyses of version-1 files used
    assert r.config.engine.cache_state == "as_found"


@pytest.mark.parametrize("path", OLD_H200_RESULTS, ids=lambda p: p.parent.name)
def test_version_1_h200_results_read_fresh_caches_as_cold_per_arm(path):
    r = RunResult.model_validate_json(path.read_text())
    assert r.config.engine.cache_state == "cold_per_arm" and r.arms


@pytest.mark.parametrize("path", H200_RESULTS, ids=lambda p: p.parent.name)
def test_every_committed_h200_result_loads_with_its_records(path):
    r = load_run(path.parent)
    assert r.arms and all(len(a.columns) == (a.records_count or len(a.records)) for a in r.arms)


def test_a_new_result_round_trips_at_the_current_version():
    old = RunResult.model_validate_json(OLD_CPU_RESULT.read_text())
    new = RunResult.model_validate({**old.model_dump(mode="json"), "schema_version": RESULT_SCHEMA_VERSION})
    again = RunResult.model_validate_json(new.model_dump_json())
    assert again.schema_version == RESULT_SCHEMA_VERSION == 3 and again.config == new.config
