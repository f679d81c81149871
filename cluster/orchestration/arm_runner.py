"""Everything one arm goes through: reserve, start, warm up, replay (per round), stop, release.

Each step that can fail turns into a failed ArmResult with the reason and the engine's log tail;
nothing here raises past its callers except KeyboardInterrupt, so one arm's death never takes the
other arm's results with it: a dead EngineActor or ClientActor (``RayActorError``) is "engine actor
died: ..." / "client actor died: ...", any other Ray error or bug is the arm's reason too. Every wait
on a client actor is bounded by the replay's deadline, so a stuck client fails its arm instead of
hanging the run. Records are appended to disk the moment they reach the driver.

The same runner also drives the warm-up pass of ``engine.cache_state: shared_warm`` (see the driver):
under its own ``name`` (``warmup-<setting>``), with its own records file, through the same start and
replay steps, so warm-up and measured engines cannot differ in how they are started or loaded.
Test-only behaviour (chaos kills, simulated GPUs) comes in through ``fault_injection.hooks_for``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from cluster.engine.actor import Device, EngineActor
from cluster.engine.counters import (
    COMPILES,
    Scrape,
    compiles_in_window,
    parse_samples,
    settled_scrape,
    step_time_series,
    window_delta,
)
from cluster.engine.observed import (
    expert_load_in_window,
    flag_mismatch,
    flags_applied,
    observe_engine,
    without_expert_series,
)
from cluster.engine.server import EngineStartError
from cluster.orchestration.arm_records import ArmRecords, RecordsOutcome
from cluster.orchestration.client_actor import ClientActor
from cluster.orchestration.fault_injection import ArmHooks, RoundFaults, hooks_for
from cluster.orchestration.threads import run_in_threads
from cluster.placement.clients import ClientPlacementError, client_nodes
from cluster.placement.groups import PlacementError, arm_bundles, bundle_gpu_ids, release, reserve
from experiment.config import ArmSpec, EngineSpec, ExperimentConfig
from moe_opt.flags import cpu_effect_note
from result_format.run_result import (
    INTERRUPTED,
    ArmResult,
    CompileEventRecord,
    EngineInfo,
    LevelResult,
    ObservedEngine,
    ShardResult,
)
from workloads.client import DEADLINE_MARGIN_S, ClientSettings, ReplayError, replay_deadline_s
from workloads.health import ClientHealth
from workloads.metrics import summarize_level
from workloads.record_columns import RecordColumns
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import ScheduleColumns, as_columns
from workloads.sweep import LevelPlan, level_prompt_seed

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 60.0
HEALTH_TIMEOUT_S = 30.0
CLIENT_GRACE_S = 60.0
HUNG_AFTER_S = 10.0  # an engine alive after a round that does not answer /health within this is hung
"""The driver waits this long past a replay's own deadline before it gives up on the client actor: the
client cancels itself at the deadline and says so; only a client that cannot (stuck, partitioned) is cut off."""
START_DELAY_S = 1.0
"""Lead between deciding a replay's common start and the start itself: every client has its schedule by then."""
DRAIN_POLL_S = 0.2
"""How often the engine's queue gauges are read while waiting for it to drain between sweep levels."""
SETTLE_TIMEOUT_S = 10.0  # longest wait for the plugin to publish the routing of the steps served (~1 s busy)
SETTLE_POLL_S = 0.05
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
JIT_CACHE_DIR = "jit-cache"
"""The run's shared JIT cache, ``<run_dir>/jit-cache``, with ``engine.cache_state`` shared_warm or seeded."""

OnRecords = Callable[[str, int, int], None]
"""(arm, records that arrived, how many of them failed or were never sent): progress reporting."""


def _reason(err: BaseException) -> tuple[str, str | None]:
    """A one-line reason and, when the engine produced one, its log tail."""
    cause = err.cause if isinstance(err, RayTaskError) and err.cause is not None else err
    if isinstance(cause, EngineStartError):
        return str(cause).split("\n--- engine log", 1)[0], cause.log_tail
    if isinstance(cause, ReplayError):
        return str(cause), None
    text = str(cause)
    return f"{type(cause).__name__}: {text.splitlines()[0] if text else ''}", None


def _actor_died(err: RayActorError) -> str:
    """The part of a RayActorError worth a reason: for an actor whose constructor raised, that exception
    (the last line of the traceback Ray quotes); else Ray's first line and, when Ray knows it, why it died."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    if not lines:
        return type(err).__name__
    if "creation task" in lines[0] and len(lines) > 1:
        return f"its constructor raised {lines[-1]}"
    why = next((ln for ln in lines[1:] if ln.startswith("The actor is dead because")), None)
    return f"{lines[0]} {why}" if why else lines[0]


def _failure(who: str, err: BaseException) -> tuple[str, str | None]:
    """Why an arm failed, from an error raised while talking to its ``who`` ('engine' or 'client') actor."""
    if isinstance(err, RayActorError):
        return f"{who} actor died: {_actor_died(err)}", None
    return _reason(err)


def _kill(actor: Any) -> None:
    """Kill an actor that may be dead already, or whose Ray is gone: stopping must not raise."""
    try:
        ray.kill(actor)
    except Exception as e:
        logger.debug("could not kill actor %s: %s", actor, e)


class _RecordsUnwritable(RuntimeError):
    """The arm's records file stopped taking writes; the message says which file and after how many records."""


class _ClientSilent(Exception):
    """A client actor that gave no record and no end past its replay's deadline (and the grace)."""


@dataclasses.dataclass
class _Round:
    """What the consumer threads of one round (one per client actor) share."""

    index: int
    start_epoch_s: float
    settings: ClientSettings  # of the arm; each client stamps its own index and deadline on a copy
    level: LevelPlan  # what this replay sends: one sweep level, or the whole workload
    faults: RoundFaults
    received: int = 0  # records of this round that reached the driver, over all clients


class ArmRunner:
    def __init__(
        self,
        cfg: ExperimentConfig,
        arm: ArmSpec,
        device: Device,
        run_dir: Path,
        requests: ScheduleColumns | Sequence[PlannedRequest],
        on_records: OnRecords,
        observe: Callable[[RequestRecord, str], None] | None = None,
        hooks: ArmHooks | None = None,
        name: str | None = None,
        levels: list[LevelPlan] | None = None,
        on_level: Callable[[str, LevelPlan], None] | None = None,
        api_key: str | None = None,
    ) -> None:
        self.api_key = api_key  # the run's (cluster.engine.api_key): to the engine at its start, to every request
        self.cfg, self.arm, self.device, self.run_dir = cfg, arm, device, run_dir
        # What this runner's engine, placement group, records and progress are called: the arm's name, or for
        # a warm-up pass ``warmup-<setting>``, so its records and metrics never mix with a measured arm's.
        self.name = name if name is not None else arm.name
        self.run_id = run_dir.name
        self.flags = cfg.arm_flags(arm)
        # A round replays each level in turn (sweep order, reversed on odd rounds); without a sweep, one level
        # holding the whole workload. ``planned_per_round``: the requests of one round, over all levels.
        if levels is None:
            levels = [LevelPlan(index=None, label="all", requests=as_columns(requests))]
        self.levels = levels
        self.planned_per_round = sum(len(lv.requests) for lv in self.levels)
        self.on_records = on_records
        self.on_level = on_level  # as each level of a round starts: the live metrics show the current level
        self.observe = observe  # per finished record, with the Ray node id of the client actor that sent it
        self.hooks = hooks if hooks is not None else hooks_for(cfg, self.name)
        self.records = ArmRecords(run_dir / "records", self.name)  # journal, counts; sealed into Parquet
        self.shards: list[ShardResult] = []
        self.client_health: list[ClientHealth] = []
        self.rounds_done = 0
        self.records_path = self.records.path
        # Every engine of a shared_warm or seeded run gets the same cache; cold_per_arm / as_found: the actor decides.
        self.jit_cache_dir = str(run_dir / JIT_CACHE_DIR) if cfg.engine.shares_run_cache else None
        self.pg: Any = None
        self.engine: Any = None
        self.clients: list[Any] = []
        self.client_nodes: list[str] = []
        self.window_metrics: dict[str, float] = {}
        self.window_metrics_by_round: dict[int, dict[str, float]] = {}  # step-time series only (step_time_series)
        self.metrics_seen = False
        self._all_series: set[str] = set()
        self._last_samples: dict[str, float] = {}
        self._round_before: dict[str, float] | None = None  # open_round's read, for the round's window
        # How long past the schedule's worst case a replay may run, and the driver then waits for a client that
        # did not end itself (instance attributes, so a test can make a deadline pass in seconds).
        self.deadline_margin_s, self.client_grace_s = DEADLINE_MARGIN_S, CLIENT_GRACE_S
        self.info: EngineInfo | None = None
        self.failure: tuple[str, str | None] | None = None
        self.lock = threading.Lock()
        self.engine_device: Device = self.hooks.engine_device(device)
        self.flags_applied = False  # until the engine's workers report they applied them (_flags_as_requested)
        self.observed: ObservedEngine | None = None
        self.compile_events: list[CompileEventRecord] = []  # every round's, in the order collected
        self.notes: list[str] = self.hooks.notes()
        if self.engine_device == "cpu" and (note := cpu_effect_note(self.flags)):
            self.notes.append(note)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def _engine_spec(self) -> EngineSpec:
        update: dict[str, object] = {}
        if (eager := self.cfg.arm_enforce_eager(self.arm)) != self.cfg.engine.enforce_eager:
            update["enforce_eager"] = eager
        if (env := self.cfg.arm_engine_env(self.arm)) != self.cfg.engine.env:
            update["env"] = env
        update.update(self.hooks.engine_spec_update())
        return self.cfg.engine.model_copy(update=update) if update else self.cfg.engine

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> bool:
        """Reserve and start the engine and its clients; False (with ``failure`` set) if it cannot run."""
        eng = self.cfg.engine
        who = "engine"
        try:
            self.pg = reserve(self.name, arm_bundles(eng, self.device), eng.placement_timeout_s)
            gpu_ids = bundle_gpu_ids(self.pg, eng.tensor_parallel_size) if self.device == "cuda" else []
            logger.debug("arm %s: placement group reserved (GPU ids %s)", self.name, gpu_ids or "none")
            self.engine = (
                ray.remote(EngineActor)
                .options(
                    num_cpus=eng.cpus_per_engine,
                    max_concurrency=2,  # stop() must be able to run while start() is still waiting
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=0),
                )
                .remote(
                    self.run_id,
                    self.name,
                    self.flags,
                    self.cfg.model,
                    self._engine_spec(),
                    self.engine_device,
                    gpu_ids,
                    jit_cache_dir=self.jit_cache_dir,
                    api_key=self.api_key,
                )
            )
            self.info = ray.get(self.engine.start.remote())
            if not self._flags_as_requested():
                return False
            ray.get(self.engine.warmup.remote(self.cfg.client.warmup_requests))
            who = "client"
            self._start_clients()
            return True
        except (PlacementError, ClientPlacementError) as e:
            self.failure = (str(e), None)
        except (RayError, EngineStartError) as e:
            self.failure = _failure(who, e)
        except Exception as e:  # a bug here fails this arm, loudly, and the run goes on
            logger.exception("arm %s: start failed", self.name)
            self.failure = (f"start failed: {_reason(e)[0]}", None)
        return False

    def _flags_as_requested(self) -> bool:
        """What the engine's workers report they ran must be what the arm asked for: an arm whose plugin did
        not load, or applied other flags, would otherwise be measured as if its optimizations were on."""
        self.observed = ray.get(self.engine.observe.remote())
        why = flag_mismatch(self.flags, self.observed, self.engine_device)
        if why is not None:
            self.failure = (
                f"observed flags differ from the requested ones: {why}",
                ray.get(self.engine.log_tail.remote()),
            )
            return False
        self.flags_applied = flags_applied(self.flags, self.observed, self.engine_device)
        return True

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
        logger.debug("arm %s: %d client actor(s) ready on node(s) %s", self.name, len(nodes), nodes)

    def between_rounds(self) -> bool:
        """Fresh prefix cache and a health check, so round N+1 does not profit from round N."""
        try:
            ray.get(self.engine.reset_for_next_round.remote())
            return True
        except RayError as e:
            self.failure = _failure("engine", e)
            return False

    # --- one round -----------------------------------------------------------------------------
    def open_round(self, round_index: int) -> bool:
        """Read the engine's counters the round's window starts from; the driver chooses the round's start only
        after this returns. The read waits for every rank to publish its expert counts (every 5 s): read after
        the start was chosen, it made the first level's first wave late (on the H200, 2026-12-03: 0.61 and
        0.95 s, on the two engines with the count on). False, with the arm's ``failure`` set, if the engine
        is gone."""

        def read() -> None:
            self._round_before = self._engine_samples()

        return self._guarded(round_index, read)

    def replay(self, round_index: int, start_epoch_s: float) -> None:
        """Every client actor replays its shard from the common start; records reach disk as they arrive.
        ``open_round`` comes first.

        Never raises (but KeyboardInterrupt): whatever goes wrong becomes this arm's ``failure``.
        """
        self._guarded(round_index, functools.partial(self._replay, round_index, start_epoch_s))

    def _guarded(self, round_index: int, step: Callable[[], None]) -> bool:
        """Run one step of a round; whatever goes wrong becomes this arm's ``failure`` (False), never an exception."""
        try:
            step()
            return True
        except RayError as e:  # every Ray call left out here is the engine's: the clients' are in _consume_shard
            self.failure = _failure("engine", e)
        except Exception as e:
            logger.exception("arm %s: round %d failed", self.name, round_index)
            self.failure = (f"round {round_index} failed: {_reason(e)[0]}", None)
        return False

    def _replay(self, round_index: int, start_epoch_s: float) -> None:
        # The journal stays open across rounds: on Ctrl-C the consumer threads keep appending what still
        # arrives until the result seals it.
        before, self._round_before = self._round_before, None
        if before is None:
            raise RuntimeError(f"round {round_index} replayed before open_round")
        faults = self.hooks.round_faults(round_index, self.engine, self.clients)
        order = self._level_order(round_index)
        for k, level in enumerate(order):
            if k:  # the engine serves the next level from idle, at a start of its own
                if not self._drained(round_index, level):
                    break
                start_epoch_s = time.time() + START_DELAY_S
            settings = self._client_settings(round_index, level.index)
            rnd = _Round(round_index, start_epoch_s, settings, level, faults)
            n = len(self.clients)
            logger.debug("arm %s: round %d: level %s: %d client(s) start at %.3f", self.name, round_index,
                         level.label, n, start_epoch_s)  # fmt: skip
            if self.on_level is not None:
                self.on_level(self.name, level)
            run_in_threads([functools.partial(self._consume_shard, rnd, i) for i in range(n)])
            if k < len(order) - 1 and self._round_lost(round_index):  # after the last, _check_round looks
                break
        self.rounds_done += 1
        self._add_window_metrics(round_index, before, self._engine_samples())
        self._collect_compile_events(round_index)
        self._check_round(round_index)

    def _level_order(self, round_index: int) -> list[LevelPlan]:
        """The sweep's levels in this round's order (as listed, reversed on odd rounds): every arm the same."""
        sweep = self.cfg.sweep
        if sweep is None:
            return self.levels
        return [self.levels[i] for i in sweep.order(round_index)]  # planned in listed order: position = index

    def _round_lost(self, round_index: int) -> bool:
        """A client lost or the engine gone: the round's later levels are not sent (``_check_round`` says why)."""
        with self.lock:
            lost = any(s.round == round_index and s.status == "lost" for s in self.shards)
        return lost or ray.get(self.engine.poll.remote()) is not None

    def _drained(self, round_index: int, level: LevelPlan) -> bool:
        """Wait until the engine has no request running or waiting, so a level starts from idle and none of the
        last level's stragglers (a timed-out request vLLM still runs) is counted against it. Polls the engine's
        own queue gauges; an engine that does not drain within ``sweep.drain_timeout_s`` fails the arm."""
        assert self.cfg.sweep is not None
        deadline = time.monotonic() + self.cfg.sweep.drain_timeout_s
        while True:
            samples = parse_samples(ray.get(self.engine.metrics_text.remote()))
            busy = sum(v for k, v in samples.items() if k.startswith((RUNNING, WAITING)))
            if busy <= 0 or not any(k.startswith(RUNNING) for k in samples):
                return True
            if time.monotonic() >= deadline:
                self.failure = (
                    f"round {round_index}: the engine did not drain before level {level.label} "
                    f"({busy:g} request(s) still running or waiting after {self.cfg.sweep.drain_timeout_s:g} s)",
                    None,
                )
                return False
            time.sleep(DRAIN_POLL_S)  # polling the engine's gauges: vLLM has no "idle" event to wait on

    def _client_settings(self, round_index: int, level: int | None = None) -> ClientSettings:
        """The arm's client settings for this round; the in-flight cap is per arm, split over its clients."""
        assert self.info is not None
        lo, hi = ray.get(self.engine.prompt_id_range.remote())
        cap = self.cfg.client.max_in_flight
        return ClientSettings(
            base_url=self.info.url,
            model=self.cfg.model.served_name,
            arm=self.name,
            vocab_lo=lo,
            vocab_hi=hi,
            seed=level_prompt_seed(self.cfg.workload.seed, round_index, level),
            max_in_flight=None if cap is None else max(1, -(-cap // len(self.clients))),
            request_timeout_s=self.cfg.client.request_timeout_s,
            round=round_index,
            level=level,
            fail_dispatch_after_records=self.hooks.client_fault(round_index),
            api_key=self.api_key,
        )

    def _consume_shard(self, rnd: _Round, client: int) -> None:
        """One consumer thread: stream a client's records to disk, then record how its shard ended."""
        part = rnd.level.requests.shard(len(self.clients), client)  # numpy: no object per request
        result = ShardResult(
            round=rnd.index,
            client=client,
            level=rnd.level.index,
            node_id=self.client_nodes[client],
            start_epoch_s=rnd.start_epoch_s,
            planned=len(part),
            received=0,
            status="ok",
        )
        try:
            self._stream_shard(rnd, client, part, result)
        except RayActorError as e:
            result.status, result.error = "lost", f"client actor died: {_actor_died(e)}"
        except (_ClientSilent, _RecordsUnwritable) as e:
            result.status, result.error = "lost", str(e)
        except RayTaskError as e:
            # The replay itself raised (ReplayFailed, ReplayDeadlineExceeded: their text is the reason) or the
            # actor's code did; the records it finished before are on disk already.
            reason = _reason(e)[0]
            result.status = "lost"
            result.error = reason if isinstance(e.cause, ReplayError) else f"client failed: {reason}"
        except Exception as e:  # a bug in the client must fail the arm loudly, not vanish with the thread
            result.status, result.error = "lost", f"client failed: {_reason(e)[0]}"
        health = self._client_health(client) if result.status == "ok" else None
        with self.lock:
            self.shards.append(result)
            if health is not None:
                self.client_health.append(health)

    def _stream_shard(self, rnd: _Round, client: int, part: ScheduleColumns, result: ShardResult) -> None:
        deadline_s = replay_deadline_s(part, rnd.settings, self.deadline_margin_s)
        settings = dataclasses.replace(rnd.settings, client=client, deadline_s=deadline_s)
        batches = (
            self.clients[client]
            .replay.options(num_returns="streaming")
            .remote(part.to_arrays(), settings, rnd.start_epoch_s)  # a dict of arrays: pickled as buffers
        )
        give_up_at = rnd.start_epoch_s + deadline_s + self.client_grace_s  # wall clock: the start is an epoch
        while True:
            ready, _ = ray.wait([batches], timeout=max(0.0, give_up_at - time.time()))
            if not ready:
                ray.cancel(batches)
                raise _ClientSilent(
                    f"replay deadline passed: client actor {client} had not ended {self.client_grace_s:g} s past its "
                    f"replay deadline ({deadline_s:g} s after the start); cut off"
                )
            try:
                ref = next(batches)
            except StopIteration:
                return
            batch = [RequestRecord.model_validate(d) for d in ray.get(ref)]
            received = self._keep(rnd, client, batch, result)
            self._report(client, batch)
            rnd.faults.records_received(received)

    def _keep(self, rnd: _Round, client: int, batch: list[RequestRecord], result: ShardResult) -> int:
        """Stamp, append to disk and keep a batch; returns the round's record count so far.

        A file that stops taking writes (a full disk, a folder gone) ends this client's shard with that reason:
        what is already on disk stays, and no record is kept that is not on disk."""
        with self.lock:
            for rec in batch:
                rec.round, rec.client, rec.level = rnd.index, client, rnd.level.index
            try:
                rnd.faults.before_write(self.records.kept)
                self.records.append(batch)
            except (OSError, pa.ArrowException) as e:
                path = self.records.journal.path.relative_to(self.run_dir)
                raise _RecordsUnwritable(
                    f"records file {path} stopped taking writes after {self.records.kept} record(s): {e}"
                ) from e
            result.received += len(batch)
            rnd.received += len(batch)
            return rnd.received

    def _report(self, client: int, batch: list[RequestRecord]) -> None:
        if self.observe is not None:
            node = self.client_nodes[client]
            for rec in batch:
                self.observe(rec, node)
        self.on_records(self.name, len(batch), sum(1 for rec in batch if not rec.ok))

    def _client_health(self, client: int) -> ClientHealth | None:
        """Event-loop lag and CPU the client measured; None when it cannot say (the verdict then lacks it)."""
        try:
            h = ray.get(self.clients[client].health.remote(), timeout=HEALTH_TIMEOUT_S)
        except RayError:
            return None
        return ClientHealth.model_validate({**h, "node_id": self.client_nodes[client]}) if h else None

    def _engine_samples(self) -> dict[str, float]:
        """One scrape serves the window's counters and the observation (launch counts, config sources so far)."""
        got = self._settled_metrics()
        self._last_samples = got.samples
        latest = observe_engine(got.text, self.info.moe_backends if self.info else [])
        if latest.ranks:  # an engine that died mid-round keeps what it reported while it lived
            self.observed = latest
        return self._last_samples

    def _settled_metrics(self) -> Scrape:
        """The engine's /metrics once every rank's plugin has published the routing of every step it served, so a
        window's expert counts hold exactly its steps (``settled_scrape``); after ``SETTLE_TIMEOUT_S`` the scrape
        is taken as it is."""

        def timed_out(pending: list[str]) -> None:
            logger.warning("arm %s: expert counts not settled in %g s (ranks unpublished: %s): window read as it is",
                           self.name, SETTLE_TIMEOUT_S, pending or "none, but the counts still changing")  # fmt: skip

        return settled_scrape(
            lambda: ray.get(self.engine.metrics_text.remote()), SETTLE_TIMEOUT_S, SETTLE_POLL_S, timed_out
        )

    def _collect_compile_events(self, round_index: int) -> None:
        """The compiles the engine's ranks logged up to the end of this round's replay, for the attribution to the
        requests that waited (``analysis.compile_attribution``). A diagnostic: failing to read them fails nothing."""
        try:
            events = ray.get(self.engine.compile_events.remote(round_index), timeout=HEALTH_TIMEOUT_S)
        except (RayError, GetTimeoutError) as e:
            logger.warning("arm %s: round %d: compile events not collected: %s", self.name, round_index, e)
            return
        self.compile_events += events

    def _add_window_metrics(self, round_index: int, before: dict[str, float], after: dict[str, float]) -> None:
        """Engine counters over the measured window only: warmup and earlier rounds are subtracted. The round's
        step times are also kept on their own, so a report can set one round's engines against each other."""
        self._all_series.update(after)
        if after:
            delta = window_delta(before, after)
            for k, v in delta.items():
                self.window_metrics[k] = self.window_metrics.get(k, 0.0) + v
            steps = step_time_series(delta)
            if steps:
                by_round = self.window_metrics_by_round.setdefault(round_index, {})
                for k, v in steps.items():
                    by_round[k] = by_round.get(k, 0.0) + v
            self.metrics_seen = True

    def _check_round(self, round_index: int) -> None:
        """Fail the arm if a client actor was lost or the engine died while the round ran."""
        with self.lock:
            lost = [
                s for s in sorted(self.shards, key=lambda s: s.client) if s.round == round_index and s.status == "lost"
            ]
        if lost:
            missing = sum(s.planned - s.received for s in lost)
            clients = [s.client for s in lost]
            died = all((s.error or "").startswith("client actor died") for s in lost)
            what = f"client actor(s) {clients} lost" if died else f"client(s) {clients} did not finish: {lost[0].error}"
            self.failure = (
                f"round {round_index}: {what}; {missing} request(s) of their shards have no record"
                + (f" ({lost[0].error})" if died else ""),
                None,
            )
        code = ray.get(self.engine.poll.remote())
        if code is not None:
            tail = ray.get(self.engine.log_tail.remote())
            self.failure = (f"engine died during the replay (exit code {code}, round {round_index})", tail)
        elif not ray.get(self.engine.responsive.remote(HUNG_AFTER_S)):
            with self.lock:
                timed_out = self.records.timeouts_by_round[round_index]
            self.failure = (
                f"engine hung during round {round_index}: alive but /health not answered within {HUNG_AFTER_S:g} s; "
                f"{timed_out} request(s) timed out",
                None,
            )

    def stop(self) -> None:
        """Idempotent; safe after any failure and from a Ctrl-C handler."""
        if self.engine is not None:
            try:
                _, tail = ray.get(self.engine.stop.remote(), timeout=STOP_TIMEOUT_S)
                if self.failure is not None and self.failure[1] is None and "client actor" not in self.failure[0]:
                    self.failure = (self.failure[0], tail)
            except (RayError, GetTimeoutError):
                pass
            _kill(self.engine)
            self.engine = None
        for cl in self.clients:
            _kill(cl)
        self.clients = []
        release(self.pg)
        self.pg = None

    def _compiles(self) -> int | None:
        """None when the engine exports no compile counter (no plugin), rather than a misleading 0."""
        if not self.metrics_seen or not any(k.startswith(COMPILES) for k in self._all_series):
            return None
        return compiles_in_window(self.window_metrics)

    def compiles_since_start(self) -> int | None:
        """Triton compiles of the engine from its start to the last scrape (start-up warm-up included)."""
        if not any(k.startswith(COMPILES) for k in self._last_samples):
            return None
        return compiles_in_window(self._last_samples)

    # --- result --------------------------------------------------------------------------------
    def fail(self, reason: str, log_tail: str | None = None) -> None:
        """Mark the arm failed without running it (its warm-up pass failed); keeps an earlier reason."""
        if self.failure is None:
            self.failure = (reason, log_tail)

    def result(self, interrupted: bool = False, stopped: str | None = None) -> ArmResult:
        """The arm's result; ``stopped``: why the run ended early, which fails an arm with rounds still to run."""
        with self.lock:
            sealed, records = self.records.seal()
            shards = sorted(self.shards, key=lambda s: (s.round, -1 if s.level is None else s.level, s.client))
        outcome = RecordsOutcome.of(
            sealed, records, self.run_dir, self.cfg.slo, self.cfg.client.max_dispatch_lag_p99_ms
        )
        planned = self.planned_per_round * max(1, self.cfg.rounds)
        failure = self.failure or ((INTERRUPTED, None) if interrupted else None)
        if failure is None and stopped is not None and self.rounds_done < self.cfg.rounds:
            failure = (f"run stopped after {self.rounds_done} of {self.cfg.rounds} round(s): {stopped}", None)
        result = ArmResult(
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
            requests_not_sent=planned - outcome.sent,
            rounds=self.rounds_done,
            shards=shards,
            client_health=list(self.client_health),
            window_metrics=dict(sorted(without_expert_series(self.window_metrics).items())),
            window_metrics_by_round={r: dict(sorted(w.items())) for r, w in self.window_metrics_by_round.items()},
            triton_compiles_in_window=self._compiles(),
            expert_load=expert_load_in_window(self.window_metrics, self._all_series),
            compile_events=list(self.compile_events),
            levels=self._level_results(records),
            observed=self.observed,
            **outcome.fields,
        )
        return result.with_columns(records)

    def _level_results(self, records: RecordColumns) -> list[LevelResult]:
        """Per sweep level: its measured records (warm-up share left out) summarised like an arm's."""
        sweep = self.cfg.sweep
        if sweep is None:
            return []
        out = []
        for lv in self.levels:
            assert lv.index is not None
            spec = sweep.levels[lv.index]
            summary = summarize_level(records, lv.index, self.cfg.slo)
            out.append(LevelResult.of(lv.index, spec, len(lv.requests), lv.warmup_requests, summary))
        return out
