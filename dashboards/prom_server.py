"""A local Prometheus with the shipped config: for the tests and for ``moeperf dashboards prometheus``.

The shipped ``prometheus/prometheus.yml`` names the default paths (``/tmp/moeperf/prometheus`` for
the run's targets files, ``/tmp/ray`` for Ray's service-discovery file) and a 5 s scrape interval;
``render_config`` swaps in other paths and intervals, so a test can use its own folders, a 1 s
interval and a free port on 127.0.0.1 without touching anyone else's Prometheus.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from common.ports import free_port
from common.readiness import ServerExited, ServerNotReady, wait_ready

CONFIG = Path(__file__).resolve().parent / "prometheus" / "prometheus.yml"
DEFAULT_TARGETS_DIR = "/tmp/moeperf/prometheus"
DEFAULT_RAY_DIR = "/tmp/ray"


def render_config(
    targets_dir: Path | str = DEFAULT_TARGETS_DIR,
    ray_dir: Path | str = DEFAULT_RAY_DIR,
    scrape_interval: str | None = None,
    self_address: str | None = None,
) -> str:
    """The shipped config with its paths (and optionally scrape interval and own address) replaced."""
    text = CONFIG.read_text()
    text = text.replace(DEFAULT_TARGETS_DIR, str(targets_dir)).replace(DEFAULT_RAY_DIR + "/", f"{ray_dir}/")
    if scrape_interval is None and self_address is None:
        return text
    data = yaml.safe_load(text)
    if scrape_interval is not None:
        data["global"]["scrape_interval"] = scrape_interval
        data["global"]["evaluation_interval"] = scrape_interval
        for job in data["scrape_configs"]:
            for sd in job.get("file_sd_configs", []):
                sd["refresh_interval"] = scrape_interval
    if self_address is not None:
        for job in data["scrape_configs"]:
            if job["job_name"] == "prometheus":
                job["static_configs"] = [{"targets": [self_address]}]
    return str(yaml.safe_dump(data, sort_keys=False))


class PrometheusError(RuntimeError):
    pass


class PrometheusAPI:
    """The HTTP API of a Prometheus at ``url`` (one moeperf started, or one already running)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def api(self, path: str, params: dict[str, str]) -> Any:
        """GET /api/v1/<path>; returns ``data`` or raises with Prometheus's error text (e.g. a parse error)."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: str = "1s") -> list[dict[str, Any]]:
        return list(
            self.api("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step})[
                "result"
            ]
        )

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        return list(self.api("query", params)["result"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", {"state": "active"})["activeTargets"])


class Prometheus(PrometheusAPI):
    """One ``prometheus`` process on 127.0.0.1, its data in ``workdir``; ``query_range`` and ``series`` on it."""

    def __init__(self, workdir: Path, config_text: str, port: int | None = None, binary: str = "prometheus") -> None:
        self.workdir, self.port = workdir, port or free_port()
        self.binary = shutil.which(binary) or binary
        super().__init__(f"http://127.0.0.1:{self.port}")
        self.config = workdir / "prometheus.yml"
        self.config.write_text(config_text)
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--web.enable-lifecycle",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            wait_ready(f"{self.url}/-/ready", self.proc.poll, timeout_s, poll_interval_s=0.2)
        except ServerExited as e:
            raise PrometheusError(f"prometheus exited ({e.code}): {self.log.read_text()[-2000:]}") from None
        except ServerNotReady:
            raise PrometheusError(
                f"prometheus not ready after {timeout_s:.0f} s: {self.log.read_text()[-2000:]}"
            ) from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
