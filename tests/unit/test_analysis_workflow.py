"""The nightly CI workflow and the nightly experiment are well-formed and wired to each other."""

from pathlib import Path

import pytest
import yaml

from experiment.config import load_experiment

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())


def _steps(workflow):
    (job,) = workflow["jobs"].values()
    return job["steps"]


def test_scheduled_and_manual(workflow):
    on = workflow.get("on", workflow.get(True))  # PyYAML reads the bare key `on` as True
    assert on["schedule"][0]["cron"].count(" ") == 4
    assert "workflow_dispatch" in on
    (job,) = workflow["jobs"].values()
    assert {"runs-on", "steps"} <= set(job) and job["timeout-minutes"] > 0


def test_submits_the_nightly_with_ray_job_submit_to_the_secret_address(workflow):
    submit = next(s for s in _steps(workflow) if "ray job submit" in s.get("run", ""))
    assert "secrets." in submit["env"]["RAY_ADDRESS"]
    assert '--address "$RAY_ADDRESS"' in submit["run"]
    assert "python -m cluster.cli.nightly --experiment experiments/nightly.yaml" in submit["run"]
    assert "--history" in submit["run"]


def test_uploads_report_and_result_and_fails_on_the_verdict(workflow):
    steps = _steps(workflow)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    paths = upload["with"]["path"]
    assert "report.html" in paths and "report.md" in paths and "result.json" in paths
    last = steps[-1]["run"]
    assert "exit_code" in last and 'exit "$code"' in last


def test_nightly_experiment_is_valid_and_has_a_plain_baseline_first():
    cfg = load_experiment(REPO / "experiments" / "nightly.yaml")
    assert cfg.name == "nightly"
    assert cfg.arms[0].flags.is_baseline()
    names = [a.name for a in cfg.arms]
    assert {"baseline", "all-optimizations"} <= set(names) and len(names) >= 4
