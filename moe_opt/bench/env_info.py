"""What every kernel-benchmark result must say about where and how it was measured.

The machine facts come from ``common.environment`` (standard library only, like this box may be);
only what torch and Triton themselves know is read here.
"""

from __future__ import annotations

import torch
import triton

from common.environment import command_line, driver_version, python_version, utc_now_iso
from moe_opt.kernels.tile_configs import current_device_name


def environment() -> dict:
    """GPU, driver, library versions, UTC date and the exact command line of this process."""
    return {
        "gpu": current_device_name() or "none",
        "gpu_count": torch.cuda.device_count(),
        "driver": driver_version(),
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": python_version(),
        "date_utc": utc_now_iso(),
        "command": command_line(),
    }
