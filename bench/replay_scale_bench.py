"""How the streamed schedule scales: 10k, 100k and 1M synthetic requests, built, sharded and replayed.

Two parts:

1. **Schedule** (a child process per size, so its peak memory, ``ru_maxrss``, is that size's alone): build
   the columnar schedule of N synthetic requests (poisson arrivals, 16-token prompts, 4-token outputs),
   write and read ``schedule.parquet``, shard it over the client actors, and pickle a shard as the driver
   sends it through Ray.
2. **Replay** (real Ray on loopback, ``ray.init(num_cpus=...)``): N requests sent by ``--clients``
   ``ClientActor``s, each given its shard as columns, against ``bench/stream_server.py`` on 127.0.0.1, the
   records streamed back and appended to a ``RecordJournal`` as the driver does (a thread per client),
   then sealed. Driver and client actor RSS are sampled every second. The rate is the highest a short
   search finds sustained (``--rate`` skips the search): p99 send lag (actual minus intended send) under
   ``--lag-bound-ms`` and a median lag that does not climb (by more than 5 ms) from the first quarter of the
   replay to the last. A size that would
   take longer than ``--max-span-s`` at that rate is still built, sharded and shipped whole (each client
   holds its whole shard), but cut at ``--max-span-s`` by the clients' own replay deadline: the records
   finished by then are kept, and the memory series covers that time.

    python3 -m bench.replay_scale_bench --sizes 10000 100000 1000000 --replay-sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from common.ports import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROMPT_TOKENS, OUTPUT_TOKENS = 16, 4
SAMPLE_S = 1.0
START_LEAD_S = 3.0  # between the common start and now: every client has its shard by then
SEARCH_RATES_RPS = (100, 200, 400, 800, 1600, 3200)
SEARCH_SECONDS = 8.0
GROWTH_MS = 5.0


def _workload(n: int, rate_rps: float) -> Any:
    from workloads.arrivals.poisson import PoissonArrivalSpec
    from workloads.traces.synthetic import SyntheticTraceSpec
    from workloads.workload import WorkloadSpec

    return WorkloadSpec(
        trace=SyntheticTraceSpec(num_requests=n, input_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS),
        arrival=PoissonArrivalSpec(rate_rps=rate_rps),
    )


# --- part 1: the schedule, in a child process per size -----------------------------------------------------
def _schedule_child(n: int, clients: int, work: Path) -> dict[str, Any]:
    import tracemalloc

    from workloads.schedule_columns import ScheduleColumns
    from workloads.schedule_file import read_schedule, write_schedule
    from workloads.workload import build_schedule

    rss_imports_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    schedule = build_schedule(_workload(n, 1000.0))
    build_s = time.perf_counter() - t
    rss_built_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    path = write_schedule(schedule, work)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    back = read_schedule(work)
    read_s = time.perf_counter() - t
    assert back == schedule
    t = time.perf_counter()
    parts = [schedule.requests.shard(clients, k) for k in range(clients)]
    shard_s = time.perf_counter() - t
    t = time.perf_counter()
    payload = pickle.dumps(parts[0].to_arrays(), protocol=5)
    pickle_s = time.perf_counter() - t
    # For scale: what the same requests cost as PlannedRequest objects (measured on 10,000 of them).
    k = min(n, 10_000)
    tracemalloc.start()
    objects = list(schedule.requests[:k])
    object_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del objects
    assert isinstance(schedule.requests, ScheduleColumns)
    return {
        "requests": n,
        "build_s": round(build_s, 3),
        "columns_bytes": schedule.requests.nbytes,
        "schedule_file_bytes": path.stat().st_size,
        "write_s": round(write_s, 3),
        "read_s": round(read_s, 3),
        "shards": clients,
        "shard_s": round(shard_s, 3),
        "shard_pickle_bytes": len(payload),
        "shard_pickle_s": round(pickle_s, 4),
        "as_objects_bytes_per_request": round(object_bytes / k),
        "rss_after_imports_mb": round(rss_imports_mb, 1),
        "rss_after_build_mb": round(rss_built_mb, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def schedule_sizes(sizes: list[int], clients: int) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="moeperf-sched-") as work:
            cmd = [sys.executable, "-m", "bench.replay_scale_bench", "--schedule-child", str(n), "--work", work,
                   "--clients", str(clients)]  # fmt: skip
            r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
            if r.returncode != 0:
                raise RuntimeError(r.stderr[-4000:])
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    return rows


# --- part 2: the replay through Ray --------------------------------------------------------------------------
def _start_server(port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.stream_server", "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"stream server did not start: {line!r}")
    return proc


class _Sampler:
    """RSS of the driver and of every client actor, every ``SAMPLE_S``; also empties the server's log."""

    def __init__(self, client_pids: list[int], url: str) -> None:
        self.procs = [psutil.Process(pid) for pid in client_pids]
        self.me = psutil.Process()
        self.url = url
        self.series: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.series.append({
                "t_s": round(time.perf_counter() - self.t0, 2),
                "driver_rss_mb": round(self.me.memory_info().rss / 2**20, 1),
                "clients_rss_mb": [round(p.memory_info().rss / 2**20, 1) for p in self.procs],
            })  # fmt: skip
            with urllib.request.urlopen(f"{self.url}/log") as r:  # the server logs every request: keep it small
                r.read()
            self._stop.wait(SAMPLE_S)


def _client_pids(ours: psutil.Process, count: int) -> list[int]:
    """The client actors' worker processes: descendants of this driver (its own Ray) titled ray::ClientActor."""
    found = []
    for p in ours.children(recursive=True):
        try:
            if "ray::ClientActor" in " ".join(p.cmdline()):
                found.append(p.pid)
        except psutil.Error:
            continue
    if len(found) != count:
        raise RuntimeError(f"found {len(found)} client actor processes, expected {count}")
    return found


def replay_once(
    clients: list[Any], pids: list[int], url: str, n: int, rate_rps: float, work: Path, cut_s: float | None = None
) -> dict[str, Any]:
    """One replay of n requests at rate_rps, as the arm runner does it: shard, send columns, journal records.
    ``cut_s``: end it this long after the start (the clients' deadline), keeping what finished."""
    import ray

    from result_format.records_store import RecordJournal, seal
    from workloads.client import ClientSettings, replay_deadline_s
    from workloads.records import RequestRecord
    from workloads.workload import build_schedule

    t = time.perf_counter()
    schedule = build_schedule(_workload(n, rate_rps))
    build_s = time.perf_counter() - t
    settings = ClientSettings(base_url=url, model="m", arm="bench", vocab_lo=3, vocab_hi=250, request_timeout_s=60.0)
    journal = RecordJournal(work / f"records-{n}-{rate_rps:g}.arrows")
    lock = threading.Lock()
    received = [0] * len(clients)
    errors: list[str] = []
    start = time.time() + START_LEAD_S

    def consume(k: int) -> None:
        part = schedule.requests.shard(len(clients), k)
        deadline_s = replay_deadline_s(part, settings) if cut_s is None else cut_s
        s = dataclasses.replace(settings, client=k, deadline_s=deadline_s)
        try:
            for ref in clients[k].replay.options(num_returns="streaming").remote(part.to_arrays(), s, start):
                batch = [RequestRecord.model_validate(d) for d in ray.get(ref)]
                with lock:
                    journal.append(batch)
                    received[k] += len(batch)
        except Exception as e:  # the bench reports it; a run would fail the arm
            errors.append(f"client {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(len(clients))]
    with _Sampler(pids, url) as sampler:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    wall_s = time.time() - start
    journal.close()
    sealed = seal(journal.path)
    import pyarrow.parquet as pq

    table = pq.read_table(sealed.path, columns=["intended_send_s", "actual_send_s", "error"])
    intended = table.column("intended_send_s").to_numpy()
    actual = table.column("actual_send_s").to_numpy(zero_copy_only=False).astype(float)
    failed = int(table.column("error").is_valid().to_numpy(zero_copy_only=False).sum())
    lag_ms = (actual - intended) * 1000.0
    order = np.argsort(intended)
    q = max(1, len(order) // 4)
    first, last = lag_ms[order[:q]], lag_ms[order[-q:]]
    series = sampler.series
    return {
        "requests": n,
        "rate_rps": rate_rps,
        "clients": len(clients),
        "schedule_build_s": round(build_s, 3),
        "schedule_span_s": round(schedule.duration_s, 1),
        "wall_s": round(wall_s, 1),
        "records": sum(received),
        "failed": failed,
        "cut_at_s": cut_s,
        "errors": [] if cut_s is not None and all("deadline passed" in e for e in errors) else errors,
        "achieved_rps": round(sum(received) / wall_s, 1) if wall_s > 0 else None,
        "not_finished": n - sum(received),
        "send_lag_ms": {k: round(float(np.nanpercentile(lag_ms, p)), 3) for k, p in (("p50", 50), ("p99", 99))},
        "send_lag_p50_ms_first_quarter": round(float(np.nanpercentile(first, 50)), 3),
        "send_lag_p50_ms_last_quarter": round(float(np.nanpercentile(last, 50)), 3),
        "send_lag_p99_ms_first_quarter": round(float(np.nanpercentile(first, 99)), 3),
        "send_lag_p99_ms_last_quarter": round(float(np.nanpercentile(last, 99)), 3),
        "memory_growth_mb": _growth(series),
        "memory_series": series,
    }


def _growth(series: list[dict[str, Any]]) -> dict[str, Any]:
    """RSS at the end minus RSS a quarter of the way in (after start-up and the first window of bodies)."""
    if len(series) < 4:
        return {}
    a, b = series[len(series) // 4], series[-1]
    return {
        "driver_mb": round(b["driver_rss_mb"] - a["driver_rss_mb"], 1),
        "clients_mb": [round(y - x, 1) for x, y in zip(a["clients_rss_mb"], b["clients_rss_mb"], strict=True)],
        "from_t_s": a["t_s"],
        "to_t_s": b["t_s"],
    }


def _sustained(row: dict[str, Any], bound_ms: float) -> bool:
    return (
        not row["errors"]
        and row["failed"] == 0
        and row["send_lag_ms"]["p99"] <= bound_ms
        # Falling behind shows as a median lag that climbs over the replay; p99s of a quarter are too noisy.
        and row["send_lag_p50_ms_last_quarter"] <= row["send_lag_p50_ms_first_quarter"] + GROWTH_MS
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {pkg: version(pkg) for pkg in ("ray", "numpy", "pyarrow", "pydantic", "psutil", "uvloop")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--replay-sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rate", type=float, help="replay at this rate (requests/s) instead of searching for one")
    p.add_argument("--lag-bound-ms", type=float, default=20.0)
    p.add_argument("--max-span-s", type=float, default=540.0)
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--schedule-child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    if ns.schedule_child is not None:
        print(json.dumps(_schedule_child(ns.schedule_child, ns.clients, ns.work)))
        return 0
    out: dict[str, Any] = {
        "command": " ".join(["python3 -m bench.replay_scale_bench", *(sys.argv[1:] if argv is None else argv)]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": len(os.sched_getaffinity(0)),
            "load_average_at_start": os.getloadavg(),
            "versions": _versions(),
        },
        "prompt_tokens": PROMPT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "schedule": schedule_sizes(ns.sizes, ns.clients),
    }
    if ns.replay_sizes:
        out.update(_replays(ns))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    ns.out.mkdir(parents=True, exist_ok=True)
    path = ns.out / f"replay_scale_bench-{stamp}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(path)
    return 0


def _replays(ns: argparse.Namespace) -> dict[str, Any]:
    import logging

    import ray

    from cluster.orchestration.client_actor import ClientActor

    port = free_port()
    server = _start_server(port)
    url = f"http://127.0.0.1:{port}"
    ray.init(address="local", num_cpus=ns.clients + 1, include_dashboard=False, logging_level=logging.WARNING)
    try:
        clients: list[Any] = [ray.remote(ClientActor).options(num_cpus=0).remote() for _ in range(ns.clients)]
        ray.get([c.ready.remote() for c in clients])
        pids = _client_pids(psutil.Process(), ns.clients)
        search: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory(prefix="moeperf-replay-") as tmp:
            work = Path(tmp)
            rate = ns.rate
            if rate is None:
                for r in SEARCH_RATES_RPS:
                    row = replay_once(clients, pids, url, int(r * SEARCH_SECONDS), float(r), work)
                    row.pop("memory_series")
                    search.append(row)
                    print(json.dumps(row), flush=True)
                    if not _sustained(row, ns.lag_bound_ms):
                        break
                    rate = float(r)
                if rate is None:
                    raise RuntimeError(f"no rate sustained within {ns.lag_bound_ms} ms p99 send lag: {search}")
            replays = []
            for n in ns.replay_sizes:
                cut_s = ns.max_span_s if n / rate > ns.max_span_s else None
                row = replay_once(clients, pids, url, n, rate, work, cut_s)
                replays.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "memory_series"}), flush=True)
        return {"rate_search": search, "sustained_rate_rps": rate, "lag_bound_ms": ns.lag_bound_ms,
                "replays": replays}  # fmt: skip
    finally:
        ray.shutdown()
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
