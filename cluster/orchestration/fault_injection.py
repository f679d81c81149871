"""The harness's own test machinery, kept out of the production path: chaos kills and simulated GPUs.

The fault tests need an engine SIGKILLed or a client actor killed mid-replay, and the simulated
cluster test needs a CPU engine inside GPU placement groups. None of that belongs in the code a
real run reads, so the arm runner asks one seam, ``hooks_for``, once per arm, and otherwise
calls only the hooks' methods. With ``chaos`` and ``simulate`` left at their defaults (every
real experiment), the hooks change nothing: the same device, the same engine spec, no notes,
and a per-round fault object whose one method returns at once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import ray

from cluster.engine.actor import Device
from experiment.config import ExperimentConfig, SimulationSpec

logger = logging.getLogger(__name__)


class RoundFaults:
    """The chaos of one round of one arm: each kill fires once, when enough records are in.

    Called from every client's consumer thread after a batch is on disk, with the round's
    record count; the check is two integer comparisons under a lock, the kill runs outside it.
    """

    def __init__(
        self, engine: Any, clients: list[Any], kill_engine_after: int | None, kill_client_after: int | None
    ) -> None:
        self._engine, self._clients = engine, clients
        self._kill_engine_after, self._kill_client_after = kill_engine_after, kill_client_after
        self._lock = threading.Lock()

    def records_received(self, received: int) -> None:
        with self._lock:
            kill_engine = self._kill_engine_after is not None and received >= self._kill_engine_after
            kill_client = self._kill_client_after is not None and received >= self._kill_client_after
            if kill_engine:
                self._kill_engine_after = None
            if kill_client:
                self._kill_client_after = None
        if kill_engine:
            logger.debug("chaos: killing the engine's vLLM server after %d records", received)
            ray.get(self._engine.kill_server.remote())
        if kill_client:
            logger.debug("chaos: killing client actor 0 after %d records", received)
            ray.kill(self._clients[0])


class NoFaults(RoundFaults):
    """What every real run gets: nothing to check, nothing to kill."""

    def __init__(self) -> None:
        super().__init__(None, [], None, None)

    def records_received(self, received: int) -> None:
        return None


NO_FAULTS = NoFaults()


@dataclass(frozen=True)
class ArmHooks:
    """Everything test-only that may make one arm behave differently from a real run."""

    kill_engine_after_records: int | None = None
    kill_client_after_records: int | None = None
    simulate: SimulationSpec = field(default_factory=SimulationSpec)
    engine_tensor_parallel_size: int = 1  # what the experiment places (the simulated GPUs' TP)

    @property
    def simulated_gpus(self) -> bool:
        return self.simulate.cpu_engine_on_simulated_gpus

    def engine_device(self, device: Device) -> Device:
        """The device the engine is started on: the CPU build inside simulated GPU bundles."""
        return "cpu" if self.simulated_gpus else device

    def engine_spec_update(self) -> dict[str, object]:
        """Fields of the engine spec the test setting replaces (the CPU engine's own TP)."""
        return {"tensor_parallel_size": self.simulate.engine_tensor_parallel_size} if self.simulated_gpus else {}

    def notes(self) -> list[str]:
        if not self.simulated_gpus:
            return []
        return [
            f"simulated GPUs: placed with TP={self.engine_tensor_parallel_size} GPU bundles, served by vLLM's "
            f"CPU build at TP={self.simulate.engine_tensor_parallel_size}"
        ]

    def round_faults(self, round_index: int, engine: Any, clients: list[Any]) -> RoundFaults:
        """Chaos strikes in the first round only, so a later round measures a healthy arm."""
        if round_index != 0 or (self.kill_engine_after_records is None and self.kill_client_after_records is None):
            return NO_FAULTS
        return RoundFaults(engine, clients, self.kill_engine_after_records, self.kill_client_after_records)


def hooks_for(cfg: ExperimentConfig, arm_name: str) -> ArmHooks:
    """The seam: the one place the experiment's ``chaos`` and ``simulate`` sections are read."""
    return ArmHooks(
        kill_engine_after_records=cfg.chaos.kill_engine_after_records.get(arm_name),
        kill_client_after_records=cfg.chaos.kill_client_after_records.get(arm_name),
        simulate=cfg.simulate,
        engine_tensor_parallel_size=cfg.engine.tensor_parallel_size,
    )
