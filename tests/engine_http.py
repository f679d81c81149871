"""Real vLLM servers in tests: started as the harness starts them, one completion, /metrics as samples.

Shared by the CPU engine tests and the GPU engine test, so every test engine has the EngineActor's
command line, orphan guard and port-clash retry, and all read the plugin's metrics the same way.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from cluster.engine.command import Device, PluginLabels, ServerCommand, server_command
from cluster.engine.server import ServerProcess
from experiment.config import EngineSpec, ModelSpec
from modelgen.tiny_moe import SPECIAL_TOKENS
from moe_opt.flags import OptimizationFlags
from tests.integration.conftest import clean_env

HOST = "127.0.0.1"


def engine_server(
    tmp_path: Path,
    model: ModelSpec,
    model_path: Path,
    engine: EngineSpec,
    *,
    flags: OptimizationFlags | None,
    labels: PluginLabels | None = None,
    device: Device = "cpu",
    api_key: str | None = None,
) -> ServerProcess:
    """Not yet started (use it as a context manager); its logs and a fresh metrics dir per start in tmp_path.
    ``api_key``: the server requires it, handed over as for every engine moeperf starts (``ServerProcess``)."""

    def command(port: int) -> ServerCommand:
        metrics_dir = Path(tempfile.mkdtemp(prefix="prom-", dir=tmp_path))
        return server_command(
            model, str(model_path), engine, device, HOST, port, flags=flags, labels=labels, metrics_dir=metrics_dir
        )

    return ServerProcess(command, clean_env(), tmp_path, HOST, api_key=api_key)


def complete(server: ServerProcess, name: str, n_prompt: int, max_tokens: int) -> None:
    lo = len(SPECIAL_TOKENS)
    body = {"model": name, "prompt": [lo + i % 90 for i in range(n_prompt)], "max_tokens": max_tokens,
            "ignore_eos": True}  # fmt: skip
    req = urllib.request.Request(f"{server.url}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200


Samples = dict[tuple[str, frozenset], float]


def scrape(server: ServerProcess) -> Samples:
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def poll(fn: Callable[[], Samples], ok: Callable[[Samples], bool], deadline_s: float) -> Samples:
    end = time.monotonic() + deadline_s
    while True:
        s = fn()
        if ok(s) or time.monotonic() > end:
            return s
        time.sleep(0.2)  # polling interval, not synchronisation


def series(samples: Samples, spec_name: str, kind: str) -> list[dict[str, str]]:
    name = spec_name if kind != "histogram" else spec_name + "_count"
    return [dict(ls) for (n, ls), _ in samples.items() if n == name]
