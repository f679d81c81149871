"""The run driver: config in, result file out, with every engine stopped whatever happens.

A run is a plan of *turns* (``plan_turns``): with ``engine.cache_state: shared_warm`` first one
warm-up turn per distinct arm setting, then the measured turns (interleaved: one arm each, A B C then
C B A, each next pair of rounds starting one arm further on: ``arm_order``; parallel: every arm at
once, per round). Bad input raises ``RunError`` before anything starts; after that, whatever
happens (an arm's failure, a bug in the driver, Ctrl-C or SIGTERM), every engine is stopped and
``result.json`` is written: 'failed' with ``error`` set when the driver itself raised, 'interrupted'
on Ctrl-C, and every finished record is in it and on disk.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import ray
import yaml

from cluster.engine.actor import Device
from cluster.engine.api_key import run_api_key
from cluster.engine.jit_seed import copy_seed, seed_problem
from cluster.observability.environment import node_environment
from cluster.orchestration.arm_runner import JIT_CACHE_DIR, START_DELAY_S, ArmRunner
from cluster.orchestration.fault_injection import FaultSpecError, RunHooks, hooks_for, run_hooks_for
from cluster.orchestration.progress import Progress, make_progress
from cluster.orchestration.run_metrics import RunMetrics
from cluster.orchestration.threads import run_in_threads
from experiment.config import ArmSpec, ConfigError, ExperimentConfig
from moe_opt.flags import OptimizationFlags
from moe_opt.tune.folder import folder_problem
from result_format.run_result import ArmResult, RunResult, ScheduleInfo, TurnRecord, WarmupPassInfo
from workloads.schedule_columns import ScheduleColumns
from workloads.schedule_file import write_schedule
from workloads.sweep import LevelPlan, plan_levels, sweep_schedule, warmup_pass_levels
from workloads.traces import TraceFormatError
from workloads.workload import Schedule, build_schedule

logger = logging.getLogger(__name__)

"""The common start is set this far in the future so every client actor is ready before it."""


class RunError(RuntimeError):
    """The run could not start (bad input); nothing was launched."""


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _describe(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


@dataclass(frozen=True)
class ArmSetting:
    """What an engine runs with beyond the run's shared engine spec: the flags and --enforce-eager.

    Arms with equal settings compile the same kernels (an A/A control always shares its target's),
    so one warm-up engine per setting fills the shared JIT cache for all of them.
    """

    name: str  # the first arm, in the file's order, that runs with it
    flags: OptimizationFlags
    enforce_eager: bool
    arms: tuple[str, ...]
    engine_env: dict[str, str] = field(default_factory=dict)  # what its engines get: engine.env, the arm's laid over


def arm_settings(cfg: ExperimentConfig) -> list[ArmSetting]:
    """The distinct settings of the run's arms, in the order their first arm appears."""
    found: list[tuple[tuple[OptimizationFlags, bool, dict[str, str]], list[str]]] = []
    for arm in cfg.arms:
        key = (cfg.arm_flags(arm), cfg.arm_enforce_eager(arm), cfg.arm_engine_env(arm))
        for seen, names in found:
            if seen == key:
                names.append(arm.name)
                break
        else:
            found.append((key, [arm.name]))
    return [ArmSetting(names[0], flags, eager, tuple(names), env) for (flags, eager, env), names in found]


@dataclass(frozen=True)
class Turn:
    """One step of the run: a warm-up engine of one setting, or measured arms (together when parallel)."""

    kind: Literal["warmup", "measured"]
    round: int
    names: tuple[str, ...]  # warmup: the setting's name; measured: the arms of this turn


def plan_turns(cfg: ExperimentConfig) -> list[Turn]:
    """Every turn of the run, in the order the driver runs them.

    shared_warm: one warm-up turn per distinct setting, all before the first measured turn, one
    after another (also when arms run in parallel: each fills the cache alone, and the resources
    reserved for the arms hold any one engine). seeded (the seed did the warming), cold_per_arm and
    as_found: no warm-up turn.
    """
    turns: list[Turn] = []
    if cfg.engine.cache_state == "shared_warm":
        turns += [Turn("warmup", 0, (s.name,)) for s in arm_settings(cfg)]
    names = tuple(a.name for a in cfg.arms)
    for round_index in range(cfg.first_round, cfg.first_round + cfg.rounds):
        if cfg.placement == "parallel":
            turns.append(Turn("measured", round_index, names))
        else:
            turns += [Turn("measured", round_index, (n,)) for n in arm_order(names, round_index)]
    return turns


def arm_order(names: tuple[str, ...], round_index: int) -> tuple[str, ...]:
    """The order of the interleaved engines in round ``round_index``: rounds 2j and 2j + 1 are mirror images
    (a linear drift over the pair cancels), and with three or more arms each pair starts one arm further on.

    Mirroring alone (A B C, C B A) keeps the middle arm in the middle for ever, so anything tied to an engine's
    place on the machine is read as that arm's effect. On the H200 (2026-12-03, claim 1's steady series) the
    middle engine of both rounds was the A/A control, 11% slower at c=64 both times. Rotating the row of a
    cyclic Latin square every pair puts every arm in every place equally often over 2k rounds (k arms); with
    two arms the mirror does that already and the order stays A B, B A. Rounds 0 and 1 are A B C, C B A for
    any k, so a run continued with ``first_round`` keeps the order of those it pools with.
    """
    k = len(names)
    shift = (round_index // 2) % k if k > 2 else 0
    row = names[shift:] + names[:shift]
    return row if round_index % 2 == 0 else row[::-1]


@dataclass
class RoundBudget:
    """Whether the next round fits in what is left of ``time_budget_s``, judged by the longest round so far.

    The first round always starts (nothing is known yet, and a run of no rounds answers nothing). A round
    cut by the end of a lent machine leaves only journals and loses the engines' observations; a round not
    started loses nothing that was measured.
    """

    budget_s: float | None
    started_s: float
    longest_s: float = 0.0
    rounds_seen: int = 0
    _round: int | None = None
    _round_start_s: float = 0.0

    def starts(self, round_index: int, now_s: float) -> bool:
        """Called before each measured turn: True when it is the first turn of a new round."""
        if round_index == self._round:
            return False
        self._round, self._round_start_s = round_index, now_s
        self.rounds_seen += 1
        return True

    def turn_ended(self, round_index: int, now_s: float) -> None:
        if round_index == self._round:
            self.longest_s = max(self.longest_s, now_s - self._round_start_s)

    def refuses(self, round_index: int, now_s: float) -> str | None:
        """Why round ``round_index`` (just begun) must not run, or None."""
        if self.budget_s is None or self.rounds_seen == 1:
            return None
        left_s = self.budget_s - (now_s - self.started_s)
        if left_s >= self.longest_s:
            return None
        left = f"{left_s:.0f} s of time_budget_s={self.budget_s:.0f} left"
        return f"{left}, and the longest round took {self.longest_s:.0f} s"


@dataclass
class _Warmup:
    setting: ArmSetting
    runner: ArmRunner
    info: WarmupPassInfo | None = None


def plan(cfg: ExperimentConfig, base_dir: Path | None) -> Schedule:
    """Everything checkable before Ray and engines: trace, model path, lengths against the context."""
    return plan_run(cfg, base_dir)[0]


def plan_run(cfg: ExperimentConfig, base_dir: Path | None) -> tuple[Schedule, list[LevelPlan]]:
    """The workload's schedule and the replays of one round (the sweep's levels, or that one schedule)."""
    try:
        if cfg.sweep is None:
            schedule = build_schedule(cfg.workload, base_dir)
            levels = [LevelPlan(index=None, label="all", requests=schedule.requests)]
        else:  # each level replaces the workload's arrivals: its own schedules are what runs
            levels = plan_levels(cfg.sweep, cfg.workload, base_dir)
            schedule = sweep_schedule(levels)
    except TraceFormatError as e:
        raise RunError(f"trace: {e}") from None
    path = cfg.model.path
    if path is not None and (path.startswith(("/", ".", "~")) or os.sep in path and Path(path).exists()):
        p = Path(path).expanduser()
        if not (p / "config.json").is_file():
            raise RunError(f"model.path: {p} is not a model directory (no config.json)")
    seed = cfg.engine.jit_cache_seed
    if seed is not None and (problem := seed_problem(seed)):  # checked here, not in the model: likewise
        raise RunError(f"engine.jit_cache_seed: {problem}")
    for i, arm in enumerate(cfg.arms):  # checked here, not in the model: a saved result must load anywhere
        folder = arm.flags.tuned_config_dir
        if folder is not None and (problem := folder_problem(folder)):
            raise RunError(f"arms.{i}.flags.tuned_config_dir: {problem}")
    too_long = sum(int(_too_long(lv.requests, cfg.model.max_model_len).sum()) for lv in levels)
    if too_long:
        lv = next(lv for lv in levels if _too_long(lv.requests, cfg.model.max_model_len).any())
        r = lv.requests.request(int(np.flatnonzero(_too_long(lv.requests, cfg.model.max_model_len))[0]))
        raise RunError(
            f"workload: {too_long} request(s) need more than model.max_model_len={cfg.model.max_model_len} "
            f"tokens (first: #{r.index}, {r.prompt_tokens} prompt + {r.max_tokens} output); lower "
            "workload.input_scale/output_scale, set workload.max_input_tokens/max_output_tokens, or set "
            "workload.max_model_len to clip to the context (clips are counted in the result)"
        )
    return schedule, levels


def _too_long(requests: ScheduleColumns, max_model_len: int) -> np.ndarray:
    return requests.prompt_tokens + requests.max_tokens > max_model_len


def connect_ray(cfg: ExperimentConfig) -> bool:
    """Join the configured cluster (or the job's), else start a private local one. True if we started it."""
    address = cfg.ray_address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return False
    with _sigterm_kept():
        if address:
            ray.init(address=address, logging_level=logging.WARNING)
            return False
        ray.init(address="local", include_dashboard=cfg.metrics.ray_dashboard, logging_level=logging.WARNING)
    return True


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    """ray.init replaces the SIGTERM handler with ``sys.exit(15)``: engines would be stopped by the finally
    blocks, but no result written and the exit code 15. Keep whatever the caller had (the CLI's: the same
    clean stop as Ctrl-C, exit 130)."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and before is not None:
            signal.signal(signal.SIGTERM, before)


def resolve_device(cfg: ExperimentConfig) -> Device:
    if cfg.engine.device != "auto":
        return cfg.engine.device
    return "cuda" if ray.cluster_resources().get("GPU", 0) > 0 else "cpu"


def check_platform(cfg: ExperimentConfig, device: Device) -> None:
    if device != "cuda":
        return
    if importlib.util.find_spec("moe_opt.plugin") is None:
        needing = [a.name for a in cfg.arms if a.flags.needs_plugin()]
        if needing:
            raise RunError(
                f"arms {needing} set swap_ab/no_respecialize, which only the moeperf vLLM worker plugin "
                "(moe_opt.plugin) can apply, and it is not installed; refusing to run them as baseline"
            )


def schedule_info(schedule: Schedule, requests: int, duration_s: float) -> ScheduleInfo:
    """What the result says of the replay plan: its size and length (a sweep's over all its levels) and what the
    planning clipped or skipped."""
    return ScheduleInfo(
        requests=requests,
        duration_s=duration_s,
        clipped_input=schedule.clipped_input,
        clipped_output=schedule.clipped_output,
        clipped_context=schedule.clipped_context,
        skipped=schedule.skipped,
    )


class Driver:
    def __init__(self, cfg: ExperimentConfig, base_dir: Path | None, command: list[str]) -> None:
        self.cfg, self.base_dir, self.command = cfg, base_dir, command
        self.run_id = f"{cfg.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:6]}"
        self.run_dir = (cfg.output_dir / self.run_id).resolve()
        self.started_at = _utc_now()
        self.progress: Progress = make_progress(cfg.rounds)
        self.metrics = RunMetrics(cfg, self.run_id)
        self.turns = plan_turns(cfg)
        self.turn_log: list[TurnRecord] = []
        self.runners: list[ArmRunner] = []
        self.warmups: dict[str, _Warmup] = {}
        self.levels: list[LevelPlan] = []
        self.seed_note: str | None = None  # engine.cache_state seeded: what the run's cache started from
        self.budget_note: str | None = None  # time_budget_s: the rounds it left out
        self.started_s = time.monotonic()
        self.api_key = run_api_key(cfg.engine)  # a ConfigError (exit 2) before anything starts; never written

    def _write_inputs(self, schedule: Schedule) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False))
        env = {"driver": node_environment()}
        (self.run_dir / "environment.json").write_text(json.dumps(env, indent=2))
        write_schedule(schedule, self.run_dir)  # columns: a million requests in a few MB, not a 150 MB JSON
        return env

    def run(self) -> RunResult:
        """Plan, run every turn, stop every engine whatever happens, and write result.json.

        Raises only ``RunError`` (bad input, nothing started, no result written) and a KeyboardInterrupt
        that arrives before the run folder exists; every other exception ends as a written result.
        """
        self.started_s = time.monotonic()  # the time budget counts from here
        schedule, self.levels = plan_run(self.cfg, self.base_dir)
        try:
            hooks = run_hooks_for(self.cfg)
        except FaultSpecError as e:
            raise RunError(str(e)) from None
        started_ray = False
        try:
            started_ray = connect_ray(self.cfg)
            device = resolve_device(self.cfg)
            check_platform(self.cfg, device)
        except (RunError, KeyboardInterrupt):
            if started_ray:
                ray.shutdown()
            raise
        except Exception as e:  # Ray could not start or be reached: nothing ran, but the run says why
            logger.error("moeperf run %s: %s", self.run_id, _describe(e))
            return self._finish(schedule, {}, False, _describe(e), started_ray)
        env: dict[str, Any] = {}
        interrupted, error = False, None
        try:
            env = self._write_inputs(schedule)
            self._seed_jit_cache()
            self._start_metrics()
            self.runners = self._runners(schedule, device)
            self._run_turns(hooks)
        except KeyboardInterrupt:
            interrupted = True
            logger.info("\ninterrupted: stopping engines and releasing placement groups")
        except Exception as e:  # a bug, or a fault the arms could not absorb: still a result, with the error
            error = _describe(e)
            logger.exception("moeperf run %s failed: %s", self.run_id, error)
        finally:
            for r in [w.runner for w in self.warmups.values()] + self.runners:
                self._stop(r)
            self.progress.close()
            self._stop_metrics()
        return self._finish(schedule, env, interrupted, error, started_ray)

    def _seed_jit_cache(self) -> None:
        """engine.cache_state seeded: the run's cache starts as a copy of the seed, before any engine."""
        seed = self.cfg.engine.jit_cache_seed
        if seed is None:
            return
        files, size = copy_seed(seed, self.run_dir / JIT_CACHE_DIR)
        self.seed_note = f"JIT cache seeded from {seed}: {files} files, {size / 1e6:.1f} MB; no warm-up pass"
        logger.info("%s", self.seed_note)

    def _finish(
        self, schedule: Schedule, env: dict[str, Any], interrupted: bool, error: str | None, started_ray: bool
    ) -> RunResult:
        result = self._result(schedule, env, interrupted, error)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "result.json").write_text(result.model_dump_json(indent=1))
        if started_ray:
            ray.shutdown()
        return result

    def _runners(self, schedule: Schedule, device: Device) -> list[ArmRunner]:
        logger.info(
            "moeperf run %s: %d arm(s) on %s, %d requests over %.1f s -> %s",
            self.run_id,
            len(self.cfg.arms),
            device,
            len(schedule.requests),
            schedule.duration_s,
            self.run_dir,
        )
        runners = [self._runner(arm, device, schedule) for arm in self.cfg.arms]
        for r in runners:
            for note in r.notes:
                logger.info("note: arm %s: %s", r.arm.name, note)
        for setting in arm_settings(self.cfg) if any(t.kind == "warmup" for t in self.turns) else []:
            name = f"warmup-{setting.name}"
            # The setting's own spec, standing alone: a control arm's target is not in reach of cfg.arm_flags here.
            arm = ArmSpec(
                name=setting.name,
                flags=setting.flags,
                enforce_eager=setting.enforce_eager,
                engine_env=setting.engine_env,
            )
            self.warmups[setting.name] = _Warmup(setting, self._runner(arm, device, schedule, warmup_name=name))
        return runners

    def _runner(self, arm: ArmSpec, device: Device, schedule: Schedule, warmup_name: str | None = None) -> ArmRunner:
        """A measured arm's runner; with ``warmup_name``, an unmeasured warm-up pass's under that name: with the
        warm-up hooks, not in the live client metrics and not reporting its levels to them."""
        measured = warmup_name is None
        hooks = None if warmup_name is None else hooks_for(self.cfg, warmup_name, warmup=True)
        return ArmRunner(
            self.cfg,
            arm,
            device,
            self.run_dir,
            schedule.requests,
            self.progress.advance,
            self.metrics.observe if measured else None,
            hooks=hooks,
            name=warmup_name,
            levels=self.levels if measured else self._warmup_levels(),
            on_level=self._on_level if measured else None,
            api_key=self.api_key,
        )

    def _warmup_levels(self) -> list[LevelPlan]:
        return warmup_pass_levels(self.levels, self.cfg.sweep, self.cfg.workload, self.cfg.engine.warmup_pass_fraction)

    def _run_turns(self, hooks: RunHooks) -> None:
        by_name = {r.arm.name: r for r in self.runners}
        budget = RoundBudget(self.cfg.time_budget_s, self.started_s)
        for done, turn in enumerate(self.turns, 1):
            now_s = time.monotonic()
            if turn.kind == "measured" and budget.starts(turn.round, now_s):
                if (why := budget.refuses(turn.round, now_s)) is not None:
                    self._end_rounds_early(turn.round, why)
                    return
            record = TurnRecord(kind=turn.kind, round=turn.round, arms=list(turn.names), started_at=_utc_now())
            self.turn_log.append(record)
            if turn.kind == "warmup":
                self._warm_up(self.warmups[turn.names[0]], by_name)
            elif self.cfg.placement == "parallel":
                self._parallel_round([by_name[n] for n in turn.names], turn.round)
            else:
                self._interleaved_turn(by_name[turn.names[0]], turn.round)
            self.turn_log[-1] = record.model_copy(update={"ended_at": _utc_now()})
            hooks.after_turn(done)
            if turn.kind == "measured":
                budget.turn_ended(turn.round, time.monotonic())

    def _end_rounds_early(self, next_round: int, why: str) -> None:
        """The time budget ends the run before ``next_round``: the result is a whole run of the rounds run."""
        run = next_round - self.cfg.first_round
        self.budget_note = (
            f"time budget: rounds {next_round}-{self.cfg.first_round + self.cfg.rounds - 1} not started ({why}); "
            f"the result holds rounds {self.cfg.first_round}-{next_round - 1}: continue with --first_round {next_round}"
        )
        logger.info("%s", self.budget_note)
        self.cfg = self.cfg.model_copy(update={"rounds": run})
        for r in self.runners:
            r.cfg = self.cfg

    # --- Prometheus (dashboards/README.md) -------------------------------------------------------
    def _start_metrics(self) -> None:
        self.metrics.start()

    def _stop_metrics(self) -> None:
        try:
            self.metrics.stop()
        except Exception as e:  # the export must never cost the run its result
            logger.warning("metrics: could not stop the Prometheus export: %s", e)

    # --- arms ------------------------------------------------------------------------------------
    def _on_level(self, arm: str, level: LevelPlan) -> None:
        if level.index is not None:
            logger.info("arm %s: level %s (%d requests)", arm, level.label, len(level.requests))
            self.metrics.level_active(arm, level.label)

    def _stop(self, r: ArmRunner) -> None:
        try:
            r.stop()
        except Exception as e:  # stopping one engine must not keep the others running
            logger.warning("arm %s: stop failed: %s", r.name, _describe(e))
        self.metrics.engine_down(r.name)

    def _start(self, r: ArmRunner, round_index: int) -> bool:
        logger.info("arm %s: round %d: starting engine (%s)", r.name, round_index, r.flags.describe())
        if not r.start():
            logger.error("arm %s: FAILED to start: %s", r.name, r.failure[0] if r.failure else "")
            self._stop(r)
            return False
        assert r.info is not None
        self.metrics.engine_up(r.name, r.info.url, r.info.node_id)
        logger.info(
            "arm %s: engine healthy at %s after %s",
            r.name,
            r.info.url,
            r.info.describe_startup(),
        )
        return True

    @contextlib.contextmanager
    def _round_of(self, arms: list[ArmRunner], round_index: int, measured: bool = True) -> Iterator[None]:
        """Progress and the 'arm active' metric around one round of ``arms`` (all of them at once if parallel)."""
        for position, r in enumerate(arms):
            self.progress.begin(r.name, round_index, r.planned_per_round, position)
        active = arms if measured else []
        for r in active:
            self.metrics.arm_active(r.name, round_index, True)
        try:
            yield
        finally:
            for r in active:
                self.metrics.arm_active(r.name, round_index, False)
        for r in arms:  # on Ctrl-C, run() closes what is still open
            self.progress.end(r.name)

    def _warm_up(self, w: _Warmup, by_name: dict[str, ArmRunner]) -> None:
        """Fill the shared JIT cache for one setting: start, replay once unmeasured, stop.

        If it fails, the arms of this setting fail without running (the reason says so, the engine's log
        tail is kept): measured cold, they would compare a cold engine with warm ones, which is exactly the
        unequal warmth shared_warm exists to rule out. The other settings' arms still run.
        """
        r, s = w.runner, w.setting
        logger.info("warm-up pass: setting %s (arms %s): unmeasured replay into %s", s.name, ", ".join(s.arms),
                    r.jit_cache_dir)  # fmt: skip
        try:
            if self._start(r, 0):
                with self._round_of([r], 0, measured=False):
                    if r.open_round(0):
                        r.replay(0, time.time() + START_DELAY_S)
        finally:
            self._stop(r)
            w.info = self._warmup_info(w)
        if r.failure is not None:
            logger.error("warm-up pass: setting %s FAILED: %s", s.name, r.failure[0])
            for arm in s.arms:
                by_name[arm].fail(f"warm-up pass of setting {s.name} failed: {r.failure[0]}", r.failure[1])

    def _warmup_info(self, w: _Warmup) -> WarmupPassInfo:
        """What the pass of one setting did; one that did not replay to its end (Ctrl-C, an error) failed."""
        r, s = w.runner, w.setting
        with r.lock:
            sealed, records = r.records.seal()
        failure = r.failure[0] if r.failure else (None if r.rounds_done else "did not finish")
        return WarmupPassInfo(
            setting=s.name,
            arms=list(s.arms),
            flags=s.flags,
            enforce_eager=s.enforce_eager,
            status="failed" if failure else "ok",
            failure_reason=failure,
            startup_s=r.info.startup_s if r.info is not None else None,
            requests=len(records),
            requests_succeeded=int(records.ok.sum()),
            triton_compiles=r.compiles_since_start(),
            triton_compiles_in_replay=r._compiles(),
            records_file=str(sealed.path.relative_to(self.run_dir)),
        )

    def _interleaved_turn(self, r: ArmRunner, round_index: int) -> None:
        """One arm's turn on the shared resources: a fresh engine, one round, stopped."""
        if r.failed or not self._start(r, round_index):
            return
        with self._round_of([r], round_index):
            if r.open_round(round_index):
                r.replay(round_index, time.time() + START_DELAY_S)
        self._stop(r)

    def _parallel_round(self, runners: list[ArmRunner], round_index: int) -> None:
        """All arms at once, each on its own resources, from one common start; engines stay up across rounds."""
        if round_index == self.cfg.first_round:
            live = [r for r in runners if not r.failed and self._start(r, round_index)]
        else:
            live = [r for r in runners if r.engine is not None and not r.failed and r.between_rounds()]
        with self._round_of(live, round_index):
            run_in_threads([functools.partial(r.open_round, round_index) for r in live])
            opened = [r for r in live if not r.failed]
            start = time.time() + START_DELAY_S  # after every arm's open_round: no wait falls between the two
            run_in_threads([functools.partial(r.replay, round_index, start) for r in opened])

    def _result(self, schedule: Schedule, env: dict[str, object], interrupted: bool, error: str | None) -> RunResult:
        arms = [self._arm_result(r, interrupted, error) for r in self.runners]
        notes = [f"arm {r.arm.name}: {n}" for r in self.runners for n in r.notes]
        notes[:0] = [n for n in (self.seed_note, self.budget_note) if n is not None]
        if schedule.clipped_input or schedule.clipped_output:
            notes.append(
                f"clipped to the engine: {schedule.clipped_input} prompt(s), {schedule.clipped_output} output(s)"
            )
        ok = error is None and arms and all(a.status == "ok" for a in arms)
        status = "interrupted" if interrupted else ("ok" if ok else "failed")
        return RunResult(
            run_id=self.run_id,
            experiment=self.cfg.name,
            status=status,
            started_at=self.started_at,
            finished_at=_utc_now(),
            command=self.command,
            config=self.cfg,
            environment=env,
            schedule=schedule_info(
                schedule,
                requests=sum(len(lv.requests) for lv in self.levels) if self.levels else len(schedule.requests),
                duration_s=sum(lv.requests.duration_s for lv in self.levels)
                if self.cfg.sweep is not None
                else schedule.duration_s,
            ),
            arms=arms,
            notes=notes,
            error=error,
            warmup_pass=[w.info for w in self.warmups.values() if w.info is not None],
            turns=self.turn_log,
        )

    def _arm_result(self, r: ArmRunner, interrupted: bool, error: str | None) -> ArmResult:
        """The arm's result; should building it fail, a failed result that says why, so the file is still written."""
        try:
            return r.result(interrupted, stopped=error)
        except Exception as e:
            logger.exception("arm %s: could not build its result", r.arm.name)
            return ArmResult(
                name=r.arm.name,
                control_of=r.arm.control_of,
                flags=r.flags,
                flags_applied=r.flags_applied,
                status="failed",
                failure_reason=f"result could not be built: {_describe(e)} (records are in {r.records_path.name})",
                requests_planned=r.planned_per_round * self.cfg.rounds,
                requests_sent=0,
                requests_succeeded=0,
                requests_failed=0,
                requests_not_sent=r.planned_per_round * self.cfg.rounds,
                records_file=str(r.records_path.relative_to(self.run_dir)),
            )


__all__ = [
    "ArmSetting",
    "ConfigError",
    "Driver",
    "RunError",
    "Turn",
    "arm_order",
    "arm_settings",
    "connect_ray",
    "plan",
    "plan_turns",
    "resolve_device",
]
