"""results/h200/light-tree.sh in a scratch repository: the run folders leave the tree a hold sends, the scripts stay,
and `off` brings back the branch and every committed file.

Why: a hold that sends the committed results spends 14 calls on the bundle instead of 5, and each call is a chance to
lose the machine; a branch switch that lost or kept the wrong files would show up only on the GPU machine.
"""

from __future__ import annotations

import lzma
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("light-tree.sh", "resplit.sh", "carry-lib.sh", "bundle/stash.sh")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    h200 = repo / "results/h200"
    for name in SCRIPTS:
        (h200 / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "results/h200" / name, h200 / name)
    run = h200 / "some-run-20261206T000000Z-abcdef"
    (run / "records").mkdir(parents=True)
    (run / "result.json").write_text("{}")
    (run / "records/arm.parquet").write_bytes(b"\0" * 4096)
    (repo / ".gitignore").write_text("/.gpu[0-9]*/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "scratch")
    part = repo / ".gpu1"
    part.mkdir()
    (part / "part_00").write_bytes(lzma.compress(b"bundle" * 1000))
    (part / "parts").write_text("1\n")
    return repo


def light_tree(repo: Path, arg: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["bash", "results/h200/light-tree.sh", arg], cwd=repo, env=env, capture_output=True, text=True
    )


def test_on_drops_run_folders_keeps_scripts_and_off_restores(scratch: Path) -> None:
    before = set(git(scratch, "ls-files").split())
    on = light_tree(scratch, "on")
    assert on.returncode == 0, on.stderr
    assert git(scratch, "branch", "--show-current").strip() == "hold-light"
    sent = set(git(scratch, "ls-files").split())
    assert not any("some-run" in f for f in sent)
    assert {f"results/h200/{n}" for n in SCRIPTS} <= sent
    assert (scratch / ".gpu1/part_00").exists()  # the bundle was split again, not lost
    off = light_tree(scratch, "off")
    assert off.returncode == 0, off.stderr
    assert git(scratch, "branch", "--show-current").strip() == "main"
    assert set(git(scratch, "ls-files").split()) == before
    assert (scratch / "results/h200/some-run-20261206T000000Z-abcdef/result.json").read_text() == "{}"
    assert "hold-light" not in git(scratch, "branch")


def test_on_refuses_uncommitted_changes_and_off_refuses_elsewhere(scratch: Path) -> None:
    (scratch / "results/h200/resplit.sh").write_text("# changed\n")
    refused = light_tree(scratch, "on")
    assert refused.returncode == 2 and "commit or stash first" in refused.stderr
    assert git(scratch, "branch", "--show-current").strip() == "main"
    off = light_tree(scratch, "off")
    assert off.returncode == 2 and "not on hold-light" in off.stderr
