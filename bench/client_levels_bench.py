"""Does the moeperf client keep up at the top of a sweep? Three loads, next to ``vllm bench serve``.

The issue: on an H200 host, bursts of about 8 simultaneous 2,000-token prompts gave a p99 dispatch lag of
20-28 ms while the client used 3% of a core, because each request's token-id body was built on the loop
at its send time. Bodies are now built ahead on a producer thread (``workloads.payloads``); this measures
the client before (``payloads="inline"``) and after (``"ahead"``) and ``vllm bench serve`` (vLLM's own code,
``bench/vllm_bench_serve.py``) on the same fake server (``bench/stream_server.py``) and the same cores:

- ``closed``: a closed loop at concurrency 1024 (moeperf: 1024 chains of ``--closed-turns`` requests, each
  sent when the previous ends; vLLM: ``--max-concurrency 1024`` over as many requests, all due at 0).
  Throughput as the server saw it, and moeperf's own p99 dispatch lag (a follower's send minus its
  predecessor's end).
- ``open``: a constant ``--open-rate`` (2,000 requests/s), the client pinned to one core. p99 send lag as the
  server saw it (receive time minus schedule offset, less the smallest such difference, for both clients
  alike), and moeperf's own p99 dispatch lag.
- ``burst``: ``--burst`` simultaneous ``--burst-prompt-tokens``-token prompts (64 x 8,000), after a wave of
  as many short requests that opens the connections (measured: the burst only). moeperf's own max lag
  (actual minus intended send), the server-observed lag of each request against its intended time (one
  monotonic clock on the machine), and the spread of the server's receive times (first to last), which is
  the one number ``vllm bench serve`` can be compared on.

With ``--pin`` the server gets the last CPU and both clients the first one (this process runs the moeperf
client, its producer thread included). Writes ``bench/results/client_levels_bench-<date>.json``.

Run: python3 -m bench.client_levels_bench --pin [--repeats 2] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.client_bench import REPO, VllmWorker, _machine, _pcts, _pin, _server_log, _start_server
from common.ports import free_port
from workloads.client import ClientSettings, replay
from workloads.health import HealthProbe
from workloads.pacing import ReplayClock
from workloads.payloads import PayloadStats
from workloads.schedule import PlannedRequest
from workloads.timer import default_kind

SHORT_PROMPT_TOKENS, OUTPUT_TOKENS = 16, 8
LEAD_S = 1.0  # the common start is this far ahead, as the arm runner sets it (START_DELAY_S)
MODES = ("ahead", "inline")
CLIENTS = ("moeperf_ahead", "moeperf_inline", "vllm_bench_serve")


# --- schedules ------------------------------------------------------------------------------------
def closed_schedule(users: int, turns: int) -> list[PlannedRequest]:
    reqs = []
    for t in range(turns):
        for u in range(users):
            i = t * users + u
            after = None if t == 0 else i - users
            reqs.append(
                PlannedRequest(
                    index=i,
                    send_offset_s=0.0,
                    prompt_tokens=SHORT_PROMPT_TOKENS,
                    max_tokens=OUTPUT_TOKENS,
                    after_index=after,
                )
            )
    return reqs


def open_schedule(rate_rps: float, n: int) -> list[PlannedRequest]:
    return [
        PlannedRequest(index=i, send_offset_s=i / rate_rps, prompt_tokens=SHORT_PROMPT_TOKENS, max_tokens=OUTPUT_TOKENS)
        for i in range(n)
    ]


def burst_schedule(n: int, prompt_tokens: int, at_s: float) -> list[PlannedRequest]:
    """A wave of ``n`` short requests at 0 (it opens the connections the burst reuses), then the burst."""
    warm = [
        PlannedRequest(index=i, send_offset_s=0.0, prompt_tokens=SHORT_PROMPT_TOKENS, max_tokens=1) for i in range(n)
    ]
    burst = [
        PlannedRequest(index=n + i, send_offset_s=at_s, prompt_tokens=prompt_tokens, max_tokens=OUTPUT_TOKENS)
        for i in range(n)
    ]
    return warm + burst


# --- moeperf --------------------------------------------------------------------------------------
def run_moeperf(url: str, reqs: list[PlannedRequest], mode: str, measured: set[int]) -> dict[str, Any]:
    """One replay; lags over the ``measured`` indices only. Server lag is absolute here: the server's
    receive time minus the intended send time, both on CLOCK_MONOTONIC."""
    settings = ClientSettings(base_url=url, model="m", arm="bench", vocab_lo=3, vocab_hi=98, payloads=mode)  # type: ignore[arg-type]
    probe, stats = HealthProbe(), PayloadStats()
    clock = ReplayClock(time.time() + LEAD_S)

    async def go() -> list[Any]:
        return [r async for r in replay(reqs, settings, 0.0, health=probe, clock=clock, payload_stats=stats)]

    _server_log(url)  # clear it
    loop_cpu0 = time.thread_time()  # this thread runs the loop: its CPU time is the sending loop's
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        recs = sorted(runner.run(go()), key=lambda r: r.index)
    loop_cpu_s = time.thread_time() - loop_cpu0
    log = _server_log(url)
    mine = [r for r in recs if r.index in measured]
    sends = [r.actual_send_s for r in mine if r.actual_send_s is not None]
    out: dict[str, Any] = {
        "requests": len(reqs),
        "ok": sum(r.ok for r in recs),
        "dispatch_lag_ms": _pcts([v for r in mine if (v := r.dispatch_lag_ms) is not None]),
        "client_cpu_percent": probe.result.cpu_percent if probe.result else None,
        "loop_lag_p99_ms": probe.result.loop_lag_p99_ms if probe.result else None,
        # CPU of the sending loop's thread per request (whole replay: sending, reading, records): what moved off it
        "loop_cpu_us_per_request": loop_cpu_s / len(reqs) * 1e6,
        "bodies": {
            "mode": stats.mode,
            "built": stats.built,
            "late": stats.late,
            "demanded": stats.demanded,
            "max_ready": stats.max_ready,
            "build_cpu_s": round(stats.build_s, 4),
        },
        "server": _server_view(log, len(reqs), len(measured)),
        "client_send_spread_ms": (max(sends) - min(sends)) * 1000.0 if sends else None,
    }
    if not any(r.after_index is not None for r in reqs):  # on a schedule: pair the n-th receive with the n-th send
        intended = np.array(sorted(r.intended_send_s for r in mine))
        recv = np.array(sorted(t for t, _ in log)[-len(measured) :])
        if recv.size == intended.size:
            out["server_lag_abs_ms"] = _pcts((recv - np.array([clock.perf_s(t) for t in intended])) * 1000.0)
            d = recv - intended
            out["server_lag_rel_ms"] = _pcts((d - d.min()) * 1000.0)
    return out


def _cpu_ticks(cpus: set[int] | None) -> list[int] | None:
    """/proc/stat's ticks of the client's CPUs (all CPUs when not pinned), summed per column; None off Linux."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    names = {f"cpu{c}" for c in cpus} if cpus else {"cpu"}
    rows = [[int(v) for v in line.split()[1:]] for line in lines if line.split()[0] in names]
    return [sum(col) for col in zip(*rows, strict=True)] if rows else None


def _stolen_percent(before: list[int] | None, after: list[int] | None) -> float | None:
    """Share of the client CPUs' time the hypervisor gave to someone else (steal, the 8th column) during a run:
    on a virtual machine, a run with a large share measured the host's scheduling as much as the client."""
    if before is None or after is None or len(before) < 8:
        return None
    delta = [b - a for a, b in zip(before, after, strict=True)]
    return 100.0 * delta[7] / sum(delta) if sum(delta) else None


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when it is installed, as in the client actors (Ray runs async actors on uvloop when it can)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _server_view(log: list[tuple[float, float]], n: int, measured: int) -> dict[str, Any]:
    """What the server saw of the last ``measured`` requests: receive-time spread and throughput."""
    recv = np.array(sorted(t for t, _ in log))
    first = np.array([f for _, f in log])
    tail = recv[-measured:] if measured else recv
    span = float(first.max() - recv.min()) if recv.size else 0.0
    return {
        "received": int(recv.size),
        "recv_spread_ms": float((tail.max() - tail.min()) * 1000.0) if tail.size else None,
        "requests_per_s": n / span if span > 0 else None,
    }


# --- vllm bench serve -----------------------------------------------------------------------------
def run_vllm(
    url: str,
    reqs: list[PlannedRequest],
    measured: set[int],
    tokenizer: Path,
    work: Path,
    worker: VllmWorker,
    max_concurrency: int | None = None,
) -> dict[str, Any]:
    trace = work / "schedule.jsonl"
    chunk = max(r.prompt_tokens for r in reqs)  # one hash id per request: unique prompts of exact length
    with trace.open("w") as f:
        for r in reqs:
            row = {"timestamp": r.send_offset_s, "input_length": r.prompt_tokens, "output_length": r.max_tokens}
            f.write(json.dumps({**row, "hash_ids": [r.index]}) + "\n")
    args = [
        "--backend", "vllm", "--base-url", url, "--model", "m", "--tokenizer", str(tokenizer),
        "--dataset-name", "timed_trace", "--dataset-path", str(trace),
        "--timed-trace-chunk-hash-size", str(chunk), "--num-prompts", str(len(reqs)),
        "--ignore-eos", "--temperature", "0", "--num-warmups", "0", "--disable-tqdm",
        "--save-result", "--result-dir", str(work), "--result-filename", "vllm.json",
    ]  # fmt: skip
    if max_concurrency:
        args += ["--max-concurrency", str(max_concurrency)]
    _server_log(url)
    worker.run(args)
    out = json.loads((work / "vllm.json").read_text())
    log = _server_log(url)[-len(reqs) :]  # vllm sends one test request first
    res: dict[str, Any] = {
        "requests": len(reqs),
        "ok": int(out["completed"]),
        "request_throughput": out.get("request_throughput"),
        "server": _server_view(log, len(reqs), len(measured)),
        "command": "vllm bench serve " + " ".join(args),
    }
    if not max_concurrency and len(measured) == len(reqs):  # open loop: lag against the schedule, relative
        recv = np.array(sorted(t for t, _ in log))
        d = recv - np.array(sorted(r.send_offset_s for r in reqs))
        res["server_lag_rel_ms"] = _pcts((d - d.min()) * 1000.0)
    return res


# --- the run --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The moeperf client at the top of a sweep, next to vllm bench serve.")
    p.add_argument("--repeats", type=int, default=2, help="Runs per client and load, interleaved.")
    p.add_argument("--closed-concurrency", type=int, default=1024)
    p.add_argument("--closed-turns", type=int, default=4)
    p.add_argument("--open-rate", type=float, default=2000.0)
    p.add_argument("--open-seconds", type=float, default=2.0)
    p.add_argument("--burst", type=int, default=64)
    p.add_argument("--burst-prompt-tokens", type=int, default=8000)
    p.add_argument("--loads", nargs="+", default=["closed", "open", "burst"], choices=["closed", "open", "burst"])
    p.add_argument("--pin", action="store_true", help="Server on the last CPU, both clients on the first.")
    p.add_argument(
        "--clients", nargs="+", default=list(CLIENTS), choices=CLIENTS, help="Which clients (vLLM's needs vLLM)."
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ns = p.parse_args(argv)
    server_cpus = client_cpus = None
    if ns.pin and (n := os.cpu_count() or 1) > 1:
        server_cpus, client_cpus = {n - 1}, {0}
        _pin(client_cpus)

    clients = tuple(c for c in CLIENTS if c in ns.clients)
    tokenizer = Path()
    if "vllm_bench_serve" in clients:
        from modelgen.tiny_moe import TinyMoeSpec, ensure_tiny_model

        tokenizer = ensure_tiny_model(TinyMoeSpec())
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    port = free_port()
    server = _start_server(port, server_cpus)
    worker: VllmWorker | None = None
    url = f"http://127.0.0.1:{port}"
    runs: list[dict[str, Any]] = []
    try:
        if "vllm_bench_serve" in clients:
            worker = VllmWorker(client_cpus)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            for rep in range(ns.repeats):
                order = clients if rep % 2 == 0 else clients[::-1]
                for load in ns.loads:
                    run: dict[str, Any] = {"load": load, "repeat": rep, "loadavg_1m": os.getloadavg()[0]}
                    for c in order:
                        ticks = _cpu_ticks(client_cpus)
                        run[c] = _one(load, c, url, ns, tokenizer, work, worker)
                        run[c]["client_cpus_stolen_percent"] = _stolen_percent(ticks, _cpu_ticks(client_cpus))
                    runs.append(run)
                    print(f"#{rep} {load}: " + _line(run, clients), flush=True)
    finally:
        if worker is not None:
            worker.close()
        server.kill()
        server.wait()
    result = {
        "what": "moeperf client (bodies built ahead vs inline) vs vllm bench serve: closed loop, open loop, burst",
        "date": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.client_levels_bench", *(argv or sys.argv[1:])]),
        "machine": _machine(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "client_event_loop": "uvloop" if _loop_factory() else "asyncio",
        "client_http": "workloads.http1 (asyncio.Protocol, kept-alive, connections opened before the first send)",
        "client_timer": default_kind(),
        "pinned": {"server_cpus": sorted(server_cpus or []), "client_cpus": sorted(client_cpus or [])},
        "loads": {
            "closed": {"concurrency": ns.closed_concurrency, "turns": ns.closed_turns, "prompt_tokens": 16},
            "open": {"rate_rps": ns.open_rate, "seconds": ns.open_seconds, "prompt_tokens": 16},
            "burst": {"requests": ns.burst, "prompt_tokens": ns.burst_prompt_tokens, "after_warm_wave": ns.burst},
            "output_tokens": OUTPUT_TOKENS,
            "tokens_per_chunk": 1,
        },
        "summary": summarize(runs, clients),
        "runs": runs,
    }
    ns.out.mkdir(parents=True, exist_ok=True)
    path = ns.out / f"client_levels_bench-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=1), "->", path)
    return 0


def _one(
    load: str, client: str, url: str, ns: argparse.Namespace, tokenizer: Path, work: Path, worker: VllmWorker | None
) -> dict[str, Any]:
    if load == "closed":
        reqs = closed_schedule(ns.closed_concurrency, ns.closed_turns)
        measured = {r.index for r in reqs if r.after_index is not None}  # the chained sends
    elif load == "open":
        reqs = open_schedule(ns.open_rate, int(ns.open_rate * ns.open_seconds))
        measured = {r.index for r in reqs}
    else:
        reqs = burst_schedule(ns.burst, ns.burst_prompt_tokens, at_s=0.5)
        measured = {r.index for r in reqs[ns.burst :]}
    if client == "vllm_bench_serve":
        assert worker is not None
        conc = ns.closed_concurrency if load == "closed" else None
        every = {r.index for r in reqs}
        return run_vllm(url, reqs, every if load == "closed" else measured, tokenizer, work, worker, conc)
    return run_moeperf(url, reqs, client.removeprefix("moeperf_"), measured)


def _line(run: dict[str, Any], clients: tuple[str, ...]) -> str:
    parts = []
    for c in clients:
        r = run[c]
        if run["load"] == "closed":
            parts.append(f"{c} {r['server']['requests_per_s'] or 0:.0f} req/s")
        elif run["load"] == "open":
            lag = r.get("server_lag_rel_ms") or r.get("server_lag_abs_ms") or {}
            parts.append(f"{c} server p99 {lag.get('p99') or 0:.2f} ms")
        else:
            parts.append(f"{c} spread {r['server']['recv_spread_ms'] or 0:.2f} ms")
        if "dispatch_lag_ms" in r:
            lag = r["dispatch_lag_ms"]
            parts[-1] += (
                f" (own p99 {lag['p99'] or 0:.2f}, max {lag['max'] or 0:.2f} ms,"
                f" loop {r['loop_cpu_us_per_request']:.0f} us/req)"
            )
    return "; ".join(parts)


def summarize(runs: list[dict[str, Any]], clients: tuple[str, ...] = CLIENTS) -> dict[str, Any]:
    """Per load and client, each repeat's headline numbers (a list: two repeats have no useful median)."""
    out: dict[str, Any] = {}
    for load in ("closed", "open", "burst"):
        mine = [r for r in runs if r["load"] == load]
        if not mine:
            continue
        out[load] = {}
        for c in clients:
            rows = [r[c] for r in mine]
            row: dict[str, Any] = {
                "all_ok": all(x["ok"] == x["requests"] for x in rows),
                "server_requests_per_s_each": [x["server"]["requests_per_s"] for x in rows],
                "server_recv_spread_ms_each": [x["server"]["recv_spread_ms"] for x in rows],
                "client_cpus_stolen_percent_each": [x["client_cpus_stolen_percent"] for x in rows],
            }
            if c != "vllm_bench_serve":
                row["dispatch_lag_p99_ms_each"] = [x["dispatch_lag_ms"]["p99"] for x in rows]
                row["dispatch_lag_max_ms_each"] = [x["dispatch_lag_ms"]["max"] for x in rows]
                row["bodies_late_each"] = [x["bodies"]["late"] for x in rows]
                row["client_cpu_percent_each"] = [x["client_cpu_percent"] for x in rows]
                row["loop_cpu_us_per_request_each"] = [x["loop_cpu_us_per_request"] for x in rows]
                row["producer_cpu_us_per_request_each"] = [
                    x["bodies"]["build_cpu_s"] / x["requests"] * 1e6 for x in rows
                ]
                if "server_lag_abs_ms" in rows[0]:
                    row["server_lag_abs_p99_ms_each"] = [x["server_lag_abs_ms"]["p99"] for x in rows]
                    row["server_lag_abs_max_ms_each"] = [x["server_lag_abs_ms"]["max"] for x in rows]
            if "server_lag_rel_ms" in rows[0]:
                row["server_lag_rel_p99_ms_each"] = [x["server_lag_rel_ms"]["p99"] for x in rows]
            out[load][c] = row
    return out


if __name__ == "__main__":
    sys.exit(main())
