"""The nightly gate's exit-code contract, end to end through the real CLI."""

import json

import pytest

from tests.integration.conftest import REPO, moeperf, served_name_for

pytestmark = [pytest.mark.integration]


def nightly(*args, timeout=900):
    return moeperf("nightly", *args, timeout=timeout)


def test_a_run_that_cannot_start_exits_2_and_stores_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: {gpus: 8}\n")
    history = tmp_path / "history"
    r = nightly("--experiment", str(bad), "--history", str(history), "--out", str(tmp_path / "out"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "engine.gpus" in r.stdout
    assert not history.exists() or not any(history.iterdir())


@pytest.mark.slow
def test_first_night_has_no_history_exits_0_and_is_stored(tmp_path):
    history = tmp_path / "history"
    r = nightly(
        "--experiment",
        str(REPO / "experiments" / "nightly.yaml"),
        "--history",
        str(history),
        "--output_dir",
        str(tmp_path / "runs"),
        "--model.served_name",
        served_name_for(tmp_path),
        "--set",
        "workload.trace={kind: synthetic, num_requests: 6, input_tokens: 16, output_tokens: 8, rate_rps: 4}",
        "--set",  # two of the file's five arms: the exit-code contract needs a run, not every setting
        "arms=[{name: baseline}, {name: all-optimizations, flags: {swap_ab: true, moe_backend: triton}}]",
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    verdict = json.loads((run_dir / "nightly.json").read_text())
    assert verdict["status"] == "insufficient_history"
    assert (run_dir / "report.html").exists() and (run_dir / "report.md").exists()
    assert len(list(history.iterdir())) == 1
