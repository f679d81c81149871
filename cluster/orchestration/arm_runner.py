"""Everything one arm goes through: reserve, start, warm up, replay (per round), stop, release.

Each step that can fail turns into a failed ArmResult with the reason and the engine's log tail;
nothing here raises past its callers except KeyboardInterrupt, so one arm's death never takes the
other arm's results with it. Records are appended to disk the moment they reach the driver.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from cluster.engine.actor import Device, EngineActor
from cluster.engine.counters import COMPILES, compiles_in_window, parse_samples, window_delta
from cluster.engine.server import EngineStartError
from cluster.orchestration.client_actor import ClientActor
from cluster.placement.clients import ClientPlacementError, client_nodes
from cluster.placement.groups import PlacementError, arm_bundles, bundle_gpu_ids, release, reserve
from experiment.config import ArmSpec, EngineSpec, ExperimentConfig
from moe_opt.flags import cpu_effect_note
from result_format.run_result import ArmResult, EngineInfo, ShardResult
from workloads.client import ClientSettings
from workloads.health import ClientHealth, client_bound
from workloads.metrics import summarize
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest, shard

STOP_TIMEOUT_S = 60.0


def _reason(err: BaseException) -> tuple[str, str | None]:
    """A one-line reason and, when the engine produced one, its log tail."""
    cause = err.cause if isinstance(err, RayTaskError) and err.cause is not None else err
    if isinstance(cause, EngineStartError):
        return str(cause).split("\n--- engine log", 1)[0], cause.log_tail
    text = str(cause)
    return f"{type(cause).__name__}: {text.splitlines()[0] if text else ''}", None


class ArmRunner:
    def __init__(
        self,
        cfg: ExperimentConfig,
        arm: ArmSpec,
        device: Device,
        run_dir: Path,
        requests: list[PlannedRequest],
        on_records: Callable[[str, int], None],
        observe: Callable[[RequestRecord, str], None] | None = None,
    ) -> None:
        self.cfg, self.arm, self.device, self.run_dir = cfg, arm, device, run_dir
        self.run_id = run_dir.name
        self.flags = cfg.arm_flags(arm)
        self.requests, self.on_records = requests, on_records
        self.observe = observe  # per finished record, with the Ray node id of the client actor that sent it
        self.records: list[RequestRecord] = []
        self.shards: list[ShardResult] = []
        self.client_health: list[ClientHealth] = []
        self.rounds_done = 0
        self.records_path = run_dir / "records" / f"{arm.name}.jsonl"
        self.pg: Any = None
        self.engine: Any = None
        self.clients: list[Any] = []
        self.client_nodes: list[str] = []
        self.window_metrics: dict[str, float] = {}
        self.metrics_seen = False
        self._all_series: set[str] = set()
        self.info: EngineInfo | None = None
        self.failure: tuple[str, str | None] | None = None
        self.lock = threading.Lock()
        self.notes: list[str] = []
        sim = cfg.simulate.cpu_engine_on_simulated_gpus
        self.engine_device: Device = "cpu" if sim else device
        self.flags_applied = self.engine_device == "cuda"
        if sim:
            self.notes.append(
                f"simulated GPUs: placed with TP={cfg.engine.tensor_parallel_size} GPU bundles, served by vLLM's "
                f"CPU build at TP={cfg.simulate.engine_tensor_parallel_size}"
            )
        if self.engine_device == "cpu" and (note := cpu_effect_note(self.flags)):
            self.notes.append(note)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def _engine_spec(self) -> EngineSpec:
        update: dict[str, object] = {}
        if (eager := self.cfg.arm_enforce_eager(self.arm)) != self.cfg.engine.enforce_eager:
            update["enforce_eager"] = eager
        if self.cfg.simulate.cpu_engine_on_simulated_gpus:
            update["tensor_parallel_size"] = self.cfg.simulate.engine_tensor_parallel_size
        return self.cfg.engine.model_copy(update=update) if update else self.cfg.engine

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> bool:
        """Reserve and start the engine and its clients; False (with ``failure`` set) if it cannot run."""
        eng = self.cfg.engine
        try:
            self.pg = reserve(self.arm.name, arm_bundles(eng, self.device), eng.placement_timeout_s)
            gpu_ids = bundle_gpu_ids(self.pg, eng.tensor_parallel_size) if self.device == "cuda" else []
            self.engine = (
                ray.remote(EngineActor)
                .options(
                    num_cpus=eng.cpus_per_engine,
                    max_concurrency=2,  # stop() must be able to run while start() is still waiting
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=0),
                )
                .remote(
                    self.run_id,
                    self.arm.name,
                    self.flags,
                    self.cfg.model,
                    self._engine_spec(),
                    self.engine_device,
                    gpu_ids,
                )
            )
            self.info = ray.get(self.engine.start.remote())
            ray.get(self.engine.warmup.remote(self.cfg.client.warmup_requests))
            self._start_clients()
            return True
        except (PlacementError, ClientPlacementError) as e:
            self.failure = (str(e), None)
        except (RayError, EngineStartError) as e:
            self.failure = _reason(e)
        return False

    def _start_clients(self) -> None:
        """Started (and their imports paid for) now, so they are ready before the common start."""
        assert self.info is not None
        c = self.cfg.client
        nodes = client_nodes(c.placement, self.info.node_id, c.actors_per_arm, self.cfg.engine.host)
        self.clients = [
            ray.remote(ClientActor)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
            .remote()
            for node in nodes
        ]
        self.client_nodes = nodes
        ray.get([cl.ready.remote() for cl in self.clients])

    def between_rounds(self) -> bool:
        """Fresh prefix cache and a health check, so round N+1 does not profit from round N."""
        try:
            ray.get(self.engine.reset_for_next_round.remote())
            return True
        except RayError as e:
            self.failure = _reason(e)
            return False

    def replay(self, round_index: int, start_epoch_s: float) -> None:
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
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        n = len(self.clients)
        cap = self.cfg.client.max_in_flight
        per_client_cap = None if cap is None else max(1, -(-cap // n))  # the cap is per arm, split over clients
        chaos = self.cfg.chaos if round_index == 0 else None
        kill_engine_after = chaos.kill_engine_after_records.get(self.arm.name) if chaos else None
        kill_client_after = chaos.kill_client_after_records.get(self.arm.name) if chaos else None
        received_this_round = [0]
        out = self.records_path.open("a")
        before = parse_samples(ray.get(self.engine.metrics_text.remote()))

        def consume(i: int) -> None:
            nonlocal kill_engine_after, kill_client_after
            part = shard(self.requests, n, i)
            result = ShardResult(
                round=round_index,
                client=i,
                node_id=self.client_nodes[i],
                start_epoch_s=start_epoch_s,
                planned=len(part),
                received=0,
                status="ok",
            )
            gen = (
                self.clients[i]
                .replay.options(num_returns="streaming")
                .remote(
                    [r.model_dump() for r in part],
                    dataclasses.replace(settings, client=i, round=round_index, max_in_flight=per_client_cap),
                    start_epoch_s,
                )
            )
            try:
                for ref in gen:
                    batch = [RequestRecord.model_validate(d) for d in ray.get(ref)]
                    with self.lock:
                        for rec in batch:
                            rec.round, rec.client = round_index, i
                            out.write(rec.model_dump_json() + "\n")
                        out.flush()
                        self.records.extend(batch)
                        result.received += len(batch)
                        received_this_round[0] += len(batch)
                        seen = received_this_round[0]
                        kill_engine = kill_engine_after is not None and seen >= kill_engine_after
                        kill_client = kill_client_after is not None and seen >= kill_client_after
                        if kill_engine:
                            kill_engine_after = None
                        if kill_client:
                            kill_client_after = None
                    if self.observe is not None:
                        for rec in batch:
                            self.observe(rec, self.client_nodes[i])
                    self.on_records(self.arm.name, len(batch))
                    if kill_engine:
                        ray.get(self.engine.kill_server.remote())
                    if kill_client:
                        ray.kill(self.clients[0])
            except RayActorError as e:
                result.status = "lost"
                result.error = f"client actor died: {str(e).splitlines()[0]}"
            except Exception as e:  # a bug in the client must fail the arm loudly, not vanish with the thread
                result.status = "lost"
                result.error = f"client failed: {_reason(e)[0]}"
            health = None
            if result.status == "ok":
                try:
                    h = ray.get(self.clients[i].health.remote(), timeout=30)
                    health = ClientHealth.model_validate({**h, "node_id": self.client_nodes[i]}) if h else None
                except RayError:
                    health = None
            with self.lock:
                self.shards.append(result)
                if health is not None:
                    self.client_health.append(health)

        threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)  # short joins keep Ctrl-C deliverable to the main thread
        out.close()
        self.rounds_done += 1
        after = parse_samples(ray.get(self.engine.metrics_text.remote()))
        self._all_series.update(after)
        if after:
            for k, v in window_delta(before, after).items():
                self.window_metrics[k] = self.window_metrics.get(k, 0.0) + v
            self.metrics_seen = True
        lost = [s for s in self.shards if s.round == round_index and s.status == "lost"]
        if lost:
            missing = sum(s.planned - s.received for s in lost)
            self.failure = (
                f"round {round_index}: client actor(s) {[s.client for s in lost]} lost; "
                f"{missing} request(s) of their shards have no record ({lost[0].error})",
                None,
            )
        code = ray.get(self.engine.poll.remote())
        if code is not None:
            tail = ray.get(self.engine.log_tail.remote())
            self.failure = (f"engine died during the replay (exit code {code}, round {round_index})", tail)

    def stop(self) -> None:
        """Idempotent; safe after any failure and from a Ctrl-C handler."""
        if self.engine is not None:
            try:
                _, tail = ray.get(self.engine.stop.remote(), timeout=STOP_TIMEOUT_S)
                if self.failure is not None and self.failure[1] is None and "client actor" not in self.failure[0]:
                    self.failure = (self.failure[0], tail)
            except (RayError, GetTimeoutError):
                pass
            ray.kill(self.engine)
            self.engine = None
        for cl in self.clients:
            ray.kill(cl)
        self.clients = []
        release(self.pg)
        self.pg = None

    def _compiles(self) -> int | None:
        """None when the engine exports no compile counter (no plugin), rather than a misleading 0."""
        if not self.metrics_seen or not any(k.startswith(COMPILES) for k in self._all_series):
            return None
        return compiles_in_window(self.window_metrics)

    # --- result --------------------------------------------------------------------------------
    def result(self, interrupted: bool = False) -> ArmResult:
        with self.lock:
            records = sorted(self.records, key=lambda r: (r.round, r.index))
            shards = sorted(self.shards, key=lambda s: (s.round, s.client))
        sent = sum(1 for r in records if r.actual_send_s is not None)
        ok = sum(1 for r in records if r.ok)
        planned = len(self.requests) * max(1, self.cfg.rounds)
        failure = self.failure or (("interrupted", None) if interrupted else None)
        return ArmResult(
            name=self.arm.name,
            control_of=self.arm.control_of,
            flags=self.flags,
            flags_applied=self.flags_applied,
            notes=self.notes,
            status="failed" if failure else "ok",
            failure_reason=failure[0] if failure else None,
            engine=self.info,
            engine_log_tail=failure[1] if failure else None,
            requests_planned=planned,
            requests_sent=sent,
            requests_succeeded=ok,
            requests_failed=sent - ok,
            requests_not_sent=planned - sent,
            summary=summarize(records) if records else None,
            rounds=self.rounds_done,
            shards=shards,
            client_health=list(self.client_health),
            client_bound=client_bound(records, self.cfg.client.max_dispatch_lag_p99_ms) if records else None,
            window_metrics=dict(sorted(self.window_metrics.items())),
            triton_compiles_in_window=self._compiles(),
            records_file=str(self.records_path.relative_to(self.run_dir)),
            records=records,
        )
