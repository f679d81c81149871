"""Host-side telemetry of one rank: its worker process's CPU time and involuntary context switches, and its
node's CPU steal and CPU pressure.

Why: on the H200 machine (a 16-vCPU VM) two engines of one setting, same GPU, same SM clock, same traffic,
differed by 10% in throughput at concurrency 64, with each of the slower engine's steps 21-24% longer over
its whole life and the GPU idle 36-43% of the time in both. What the engine's host side got from the CPUs
is then the first suspect, and these counters tell the cases apart: a worker that was preempted more
(involuntary switches) or ran on stolen time (steal), a node short of CPU (pressure), or a worker that
simply spent more CPU per step. Read from /proc once per sampling period, off the step path; whatever
a kernel does not expose (no PSI, no steal field) is left out, never guessed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

PROCESS_CPU = "moeperf_rank_process_cpu_seconds_total"
INVOLUNTARY_SWITCHES = "moeperf_rank_involuntary_switches_total"
NODE_CPU_STEAL = "moeperf_node_cpu_steal_seconds_total"
NODE_CPU_PRESSURE = "moeperf_node_cpu_pressure_seconds_total"


@dataclass(frozen=True)
class HostReading:
    """Cumulative values since boot (node) or process start (process); None: not exposed here."""

    user_s: float
    system_s: float
    involuntary_switches: int
    steal_s: float | None
    pressure_some_s: float | None


def steal_seconds(stat_text: str, ticks_per_s: float) -> float | None:
    """The node's steal time from /proc/stat's aggregate ``cpu`` line (8th value, in clock ticks)."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            return int(fields[8]) / ticks_per_s if len(fields) > 8 else None
    return None


def pressure_some_seconds(pressure_text: str) -> float | None:
    """Total time some task waited for a CPU, from /proc/pressure/cpu (``total=`` is in microseconds)."""
    for line in pressure_text.splitlines():
        if line.startswith("some "):
            for part in line.split()[1:]:
                key, _, value = part.partition("=")
                if key == "total":
                    return int(value) / 1e6
    return None


def involuntary_switches(status_texts: list[str]) -> int:
    """Summed over the process's threads (each /proc/<pid>/task/<tid>/status counts its own thread)."""
    total = 0
    for text in status_texts:
        for line in text.splitlines():
            if line.startswith("nonvoluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # a thread that exited between the listing and the read; a file this kernel lacks
        return None


def read_host(proc: Path = Path("/proc"), pid: int | None = None) -> HostReading:
    pid = os.getpid() if pid is None else pid
    times = os.times()
    tasks = proc / str(pid) / "task"
    statuses = [t for t in (_read(p / "status") for p in tasks.iterdir()) if t is not None] if tasks.is_dir() else []
    stat = _read(proc / "stat")
    pressure = _read(proc / "pressure" / "cpu")
    return HostReading(
        user_s=times.user,
        system_s=times.system,
        involuntary_switches=involuntary_switches(statuses),
        steal_s=None if stat is None else steal_seconds(stat, float(os.sysconf("SC_CLK_TCK"))),
        pressure_some_s=None if pressure is None else pressure_some_seconds(pressure),
    )


def _series(r: HostReading) -> list[tuple[str, tuple[str, ...], float | None]]:
    """(counter, its extra label values, cumulative value) of one reading."""
    return [
        (PROCESS_CPU, ("user",), r.user_s),
        (PROCESS_CPU, ("system",), r.system_s),
        (INVOLUNTARY_SWITCHES, (), float(r.involuntary_switches)),
        (NODE_CPU_STEAL, (), r.steal_s),
        (NODE_CPU_PRESSURE, (), r.pressure_some_s),
    ]


Inc = Callable[[str, float, tuple[str, ...]], None]
"""Adds to a counter of this rank: (metric name, amount, extra label values after the rank's labels)."""


class HostSampler:
    """A daemon thread that adds each period's host deltas to this rank's counters.

    Counters, not gauges of the cumulative values: a window's share is then ``increase()`` over it, as for
    every other counter of the plugin. A thread that exits takes its switches with it, so a negative delta
    counts as zero.
    """

    def __init__(self, inc: Inc, period_s: float, read: Callable[[], HostReading] = read_host) -> None:
        self.inc, self.period_s, self.read = inc, period_s, read
        self._stop = threading.Event()
        self._last: HostReading | None = None

    def start(self) -> bool:
        if self.period_s <= 0:
            return False
        self.sample_once()  # every series exists from the start, at zero
        threading.Thread(target=self._run, name="moeperf-host", daemon=True).start()
        return True

    def sample_once(self) -> None:
        now, last = self.read(), self._last
        self._last = now
        before = {} if last is None else {(n, e): v for n, e, v in _series(last)}
        for name, extra, value in _series(now):
            old = before.get((name, extra))
            if value is not None:
                self.inc(name, 0.0 if old is None else max(0.0, value - old), extra)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample_once()
            except Exception as e:  # noqa: BLE001 - telemetry never stops the engine
                logger.warning("moeperf: host sampling stopped (%s)", e)
                return

    def stop(self) -> None:
        self._stop.set()
