"""How often does a window read miss the plugin's last publish of expert counts, with one scrape and with two?

vLLM's /metrics serves the engine's processes through prometheus_client's multiprocess collector, which reads one
file per process and metric type in turn (``counter_<pid>.db`` before ``gauge_all_<pid>.db`` on ext4 here). The
plugin's publish writes the counts and then clears ``moeperf_expert_tokens_unpublished``; a scrape that reads the
counter file before a publish and the gauge file after it sees the old counts beside a cleared flag. Each trial
here is one window's end as the harness meets it: a rank serves a step (the plugin's own ``Harvester`` sets the
flag), goes idle, and publishes after a random delay while the reader polls, as the arm runner does, with the
old rule (the first scrape with no rank unpublished) or with ``settled_scrape`` (two such scrapes with equal
counts). A read is torn when its counts miss the step. Real parts: the plugin's ``Harvester`` and metric specs in
their own process, prometheus_client's multiprocess files and collector, the harness's parsing.

Run: python3 -m bench.expert_count_tear_bench [--trials 300] [--layers 48 --experts 128] [--out bench/results]
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from cluster.engine.counters import Scrape, expert_counts, read_scrape, settled_scrape
from common.environment import cpu_model, package_version, python_version

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.05  # the arm runner's SETTLE_POLL_S
TIMEOUT_S = 10.0  # its SETTLE_TIMEOUT_S
LABELS = ("e0", "bench", "node", "0", "0", "uuid")  # engine, arm, node, rank, gpu, gpu_uuid


def _rank(conn: Connection, layers: int, experts: int) -> None:
    """One engine rank: the plugin's counts, harvester and metrics, driven step by step from the reader."""
    import torch

    from moe_opt.plugin.expert_harvest import Harvester, counter_publish
    from moe_opt.plugin.expert_load import DeviceCounts, MoeLayer
    from moe_opt.plugin.metrics import EXPERT_TOKENS, EXPERT_TOKENS_UNPUBLISHED, create, spec

    moe = [MoeLayer(n, f"model.layers.{n}.mlp.experts", experts, 8, False) for n in range(layers)]
    counts = DeviceCounts(moe, "cpu", max_tokens=1)
    flag = create(spec(EXPERT_TOKENS_UNPUBLISHED)).labels(*LABELS)
    flag.set(0)
    publish = counter_publish(create(spec(EXPERT_TOKENS)), LABELS, moe)
    harvester = Harvester(counts, publish, unpublished=lambda pending: flag.set(1 if pending else 0), idle_s=0.0)
    harvester.begin(None)  # the first served step zeroes the counts; publish it, so every trial starts settled
    harvester.end()
    harvester.harvest()
    while (msg := conn.recv()) is not None:
        delay_s = msg
        harvester.begin(None)  # a step: the flag goes to 1, and every expert of every layer gets one token
        counts.counts[:, :experts] += torch.ones((layers, experts), dtype=torch.int64)
        harvester.end()
        conn.send("served")
        time.sleep(delay_s)  # the rank's idle publish comes at some point of the reader's polling
        harvester.harvest()


def _scrape(registry: Any) -> str:
    """What vLLM's /metrics answers in multiprocess mode: the collector over the engine's files, as text."""
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def first_published_scrape(scrape: Callable[[], str], timeout_s: float, poll_s: float) -> Scrape:
    """The rule before 2026-12-07: the first scrape in which no rank is unpublished."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = read_scrape(scrape())
        if not got.pending_ranks or time.monotonic() >= deadline:
            return got
        time.sleep(poll_s)


RULES: dict[str, Callable[[Callable[[], str], float, float], Scrape]] = {
    "one_scrape": first_published_scrape,
    "settled_scrape": lambda scrape, timeout_s, poll_s: settled_scrape(scrape, timeout_s, poll_s),
}


def run(trials: int, layers: int, experts: int, seed: int) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    results: dict[str, Any] = {}
    rng = random.Random(seed)
    for rule_name, rule in RULES.items():
        with tempfile.TemporaryDirectory(prefix="moeperf-tear-") as mpdir:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = mpdir  # the rank process writes there, as an engine's do
            ctx = mp.get_context("spawn")
            here, there = ctx.Pipe()
            rank = ctx.Process(target=_rank, args=(there, layers, experts), daemon=True)
            rank.start()
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=mpdir)
            scrape = functools.partial(_scrape, registry)

            torn, scrapes_s = 0, []
            for trial in range(1, trials + 1):
                here.send(rng.uniform(0.0, 4 * POLL_S))
                assert here.recv() == "served"
                t0 = time.monotonic()
                counts = expert_counts(rule(scrape, TIMEOUT_S, POLL_S).samples)
                scrapes_s.append(time.monotonic() - t0)
                torn += min(counts.values()) < trial  # the read misses this trial's step
            here.send(None)
            rank.join(timeout=30)
            files = [p.name.split("_")[0] for p in Path(mpdir).glob("*.db")]  # in the order the collector reads
        results[rule_name] = {
            "trials": trials,
            "torn_reads": torn,
            "torn_fraction": torn / trials,
            "read_s_median": sorted(scrapes_s)[len(scrapes_s) // 2],
            "multiprocess_files": files,
        }
        print(f"{rule_name}: {torn} of {trials} reads missed the last step", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--layers", type=int, default=48, help="MoE layers (48: Qwen3-30B-A3B)")
    ap.add_argument("--experts", type=int, default=128, help="experts per layer (128: Qwen3-30B-A3B)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args(argv)
    started = datetime.now(UTC)
    results = run(args.trials, args.layers, args.experts, args.seed)
    out = {
        "bench": "expert_count_tear_bench",
        "command": "python3 -m bench.expert_count_tear_bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date_utc": started.isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": {"python": python_version(), "prometheus_client": package_version("prometheus_client")},
        "layers": args.layers,
        "experts": args.experts,
        "poll_s": POLL_S,
        "publish_delay_s": [0.0, 4 * POLL_S],
        "rules": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"expert_count_tear_bench-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
