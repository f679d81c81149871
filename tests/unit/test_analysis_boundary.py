"""analysis reads saved results only: importing all of it must not pull in Ray or cluster."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_analysis_imports_neither_ray_nor_cluster():
    modules = sorted(p.stem for p in (REPO / "analysis").glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module('analysis.' + m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'cluster'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
