"""GPU identity and NVML telemetry of one rank's GPU; everything here is absent cleanly without a GPU.

nvidia-ml-py is optional: imported lazily, and any NVML failure only turns the telemetry off (with
one log line), never the engine.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

NO_GPU = "none"


@dataclass(frozen=True)
class GpuIdentity:
    index: str  # physical index (as in nvidia-smi), or "none"
    uuid: str  # "GPU-...", or "none"


def physical_index(local_device: int, visible: str | None) -> str:
    """Map a CUDA device ordinal to the physical index named in CUDA_VISIBLE_DEVICES."""
    if not visible:
        return str(local_device)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    return ids[local_device] if local_device < len(ids) else str(local_device)


def identify(device: Any) -> GpuIdentity:
    """Identity of a torch device; NO_GPU for anything but CUDA."""
    if getattr(device, "type", None) != "cuda":
        return GpuIdentity(NO_GPU, NO_GPU)
    import torch

    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    uuid = NO_GPU
    try:
        raw = str(torch.cuda.get_device_properties(ordinal).uuid)
        uuid = raw if raw.startswith("GPU-") else f"GPU-{raw}"
    except Exception:  # noqa: BLE001 - older torch: no uuid property
        pass
    return GpuIdentity(physical_index(ordinal, os.environ.get("CUDA_VISIBLE_DEVICES")), uuid)


class NvmlSampler:
    """A daemon thread that sets the GPU gauges of one rank every ``period_s`` seconds."""

    def __init__(self, gpu: GpuIdentity, set_gauge: Callable[[str, float], None], period_s: float) -> None:
        self.gpu, self.set_gauge, self.period_s = gpu, set_gauge, period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        if self.gpu.uuid == NO_GPU or self.period_s <= 0:
            return False
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(self.gpu.uuid)
        except Exception as e:  # noqa: BLE001 - telemetry is optional
            logger.info("moeperf: NVML telemetry off (%s)", e)
            return False
        self._thread = threading.Thread(target=self._run, name="moeperf-nvml", daemon=True)
        self._thread.start()
        return True

    def sample_once(self) -> None:
        nv, h = self._nvml, self._handle
        util = nv.nvmlDeviceGetUtilizationRates(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        self.set_gauge("moeperf_gpu_utilization_ratio", util.gpu / 100.0)
        self.set_gauge("moeperf_gpu_memory_used_bytes", float(mem.used))
        self.set_gauge("moeperf_gpu_memory_total_bytes", float(mem.total))
        self.set_gauge("moeperf_gpu_sm_clock_hertz", nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) * 1e6)
        self.set_gauge("moeperf_gpu_power_watts", nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
        self.set_gauge("moeperf_gpu_memory_clock_hertz", nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM) * 1e6)
        temperature_c = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        self.set_gauge("moeperf_gpu_temperature_celsius", float(temperature_c))
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = reasons or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        self.set_gauge("moeperf_gpu_throttle_reasons", float(reasons(h)))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as e:  # noqa: BLE001
                logger.warning("moeperf: NVML sampling stopped (%s)", e)
                return
            self._stop.wait(self.period_s)

    def stop(self) -> None:
        self._stop.set()
