"""What every command does before it starts anything: read the experiment, apply overrides, own SIGTERM.

Shared by ``moeperf run``/``plan``/``validate`` and ``moeperf nightly`` so neither command module
imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster.cli.from_model import apply_overrides
from experiment.config import ExperimentConfig, parse_experiment, read_yaml

EXIT_OK, EXIT_ARM_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def load_experiment(path: str | None, overrides: dict[str, Any]) -> tuple[ExperimentConfig, Path | None]:
    """The validated config and the folder relative paths in it are read from (None: embedded default)."""
    data: dict[str, Any] = read_yaml(Path(path)) if path else {}
    source = path or "<embedded default>"
    cfg = parse_experiment(apply_overrides(data, overrides), source)
    return cfg, (Path(path).resolve().parent if path else None)


def sigterm_as_interrupt() -> None:
    """`timeout`, CI runners and `ray job stop` send SIGTERM: clean up exactly as on Ctrl-C."""
    import signal

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
