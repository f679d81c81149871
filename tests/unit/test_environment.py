"""The environment a result records: the code's commit, and whether that code was edited after it."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.observability.environment import node_environment
from common.environment import REPO, git_commit, git_dirty


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_edited_tracked_code_is_flagged_dirty(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "kernel.py").write_text("x = 1\n")
    _git(tmp_path, "add", "kernel.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert git_commit(tmp_path) and git_dirty(tmp_path) is False
    (tmp_path / "scratch.txt").write_text("untracked files are not the code\n")
    assert git_dirty(tmp_path) is False
    (tmp_path / "kernel.py").write_text("x = 2\n")
    assert git_dirty(tmp_path) is True


def test_outside_a_repository_both_are_unknown(tmp_path: Path) -> None:
    assert git_commit(tmp_path) is None and git_dirty(tmp_path) is None
    assert "moeperf_git_dirty" in node_environment()


def test_a_node_records_the_same_facts() -> None:
    env = node_environment()
    assert set(env) == {
        "hostname", "python", "platform", "cpu", "cpu_count", "memory_gib", "gpus", "versions",
        "moeperf_git_commit", "moeperf_git_dirty",
    }  # fmt: skip
    assert set(env["versions"]) == {"moeperf", "vllm", "torch", "triton", "ray", "pydantic", "aiohttp"}
    assert env["versions"]["pydantic"] is not None and env["cpu"]


def test_a_kernel_benchmark_records_the_same_facts() -> None:
    pytest.importorskip("triton")
    from moe_opt.bench.env_info import environment

    env = environment()
    assert set(env) == {"gpu", "gpu_count", "driver", "cuda_runtime", "torch", "triton", "python", "date_utc",
                        "command"}  # fmt: skip
    assert env["python"] == platform.python_version() and env["date_utc"].endswith("+00:00")


def test_the_kernel_benchmarks_environment_needs_no_pydantic_ray_or_vllm() -> None:
    """They run on a bare GPU box with torch and Triton only."""
    code = (
        "import sys; import common.environment, common.ports\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'ray', 'vllm', 'torch')]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
