"""The environment a result records: the code's commit, and whether that code was edited after it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cluster.observability.environment import git_commit, git_dirty, node_environment


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
