"""The run driver: config in, result file out, with every engine stopped whatever happens."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ray
import yaml

from cluster.engine.actor import Device
from cluster.observability.environment import node_environment
from cluster.orchestration.arm_runner import ArmRunner
from cluster.orchestration.progress import Progress, make_progress
from cluster.orchestration.run_metrics import RunMetrics
from cluster.orchestration.threads import run_in_threads
from experiment.config import ConfigError, ExperimentConfig
from result_format.run_result import RunResult, ScheduleInfo
from workloads.traces import TraceFormatError
from workloads.workload import Schedule, build_schedule

logger = logging.getLogger(__name__)

START_DELAY_S = 1.0
"""The common start is set this far in the future so every client actor is ready before it."""


class RunError(RuntimeError):
    """The run could not start (bad input); nothing was launched."""


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def plan(cfg: ExperimentConfig, base_dir: Path | None) -> Schedule:
    """Everything checkable before Ray and engines: trace, model path, lengths against the context."""
    try:
        schedule = build_schedule(cfg.workload, base_dir)
    except TraceFormatError as e:
        raise RunError(f"trace: {e}") from None
    path = cfg.model.path
    if path is not None and (path.startswith(("/", ".", "~")) or os.sep in path and Path(path).exists()):
        p = Path(path).expanduser()
        if not (p / "config.json").is_file():
            raise RunError(f"model.path: {p} is not a model directory (no config.json)")
    too_long = [r for r in schedule.requests if r.prompt_tokens + r.max_tokens > cfg.model.max_model_len]
    if too_long:
        r = too_long[0]
        raise RunError(
            f"workload: {len(too_long)} request(s) need more than model.max_model_len={cfg.model.max_model_len} "
            f"tokens (first: #{r.index}, {r.prompt_tokens} prompt + {r.max_tokens} output); lower "
            "workload.input_scale/output_scale, set workload.max_input_tokens/max_output_tokens, or set "
            "workload.max_model_len to clip to the context (clips are counted in the result)"
        )
    return schedule


def connect_ray(cfg: ExperimentConfig) -> bool:
    """Join the configured cluster (or the job's), else start a private local one. True if we started it."""
    address = cfg.ray_address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        return False
    ray.init(address="local", include_dashboard=cfg.metrics.ray_dashboard, logging_level=logging.WARNING)
    return True


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


class Driver:
    def __init__(self, cfg: ExperimentConfig, base_dir: Path | None, command: list[str]) -> None:
        self.cfg, self.base_dir, self.command = cfg, base_dir, command
        self.run_id = f"{cfg.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:6]}"
        self.run_dir = (cfg.output_dir / self.run_id).resolve()
        self.started_at = _utc_now()
        self.progress: Progress = make_progress(cfg.rounds)
        self.metrics = RunMetrics(cfg, self.run_id)

    def _write_inputs(self, schedule: Schedule) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False))
        env = {"driver": node_environment()}
        (self.run_dir / "environment.json").write_text(json.dumps(env, indent=2))
        (self.run_dir / "schedule.json").write_text(schedule.model_dump_json(indent=1))
        return env

    def run(self) -> RunResult:
        """Plan, run every arm, stop every engine whatever happens, and write result.json."""
        schedule = plan(self.cfg, self.base_dir)
        started_ray = connect_ray(self.cfg)
        runners: list[ArmRunner] = []
        env: dict[str, Any] = {}
        interrupted = False
        try:
            device = resolve_device(self.cfg)
            check_platform(self.cfg, device)
            env = self._write_inputs(schedule)
            self._start_metrics()
            runners = self._runners(schedule, device)
            self._run_arms(runners)
        except KeyboardInterrupt:
            interrupted = True
            logger.info("\ninterrupted: stopping engines and releasing placement groups")
        finally:
            for r in runners:
                self._stop(r)
            self.progress.close()
            self._stop_metrics()
        result = self._result(schedule, runners, env, interrupted)
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
        runners = [
            ArmRunner(
                self.cfg, arm, device, self.run_dir, schedule.requests, self.progress.advance, self.metrics.observe
            )
            for arm in self.cfg.arms
        ]
        for r in runners:
            for note in r.notes:
                logger.info("note: arm %s: %s", r.arm.name, note)
        return runners

    def _run_arms(self, runners: list[ArmRunner]) -> None:
        if self.cfg.placement == "parallel":
            self._run_parallel(runners)
        else:
            self._run_interleaved(runners)

    # --- Prometheus (dashboards/README.md) -------------------------------------------------------
    def _start_metrics(self) -> None:
        self.metrics.start()

    def _stop_metrics(self) -> None:
        self.metrics.stop()

    # --- arms ------------------------------------------------------------------------------------
    def _stop(self, r: ArmRunner) -> None:
        r.stop()
        self.metrics.engine_down(r.arm.name)

    def _start(self, r: ArmRunner, round_index: int) -> bool:
        logger.info("arm %s: round %d: starting engine (%s)", r.arm.name, round_index, r.flags.describe())
        if not r.start():
            logger.error("arm %s: FAILED to start: %s", r.arm.name, r.failure[0] if r.failure else "")
            self._stop(r)
            return False
        assert r.info is not None
        self.metrics.engine_up(r.arm.name, r.info.url, r.info.node_id)
        logger.info("arm %s: engine healthy at %s after %.1f s", r.arm.name, r.info.url, r.info.startup_s)
        return True

    @contextlib.contextmanager
    def _round_of(self, arms: list[ArmRunner], round_index: int) -> Iterator[None]:
        """Progress and the 'arm active' metric around one round of ``arms`` (all of them at once if parallel)."""
        for position, r in enumerate(arms):
            self.progress.begin(r.arm.name, round_index, len(r.requests), position)
        for r in arms:
            self.metrics.arm_active(r.arm.name, round_index, True)
        try:
            yield
        finally:
            for r in arms:
                self.metrics.arm_active(r.arm.name, round_index, False)
        for r in arms:  # on Ctrl-C, run() closes what is still open
            self.progress.end(r.arm.name)

    def _run_interleaved(self, runners: list[ArmRunner]) -> None:
        """A B B A ...: each arm gets the same resources in turn; alternating order cancels linear drift."""
        for round_index in range(self.cfg.rounds):
            order = runners if round_index % 2 == 0 else runners[::-1]
            for r in order:
                if r.failed or not self._start(r, round_index):
                    continue
                with self._round_of([r], round_index):
                    r.replay(round_index, time.time() + START_DELAY_S)
                self._stop(r)

    def _run_parallel(self, runners: list[ArmRunner]) -> None:
        """All arms at once, each on its own resources, from one common start per round."""
        started = [r for r in runners if self._start(r, 0)]
        for round_index in range(self.cfg.rounds):
            live = [r for r in started if not r.failed and (round_index == 0 or r.between_rounds())]
            with self._round_of(live, round_index):
                start = time.time() + START_DELAY_S
                run_in_threads([functools.partial(r.replay, round_index, start) for r in live])

    def _result(
        self, schedule: Schedule, runners: list[ArmRunner], env: dict[str, object], interrupted: bool
    ) -> RunResult:
        arms = [r.result(interrupted) for r in runners]
        notes = [f"arm {r.arm.name}: {n}" for r in runners for n in r.notes]
        if schedule.clipped_input or schedule.clipped_output:
            notes.append(
                f"clipped to the engine: {schedule.clipped_input} prompt(s), {schedule.clipped_output} output(s)"
            )
        status = "interrupted" if interrupted else ("ok" if arms and all(a.status == "ok" for a in arms) else "failed")
        return RunResult(
            run_id=self.run_id,
            experiment=self.cfg.name,
            status=status,
            started_at=self.started_at,
            finished_at=_utc_now(),
            command=self.command,
            config=self.cfg,
            environment=env,
            schedule=ScheduleInfo(
                requests=len(schedule.requests),
                duration_s=schedule.duration_s,
                clipped_input=schedule.clipped_input,
                clipped_output=schedule.clipped_output,
                clipped_context=schedule.clipped_context,
                skipped=schedule.skipped,
            ),
            arms=arms,
            notes=notes,
        )


__all__ = ["Driver", "RunError", "ConfigError", "plan", "connect_ray", "resolve_device"]
