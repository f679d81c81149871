"""Host telemetry of a rank: /proc parsed as the kernel writes it, and per-period deltas added to counters."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from moe_opt.plugin.host import (
    INVOLUNTARY_SWITCHES,
    NODE_CPU_PRESSURE,
    NODE_CPU_STEAL,
    PROCESS_CPU,
    HostReading,
    HostSampler,
    involuntary_switches,
    pressure_some_seconds,
    read_host,
    steal_seconds,
)

STAT = "cpu  601383 562513 262486 3559944 37596 0 2992 48878 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nctxt 99\n"
PRESSURE = "some avg10=0.00 avg60=0.09 avg300=0.10 total=704365120\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
STATUS = "Name:\tpython3\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t{n}\n"


def test_proc_files_parse_as_the_kernel_writes_them():
    assert steal_seconds(STAT, 100.0) == pytest.approx(488.78)  # the aggregate line, not cpu0's
    assert steal_seconds("cpu  1 2 3 4\n", 100.0) is None  # an old kernel without the field
    assert pressure_some_seconds(PRESSURE) == pytest.approx(704.36512)
    assert pressure_some_seconds("") is None
    assert involuntary_switches([STATUS.format(n=3), STATUS.format(n=40)]) == 43


def test_this_process_reads_and_its_cpu_time_grows_with_work():
    before = read_host()
    digest = b"x"
    for _ in range(200_000):
        digest = hashlib.sha256(digest).digest()
    after = read_host()
    assert after.user_s + after.system_s > before.user_s + before.system_s
    assert after.involuntary_switches >= 0
    if Path("/proc/pressure/cpu").exists():
        assert after.pressure_some_s is not None and after.pressure_some_s >= before.pressure_some_s


def test_the_sampler_adds_each_periods_deltas_and_never_a_negative_one():
    readings = iter(
        [
            HostReading(user_s=5.0, system_s=1.0, involuntary_switches=100, steal_s=2.0, pressure_some_s=None),
            HostReading(user_s=5.5, system_s=1.25, involuntary_switches=90, steal_s=2.5, pressure_some_s=None),
        ]
    )
    added: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    sampler = HostSampler(lambda name, amount, extra: added.setdefault((name, extra), []).append(amount), 1.0,
                          read=lambda: next(readings))  # fmt: skip
    sampler.sample_once()  # what the process did before the plugin started is not counted
    sampler.sample_once()
    assert added == {
        (PROCESS_CPU, ("user",)): [0.0, 0.5],
        (PROCESS_CPU, ("system",)): [0.0, 0.25],
        (INVOLUNTARY_SWITCHES, ()): [0.0, 0.0],  # a thread exited with its switches: no negative increment
        (NODE_CPU_STEAL, ()): [0.0, 0.5],
    }
    assert (NODE_CPU_PRESSURE, ()) not in added  # not exposed: left out, not zero
