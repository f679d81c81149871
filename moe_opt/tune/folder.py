"""What a folder for ``VLLM_TUNED_CONFIG_FOLDER`` must hold, checked before an engine is started.

vLLM looks a tuned file up by its exact name and silently falls back to its own tiles when it is missing, so a
misspelt or empty folder would turn a tuned arm into a second baseline; refusing it up front costs nothing.
Standard library only: the driver checks experiment files with it on a box without torch.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_GLOB = "E=*.json"
"""vLLM's tuned-config file names start with ``E=<experts>,N=<intermediate per rank>,device_name=...``."""


def config_files(folder: Path) -> list[Path]:
    """The tuned-config files in ``folder``, sorted (empty when it holds none or does not exist)."""
    return sorted(p for p in folder.glob(CONFIG_GLOB) if p.is_file()) if folder.is_dir() else []


def folder_problem(folder: str) -> str | None:
    """Why ``folder`` cannot serve vLLM tuned MoE configs, or None when it holds at least one ``E=...json``."""
    path = Path(folder)
    if not path.exists():
        return f"{folder} does not exist"
    if not path.is_dir():
        return f"{folder} is not a folder"
    if not config_files(path):
        return f"{folder} holds no vLLM tuned MoE config file ({CONFIG_GLOB}); write one with `moeperf tune`"
    return None
