"""The harness's own test machinery, kept out of the production path: chaos kills and simulated GPUs.

The fault tests need an engine SIGKILLed or a client actor killed mid-replay, a client whose
dispatcher raises, a driver that raises between turns, and the simulated cluster test needs a CPU
engine inside GPU placement groups. None of that belongs in the code a real run reads, so the arm
runner asks one seam, ``hooks_for``, once per arm, the driver asks ``run_hooks_for`` once per run,
and otherwise both call only the hooks' methods. With ``chaos`` and ``simulate`` left at their
defaults and ``MOEPERF_TEST_FAULTS`` unset (every real experiment), the hooks change nothing: the
same device, the same engine spec, no notes, and fault objects whose methods return at once.

``MOEPERF_TEST_FAULTS`` (JSON, ``InjectedFaults``) carries the faults the experiment file has no
field for: ``chaos`` (experiment/config.py) is their natural home, and once it has them this
module reads them from there instead, with nothing else changing.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from pydantic import Field, ValidationError

from cluster.engine.actor import Device
from common.strict import StrictModel
from experiment.config import ExperimentConfig, SimulationSpec

logger = logging.getLogger(__name__)

TEST_FAULTS_ENV = "MOEPERF_TEST_FAULTS"


class FaultSpecError(ValueError):
    """``MOEPERF_TEST_FAULTS`` is not a valid ``InjectedFaults``; the message names the key."""


class InjectedDriverFault(RuntimeError):
    """Raised by the driver between turns on purpose (``driver_error_after_turns``): tests only."""


class InjectedFaults(StrictModel):
    """Faults for the harness's own tests that the experiment file has no field for (yet), as JSON in
    ``MOEPERF_TEST_FAULTS``: they reach a driver started in a subprocess, as the CLI tests start it."""

    fail_dispatch_after_records: dict[str, int] = Field(
        default_factory=dict,
        description="arm name -> that arm's client dispatcher raises once this many of a shard's records are "
        "finished (first round only), as a bug in the client would.",
    )
    driver_error_after_turns: int | None = Field(
        None, ge=1, description="The driver raises after this many turns (warm-up and measured) have run."
    )


def injected_faults(environ: Mapping[str, str] | None = None) -> InjectedFaults:
    """The faults ``MOEPERF_TEST_FAULTS`` asks for; none when it is unset or empty."""
    raw = (os.environ if environ is None else environ).get(TEST_FAULTS_ENV, "")
    if not raw.strip():
        return InjectedFaults()
    try:
        return InjectedFaults.model_validate_json(raw)
    except ValidationError as e:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in e.errors()
        )
        raise FaultSpecError(f"{TEST_FAULTS_ENV}: {where}") from None


class RoundFaults:
    """The chaos of one round of one arm: each kill fires once, when enough records are in.

    Called from every client's consumer thread after a batch is on disk, with the round's
    record count; the check is two integer comparisons under a lock, the kill runs outside it.
    """

    def __init__(
        self,
        engine: Any,
        clients: list[Any],
        kill_engine_after: int | None,
        kill_client_after: int | None,
        stop_engine_after: int | None = None,
        records_unwritable_after: int | None = None,
    ) -> None:
        self._engine, self._clients = engine, clients
        self._kill_engine_after, self._kill_client_after = kill_engine_after, kill_client_after
        self._stop_engine_after, self._unwritable_after = stop_engine_after, records_unwritable_after
        self._lock = threading.Lock()

    def before_write(self, on_disk: int) -> None:
        """Called before a batch of records is written, with how many are on disk: the injected full disk."""
        if self._unwritable_after is not None and on_disk >= self._unwritable_after:
            raise OSError(errno.ENOSPC, "No space left on device (chaos: records_unwritable_after_records)")

    def records_received(self, received: int) -> None:
        with self._lock:
            kill_engine = self._kill_engine_after is not None and received >= self._kill_engine_after
            kill_client = self._kill_client_after is not None and received >= self._kill_client_after
            stop_engine = self._stop_engine_after is not None and received >= self._stop_engine_after
            if kill_engine:
                self._kill_engine_after = None
            if kill_client:
                self._kill_client_after = None
            if stop_engine:
                self._stop_engine_after = None
        if stop_engine:
            logger.debug("chaos: freezing (SIGSTOP) the engine's vLLM server after %d records", received)
            ray.get(self._engine.freeze_server.remote())
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

    def before_write(self, on_disk: int) -> None:
        return None


NO_FAULTS = NoFaults()


@dataclass(frozen=True)
class ArmHooks:
    """Everything test-only that may make one arm behave differently from a real run."""

    kill_engine_after_records: int | None = None
    kill_client_after_records: int | None = None
    stop_engine_after_records: int | None = None
    records_unwritable_after_records: int | None = None
    fail_dispatch_after_records: int | None = None  # ClientSettings.fail_dispatch_after_records, first round
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
        chaos = (
            self.kill_engine_after_records,
            self.kill_client_after_records,
            self.stop_engine_after_records,
            self.records_unwritable_after_records,
        )
        if round_index != 0 or all(c is None for c in chaos):
            return NO_FAULTS
        return RoundFaults(engine, clients, *chaos)

    def client_fault(self, round_index: int) -> int | None:
        """The dispatcher fault of this round's clients: like chaos, in the first round only."""
        return self.fail_dispatch_after_records if round_index == 0 else None


def hooks_for(cfg: ExperimentConfig, arm_name: str, warmup: bool = False) -> ArmHooks:
    """The seam: the one place the experiment's ``chaos`` and ``simulate`` sections are read.

    ``warmup``: hooks of a warm-up engine, which no chaos strikes (the faults name measured arms);
    it is placed and started like the arms, simulated GPUs included.
    """
    faults = InjectedFaults() if warmup else injected_faults()
    chaos = cfg.chaos
    return ArmHooks(
        kill_engine_after_records=None if warmup else chaos.kill_engine_after_records.get(arm_name),
        kill_client_after_records=None if warmup else chaos.kill_client_after_records.get(arm_name),
        stop_engine_after_records=None if warmup else chaos.stop_engine_after_records.get(arm_name),
        records_unwritable_after_records=None if warmup else chaos.records_unwritable_after_records.get(arm_name),
        fail_dispatch_after_records=faults.fail_dispatch_after_records.get(arm_name),
        simulate=cfg.simulate,
        engine_tensor_parallel_size=cfg.engine.tensor_parallel_size,
    )


@dataclass(frozen=True)
class RunHooks:
    """Everything test-only that may make the driver itself behave differently from a real run."""

    driver_error_after_turns: int | None = None

    def after_turn(self, turns_done: int) -> None:
        """Called by the driver after each turn; raises the injected fault once ``turns_done`` reaches it."""
        if self.driver_error_after_turns is not None and turns_done == self.driver_error_after_turns:
            raise InjectedDriverFault(f"injected driver fault after {turns_done} turn(s)")


def run_hooks_for(cfg: ExperimentConfig) -> RunHooks:
    """The driver's seam; raises ``FaultSpecError`` for a malformed ``MOEPERF_TEST_FAULTS``."""
    faults = injected_faults()
    unknown = sorted(set(faults.fail_dispatch_after_records) - {a.name for a in cfg.arms})
    if unknown:
        raise FaultSpecError(f"{TEST_FAULTS_ENV}: fail_dispatch_after_records: unknown arm(s) {unknown}")
    return RunHooks(driver_error_after_turns=faults.driver_error_after_turns)
