"""What every result file must say about where and how it was measured."""

from __future__ import annotations

import datetime as dt
import platform
import shlex
import subprocess
import sys

import torch
import triton


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment() -> dict:
    """GPU, driver, library versions, UTC date and the exact command line of this process."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    return {
        "gpu": gpu,
        "gpu_count": torch.cuda.device_count(),
        "driver": _driver_version(),
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        # orig_argv keeps "-m moe_opt.bench.run" as typed (sys.argv[0] would be the module's file path).
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
    }
