"""The Prometheus export may not cost the run: a targets folder that cannot be written at the start, or that
stops taking writes mid-run, turns (that part of) the export off with one warning, and nothing raises."""

import logging

import pytest

from cluster.observability import client_metrics
from cluster.orchestration.run_metrics import RunMetrics
from experiment.config import parse_experiment
from workloads.records import RequestRecord


@pytest.fixture(autouse=True)
def known_node(monkeypatch):
    """The node label is the node's address, which Ray knows; no Ray here, so the test names it."""
    monkeypatch.setitem(client_metrics._NODE_IPS, "node", "127.0.0.1")


def _metrics(targets_dir) -> RunMetrics:
    cfg = parse_experiment({"metrics": {"targets_dir": str(targets_dir), "final_scrape_timeout_s": 0.01}})
    return RunMetrics(cfg, "run-1")


def _record() -> RequestRecord:
    return RequestRecord(index=0, arm="a", intended_send_s=0, actual_send_s=0, end_s=0.1, prompt_tokens_requested=1,
                         output_tokens_requested=1)  # fmt: skip


def test_an_unwritable_targets_folder_at_the_start_turns_the_export_off_with_one_warning(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the folder should be")
    m = _metrics(blocker / "targets")
    with caplog.at_level(logging.WARNING):
        m.start()
        m.engine_up("a", "http://127.0.0.1:1", "node")
        m.observe(_record(), "node")
        m.engine_down("a")
        m.stop()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Prometheus export off for this run" in warnings[0].getMessage()


def test_a_targets_folder_that_stops_taking_writes_mid_run_is_warned_about_once(tmp_path, caplog):
    targets = tmp_path / "targets"
    m = _metrics(targets)
    m.start()
    try:
        m.engine_up("a", "http://127.0.0.1:1", "node")
        assert (targets / "engines-run-1.json").exists()
        for f in targets.iterdir():
            f.unlink()
        targets.rmdir()
        targets.write_text("the folder is gone: writes into it fail, even as root")
        with caplog.at_level(logging.WARNING):
            m.engine_up("b", "http://127.0.0.1:2", "node")
            m.engine_down("a")
            m.engine_up("c", "http://127.0.0.1:3", "node")
        m.observe(_record(), "node")  # the client metrics endpoint is unaffected
    finally:
        m.stop()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "engine targets off for the rest of this run" in warnings[0].getMessage()
