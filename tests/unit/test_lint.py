"""Lint and types are part of the suite, so a red CI says what a reviewer would."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [
    "cluster",
    "common",
    "experiment",
    "modelgen",
    "result_format",
    "workloads",
    "moe_opt",
    "analysis",
    "dashboards",
]


def test_ruff_clean():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_clean():
    r = subprocess.run(
        [sys.executable, "-m", "mypy", *PACKAGES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
