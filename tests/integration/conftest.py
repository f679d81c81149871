"""Helpers for tests that run real Ray and real vLLM CPU engines through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from result_format.records_store import read_columns
from result_format.run_result import load_run

REPO = Path(__file__).resolve().parents[2]


def clean_env() -> dict[str, str]:
    """The kernel tests switch Triton to its interpreter for this process; engines must not inherit that."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "RAY_ADDRESS")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def small_experiment(tmp_path: Path, **overrides) -> Path:
    """Two arms, a handful of short requests: enough to cross every part of the real path.

    The served model name is unique to the test, so leftover-process checks see only this
    test's engines even when other runs share the machine.
    """
    exp = {
        "name": "it",
        "model": {"served_name": served_name_for(tmp_path)},
        "output_dir": str(tmp_path / "runs"),
        "workload": {
            "trace": {"kind": "azure", "max_requests": 6},
            "speedup": 8.0,
            "input_scale": 1 / 16,
            "output_scale": 1 / 16,
            "max_input_tokens": 64,
            "max_output_tokens": 8,
        },
        "client": {"warmup_requests": 1},
        # Two engines, not the default's three: these tests cross the real path, they do not judge.
        "arms": [
            {"name": "baseline"},
            {"name": "all-optimizations", "flags": {"swap_ab": True, "moe_backend": "triton", "no_respecialize": True}},
        ],
    }
    for key, value in overrides.items():
        exp[key] = value
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def run_dir_of(tmp_path: Path) -> Path:
    (d,) = list((tmp_path / "runs").iterdir())
    return d


def load_result(run_dir: Path) -> dict:
    """The run's result.json as a mapping, each arm's records (from its records file) under ``records``."""
    loaded = load_run(run_dir)
    out = json.loads((run_dir / "result.json").read_text())
    for arm, typed in zip(out["arms"], loaded.arms, strict=True):
        arm["records"] = [r.model_dump(mode="json") for r in typed.columns.to_records()]
    return out


def records_on_disk(path: Path) -> list[dict]:
    """What a records file holds now: sealed Parquet, or the journal of an arm still running (or killed)."""
    if not path.exists():
        return []
    return [r.model_dump(mode="json") for r in read_columns(path).to_records()]


def served_name_for(tmp_path: Path) -> str:
    return f"it-{tmp_path.name}-{os.getpid()}"


def vllm_servers(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if marker in cmd and ("vllm.entrypoints.openai.api_server" in cmd or "cluster.engine.orphan_guard" in cmd):
            found.append(p)
    return found


def moeperf_run(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    return moeperf("run", *args, timeout=timeout, **kw)


def moeperf(
    *args: str, timeout: float = 600, extra_env: dict[str, str] | None = None, **kw
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess with a clean environment (plus ``extra_env``), from the repo root."""
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean_env(), **(extra_env or {})},
        cwd=REPO,
        **kw,
    )


@pytest.fixture(autouse=True)
def no_engine_left_behind(tmp_path):
    yield
    left = vllm_servers(served_name_for(tmp_path))
    for p in left:
        p.kill()
    assert left == [], "the run left vLLM server processes behind"


KEYED_ENGINE_API_KEY = "it-key-" + "k" * 32


@pytest.fixture(scope="session")
def keyed_engine(tmp_path_factory):
    """One real CPU engine of the tiny model as moeperf starts every engine (an API key, no development mode),
    without the plugin, shared by the tests that only need an engine to talk to: (url, served name, key)."""
    from experiment.config import EngineSpec, ModelSpec
    from modelgen.tiny_moe import TinyMoeSpec, ensure_tiny_model
    from tests.engine_http import engine_server

    tmp_path = tmp_path_factory.mktemp("keyed-engine")
    name = served_name_for(tmp_path)
    spec = EngineSpec(enforce_eager=True)
    model_path = ensure_tiny_model(TinyMoeSpec())
    with engine_server(
        tmp_path, ModelSpec(served_name=name), model_path, spec, flags=None, api_key=KEYED_ENGINE_API_KEY
    ) as server:
        server.wait_healthy(600)
        yield server.url, name, KEYED_ENGINE_API_KEY
