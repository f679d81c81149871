"""``moeperf dashboards check``: bad input is said and exits 2 before any query (the queries themselves are run
against a real Prometheus that scraped a real run in tests/integration/test_observability_prometheus.py)."""

import socket

from analysis.synthetic import SyntheticArm, synthetic_run
from dashboards.check import empty_on_cpu
from dashboards.cli import main


def test_a_folder_that_is_not_a_run_exits_2_naming_it(tmp_path, capsys):
    assert main(["check", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_a_prometheus_that_does_not_answer_exits_2(tmp_path, capsys):
    run = synthetic_run("r", "2026-12-02T00:00:00+00:00", [SyntheticArm("baseline")], 10)
    (tmp_path / "result.json").write_text(run.model_dump_json())
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["check", str(tmp_path), "--prometheus", f"http://127.0.0.1:{port}"]) == 2
    assert "moeperf dashboards check:" in capsys.readouterr().err


def test_only_nvml_and_triton_queries_may_be_empty_on_cpu():
    assert empty_on_cpu('max(moeperf_gpu_sm_clock_hertz{run="$run"})')
    assert empty_on_cpu('sum(rate(moeperf_triton_compiles_total{run="$run"}[1m]))')
    assert empty_on_cpu('sum(rate(vllm:generation_tokens_total{run="$run"}[1m]))') is None


def test_the_check_runs_without_the_grafana_sdk(tmp_path):
    # Seen on the H200 (2026-12-02): the bundle there has no grafana-foundation-sdk, and `dashboards check` died
    # importing the generator although it only reads the committed JSON.
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['grafana_foundation_sdk'] = None\n"
        "from dashboards.cli import main\n"
        f"sys.exit(main(['check', {str(tmp_path)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr  # not a run: said and exit 2, which needs the CLI to import at all
    assert "not a run moeperf can read" in done.stderr
