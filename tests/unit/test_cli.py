"""Bad input must stop the run with one clear message and exit 2 before Ray or any engine starts."""

import logging
import subprocess
import sys

import pytest

from cluster.cli.from_model import apply_overrides, collect_overrides, scalar_fields
from cluster.cli.main import build_parser
from cluster.cli.nightly import build_parser as nightly_parser
from experiment.config import ExperimentConfig, parse_experiment


def moeperf(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_every_scalar_field_has_an_option():
    help_text = build_parser().parse_args(["run"]).__dict__
    paths = [p for p, _ in scalar_fields(ExperimentConfig)]
    assert "engine.tensor_parallel_size" in paths and "workload.speedup" in paths
    assert all(f"override:{p}" in help_text for p in paths)


def test_overrides_are_validated_like_the_file():
    ns = build_parser().parse_args(
        [
            "run",
            "--engine.tensor_parallel_size",
            "8",
            "--model.quantization",
            "fp8",
            "--set",
            "workload.trace={kind: synthetic, num_requests: 3, input_tokens: 4, output_tokens: 2, rate_rps: 1}",
        ]
    )
    cfg = parse_experiment(apply_overrides({}, collect_overrides(ns)))
    assert cfg.engine.tensor_parallel_size == 8
    assert cfg.model.quantization == "fp8"
    assert cfg.workload.trace.kind == "synthetic"


def test_unknown_field_exits_2_naming_it(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text("engine:\n  gpus: 8\n")
    r = moeperf("run", str(p))
    assert r.returncode == 2
    assert "engine.gpus" in r.stderr and str(p) in r.stderr
    assert "moeperf run" not in r.stdout  # nothing started


def test_malformed_trace_line_exits_2_naming_file_and_line(tmp_path):
    t = tmp_path / "trace.csv"
    t.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\nbroken,line\n")
    p = tmp_path / "e.yaml"
    p.write_text("workload:\n  trace: {kind: azure, path: trace.csv}\n")
    r = moeperf("run", str(p))
    assert r.returncode == 2
    assert f"{t}:3" in r.stderr


def test_missing_model_directory_exits_2(tmp_path):
    r = moeperf("run", "--model.path", str(tmp_path / "no-model"))
    assert r.returncode == 2
    assert "model.path" in r.stderr


def test_requests_longer_than_the_context_exit_2():
    r = moeperf("run", "--model.max_model_len", "64")
    assert r.returncode == 2
    assert "max_model_len=64" in r.stderr


def test_validate_accepts_the_shipped_experiments():
    r = moeperf("validate", "experiments/quick-cpu.yaml", cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("command", [["run"], ["plan"], ["validate", "e.yaml"]])
def test_quiet_and_verbose_set_the_log_level(command):
    parse = build_parser().parse_args
    assert parse(command).log_level == logging.INFO
    assert parse([*command, "-q"]).log_level == logging.WARNING
    assert parse([*command, "--verbose"]).log_level == logging.DEBUG
    with pytest.raises(SystemExit):
        parse([*command, "-q", "-v"])


def test_nightly_has_quiet_and_verbose_too():
    args = ["--experiment", "e.yaml", "--history", "h"]
    assert nightly_parser().parse_args(args).log_level == logging.INFO
    assert nightly_parser().parse_args([*args, "-q"]).log_level == logging.WARNING
    assert nightly_parser().parse_args([*args, "-v"]).log_level == logging.DEBUG


def test_validate_quiet_still_prints_its_verdict_and_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine:\n  gpus: 8\n")
    repo = __import__("pathlib").Path(__file__).parents[2]
    r = moeperf("validate", "-q", "experiments/quick-cpu.yaml", str(bad), cwd=str(repo))
    assert r.returncode == 2
    assert "experiments/quick-cpu.yaml: ok" in r.stdout
    assert "engine.gpus" in r.stderr


def test_malformed_yaml_in_set_exits_2_naming_the_key():
    r = moeperf("run", "--set", "workload.trace={kind: azure, max_requests: [}")
    assert r.returncode == 2, r.stderr
    assert "workload.trace" in r.stderr and "not valid YAML" in r.stderr
    assert "Traceback" not in r.stderr and "moeperf run" not in r.stdout  # one clear message, nothing started


def test_malformed_yaml_in_a_field_option_exits_2_naming_the_field():
    r = moeperf("plan", "--engine.tensor_parallel_size", "[1")
    assert r.returncode == 2, r.stderr
    assert "--engine.tensor_parallel_size" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("item", ["workload.speedup", "=3", "engine..env={}"])
def test_set_without_a_path_exits_2(item):
    r = moeperf("run", "--set", item)
    assert r.returncode == 2, r.stderr
    assert "--set expects PATH=YAML" in r.stderr and repr(item) in r.stderr


def test_a_malformed_test_fault_spec_exits_2_naming_the_key(tmp_path):
    env = {**__import__("os").environ, "MOEPERF_TEST_FAULTS": '{"driver_error_after_turn": 1}'}
    r = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "run", "--output_dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 2, r.stderr
    assert "MOEPERF_TEST_FAULTS: driver_error_after_turn" in r.stderr
    assert not list(tmp_path.iterdir())  # refused before the run folder was made
