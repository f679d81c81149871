"""results/h200/hold-plan.sh in a scratch repository: the calls it prints are the ones a GPU hold makes back to back,
so the launch must ride in the last bundle part's call when everything fits (one gap fewer in which the machine is
lost), and must get calls of its own, each within 64 MiB, when it does not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCH = "--prometheus h200-claim2-flashinfer-vs-triton"


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "results/h200").mkdir(parents=True)
    for name in ("hold-plan.sh", "carry-lib.sh"):
        shutil.copy(REPO / "results/h200" / name, repo / "results/h200" / name)
    (repo / ".gitignore").write_text("/.gpu[0-9]*/\n/.fi1/\n/.jit/\n/.prom/\n")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    for k in (1, 2):
        (repo / f".gpu{k}").mkdir()
        (repo / f".gpu{k}/part_0{k - 1}").write_bytes(b"\0" * 1024)
    (repo / ".gpu1/parts").write_text("2\n")
    for path in (".fi1/install.sh", ".jit/jit-seed.tar.xz", ".prom/prometheus.xz"):
        (repo / path).parent.mkdir(exist_ok=True)
        (repo / path).write_bytes(b"\0" * 1024)
    return repo


def plan(repo: Path, *args: str) -> list[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "MOEPERF_ARGS": "--first_round 2 --rounds 2"}
    out = subprocess.run(
        ["bash", "results/h200/hold-plan.sh", *args, *LAUNCH.split()],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in out.stdout.splitlines() if line.startswith("call ")]


def test_the_launch_rides_in_the_last_parts_call_with_what_it_needs(scratch):
    calls = plan(scratch, "--fi", "--seed")
    assert calls[0] == 'call 1: carry [".gpu1"]: bash .gpu1/stash.sh'
    assert len(calls) == 2
    assert calls[1].startswith('call 2: carry [".gpu2", ".fi1", ".jit", ".prom"]: bash .gpu2/stash.sh && ')
    assert "bash .fi1/install.sh && export PYTHONPATH=$HOME/moeperf-stash/site && " in calls[1]
    # hold-plan's --seed reaches the launch, which unpacks the carried .jit itself.
    assert calls[1].endswith(f'MOEPERF_ARGS="--first_round 2 --rounds 2" bash results/h200/launch.sh --seed {LAUNCH}')


def test_what_does_not_fit_one_call_gets_calls_of_its_own(scratch):
    # Each within 64 MiB on its own, 70 MiB together (sparse files: only their length counts).
    for path, mib in ((".jit/jit-seed.tar.xz", 40), (".prom/prometheus.xz", 30)):
        with open(scratch / path, "r+b") as f:
            f.truncate(mib * 1048576)
    calls = plan(scratch, "--fi", "--seed")
    assert calls[1:] == [
        'call 2: carry [".gpu2", ".fi1"]: bash .gpu2/stash.sh && bash .fi1/install.sh',
        'call 3: carry [".jit"]: bash results/h200/jit-seed.sh unpack',
        'call 4: carry [".prom"]: export PYTHONPATH=$HOME/moeperf-stash/site && MOEPERF_ARGS="--first_round 2 '
        f'--rounds 2" bash results/h200/launch.sh --seed {LAUNCH}',
    ]
