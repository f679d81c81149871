"""The publish benchmark times what the plugin runs: every grown counter incremented by its growth, nothing else."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_opt.bench import expert_publish_cost
from moe_opt.plugin.metrics import EXPERT_TOKENS


@pytest.fixture
def multiproc_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "prom"
    d.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(d))
    return d


def test_every_counter_of_every_layer_is_published_with_its_growth(multiproc_dir: Path) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    # In a process of its own, as in an engine: prometheus_client picks multiprocess mode when it is first imported.
    code = "from moe_opt.bench.expert_publish_cost import time_publish_ms as t; print(len(t(3, 5, 2, 4)))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "4", run.stderr[-2000:]
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(multiproc_dir))
    samples = [s for m in registry.collect() for s in m.samples if s.name == EXPERT_TOKENS]
    # 3 layers x 5 experts, the spare column never published; each grew by 1-63 tokens in each of 4 publishes.
    assert sorted((s.labels["layer"], s.labels["expert"]) for s in samples) == sorted(
        (str(layer), str(e)) for layer in range(3) for e in range(5)
    )
    assert all(4 <= s.value <= 4 * 63 for s in samples)


def test_the_benchmark_writes_its_rows_as_json(multiproc_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    assert expert_publish_cost.main(["--shapes", "mixtral-8x7b", "--trials", "3", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["layers"], row["experts"], row["counters_per_publish"]) == (32, 8, 256)
    assert len(row["trials_ms"]) == 3 and row["publish_ms_max"] >= row["publish_ms_median"] > 0
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(multiproc_dir)  # the benchmark kept the caller's folder
