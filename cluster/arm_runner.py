"""Everything one arm goes through: reserve, start, warm up, replay, stop, release.

Each step that can fail turns into a failed ArmResult with the reason and the engine's log tail;
nothing here raises past ``run`` except KeyboardInterrupt, so one arm's death never takes the other
arm's results with it. Records are appended to disk the moment they reach the driver.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from cluster.client_actor import ClientActor
from cluster.config import ArmSpec, ExperimentConfig
from cluster.engine import Device, EngineActor
from cluster.placement import PlacementError, arm_bundles, bundle_gpu_ids, release, reserve
from cluster.server_process import EngineStartError
from moe_opt.flags import cpu_effect_note
from workloads.client import ClientSettings
from workloads.metrics import summarize
from workloads.records import RequestRecord
from workloads.results import ArmResult, EngineInfo
from workloads.schedule import PlannedRequest

STOP_TIMEOUT_S = 60.0


def _reason(err: BaseException) -> tuple[str, str | None]:
    """A one-line reason and, when the engine produced one, its log tail."""
    cause = err.cause if isinstance(err, RayTaskError) and err.cause is not None else err
    if isinstance(cause, EngineStartError):
        return str(cause).split("\n--- engine log", 1)[0], cause.log_tail
    return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}", None


class ArmRunner:
    def __init__(
        self,
        cfg: ExperimentConfig,
        arm: ArmSpec,
        device: Device,
        run_dir: Path,
        requests: list[PlannedRequest],
        on_records: Callable[[str, int], None],
    ) -> None:
        self.cfg, self.arm, self.device, self.run_dir = cfg, arm, device, run_dir
        self.requests, self.on_records = requests, on_records
        self.records: list[RequestRecord] = []
        self.records_path = run_dir / "records" / f"{arm.name}.jsonl"
        self.pg: Any = None
        self.engine: Any = None
        self.client: Any = None
        self.info: EngineInfo | None = None
        self.failure: tuple[str, str | None] | None = None
        self.lock = threading.Lock()
        self.notes: list[str] = []
        self.flags_applied = device == "cuda"
        if device == "cpu" and (note := cpu_effect_note(arm.flags)):
            self.notes.append(note)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> bool:
        """Reserve and start the engine; False (with ``failure`` set) if the arm cannot run."""
        eng = self.cfg.engine
        try:
            self.pg = reserve(self.arm.name, arm_bundles(eng, self.device), eng.placement_timeout_s)
            gpu_ids = bundle_gpu_ids(self.pg, eng.tensor_parallel_size) if self.device == "cuda" else []
            actor_cls = ray.remote(EngineActor)
            self.engine = actor_cls.options(
                num_cpus=eng.cpus_per_engine,
                max_concurrency=2,  # stop() must be able to run while start() is still waiting
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=0),
                name=None,
            ).remote(self.arm.name, self.arm.flags, self.cfg.model, eng, self.device, gpu_ids)
            self.info = ray.get(self.engine.start.remote())
            ray.get(self.engine.warmup.remote(self.cfg.client.warmup_requests))
            # The engine binds loopback by default: the client must then share its node. It is
            # started (and its imports paid for) now, so it is ready before the common start time.
            self.client = (
                ray.remote(ClientActor)
                .options(
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(self.info.node_id, soft=False),
                )
                .remote()
            )
            ray.get(self.client.ready.remote())
            return True
        except PlacementError as e:
            self.failure = (str(e), None)
        except (RayError, EngineStartError) as e:
            self.failure = _reason(e)
        return False

    def replay(self, start_epoch_s: float) -> None:
        assert self.info is not None
        lo, hi = ray.get(self.engine.prompt_id_range.remote())
        settings = ClientSettings(
            base_url=self.info.url,
            model=self.cfg.model.served_name,
            arm=self.arm.name,
            vocab_lo=lo,
            vocab_hi=hi,
            seed=self.cfg.workload.seed,
            max_in_flight=self.cfg.client.max_in_flight,
            request_timeout_s=self.cfg.client.request_timeout_s,
        )
        kill_after = self.cfg.chaos.kill_engine_after_records.get(self.arm.name)
        payload = [r.model_dump() for r in self.requests]
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            gen = self.client.replay.options(num_returns="streaming").remote(payload, settings, start_epoch_s)
            with self.records_path.open("a") as out:
                for ref in gen:
                    batch = [RequestRecord.model_validate(d) for d in ray.get(ref)]
                    for rec in batch:
                        out.write(rec.model_dump_json() + "\n")
                    out.flush()
                    with self.lock:
                        self.records.extend(batch)
                    self.on_records(self.arm.name, len(batch))
                    if kill_after is not None and len(self.records) >= kill_after:
                        ray.get(self.engine.kill_server.remote())
                        kill_after = None
        except RayActorError as e:
            self.failure = (f"client actor died: {e}", None)
        code = ray.get(self.engine.poll.remote())
        if code is not None:
            tail = ray.get(self.engine.log_tail.remote())
            self.failure = (f"engine died during the replay (exit code {code})", tail)

    def stop(self) -> None:
        """Idempotent; safe after any failure and from a Ctrl-C handler."""
        if self.engine is not None:
            try:
                code, tail = ray.get(self.engine.stop.remote(), timeout=STOP_TIMEOUT_S)
                if self.failure is not None and self.failure[1] is None:
                    self.failure = (self.failure[0], tail)
            except (RayError, GetTimeoutError):
                pass
            ray.kill(self.engine)
            self.engine = None
        if self.client is not None:
            ray.kill(self.client)
            self.client = None
        release(self.pg)
        self.pg = None

    # --- result --------------------------------------------------------------------------------
    def result(self, interrupted: bool = False) -> ArmResult:
        with self.lock:
            records = sorted(self.records, key=lambda r: r.index)
        sent = sum(1 for r in records if r.actual_send_s is not None)
        ok = sum(1 for r in records if r.ok)
        failure = self.failure or (("interrupted", None) if interrupted else None)
        return ArmResult(
            name=self.arm.name,
            flags=self.arm.flags,
            flags_applied=self.flags_applied,
            notes=self.notes,
            status="failed" if failure else "ok",
            failure_reason=failure[0] if failure else None,
            engine=self.info,
            engine_log_tail=failure[1] if failure else None,
            requests_planned=len(self.requests),
            requests_sent=sent,
            requests_succeeded=ok,
            requests_failed=sent - ok,
            requests_not_sent=len(self.requests) - sent,
            summary=summarize(records) if records else None,
            records_file=str(self.records_path.relative_to(self.run_dir)),
            records=records,
        )
