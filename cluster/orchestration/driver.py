"""The run driver: config in, result file out, with every engine stopped whatever happens."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ray
import yaml
from tqdm import tqdm

from analysis.slo import slo_from_config
from cluster.cli.table import arm_table
from cluster.engine.actor import Device
from cluster.observability.client_metrics import ClientMetrics, node_label
from cluster.observability.environment import node_environment
from cluster.observability.prom_targets import TargetsFile
from cluster.orchestration.arm_runner import ArmRunner
from experiment.config import ConfigError, ExperimentConfig
from result_format.run_result import RunResult, ScheduleInfo
from workloads.records import RequestRecord
from workloads.traces import TraceFormatError
from workloads.workload import Schedule, build_schedule

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
        self.bars: dict[str, tqdm] = {}
        self.bar_lock = threading.Lock()
        self.client_metrics: ClientMetrics | None = None
        self.engine_targets: TargetsFile | None = None
        self.client_targets: TargetsFile | None = None

    def _progress(self, arm: str, n: int) -> None:
        with self.bar_lock:
            self.bars[arm].update(n)

    def _write_inputs(self, schedule: Schedule) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False))
        env = {"driver": node_environment()}
        (self.run_dir / "environment.json").write_text(json.dumps(env, indent=2))
        (self.run_dir / "schedule.json").write_text(schedule.model_dump_json(indent=1))
        return env

    def run(self) -> RunResult:
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
            print(
                f"moeperf run {self.run_id}: {len(self.cfg.arms)} arm(s) on {device}, "
                f"{len(schedule.requests)} requests over {schedule.duration_s:.1f} s -> {self.run_dir}",
                flush=True,
            )
            runners = [
                ArmRunner(self.cfg, arm, device, self.run_dir, schedule.requests, self._progress, self._observe)
                for arm in self.cfg.arms
            ]
            for r in runners:
                for note in r.notes:
                    print(f"note: arm {r.arm.name}: {note}", flush=True)
            if self.cfg.placement == "parallel":
                self._run_parallel(runners)
            else:
                self._run_interleaved(runners)
        except KeyboardInterrupt:
            interrupted = True
            print("\ninterrupted: stopping engines and releasing placement groups", flush=True)
        finally:
            for r in runners:
                self._stop(r)
            for bar in self.bars.values():
                bar.close()
            self._stop_metrics()
        result = self._result(schedule, runners, env, interrupted)
        (self.run_dir / "result.json").write_text(result.model_dump_json(indent=1))
        if started_ray:
            ray.shutdown()
        return result

    # --- Prometheus (dashboards/README.md) -------------------------------------------------------
    def _start_metrics(self) -> None:
        m = self.cfg.metrics
        if not m.enabled:
            return
        host = ray.util.get_node_ip_address() if m.listen_host == "node-ip" else m.listen_host
        slo = slo_from_config(self.cfg.model_dump(mode="json"))
        try:
            self.client_metrics = ClientMetrics(self.run_id, self.cfg.name, slo)
            url = self.client_metrics.serve(host)
            self.client_targets = TargetsFile(m.targets_dir / f"client-{self.run_id}.json", self.run_id)
            self.client_targets.add_endpoint("driver", url, {})
            self.engine_targets = TargetsFile(m.targets_dir / f"engines-{self.run_id}.json", self.run_id)
        except OSError as e:  # an unwritable targets_dir or an unusable address must not cost the run
            print(f"warning: Prometheus export off for this run: {e}", flush=True)
            self._stop_metrics()
            return
        self.client_metrics.run_active(True)
        print(f"metrics: client metrics at {url}, Prometheus targets in {m.targets_dir}", flush=True)

    def _stop_metrics(self) -> None:
        if self.client_metrics is not None:
            self.client_metrics.run_active(False)
            self.client_metrics.wait_scraped(self.cfg.metrics.final_scrape_timeout_s)
            self.client_metrics.close()
        for t in (self.engine_targets, self.client_targets):
            if t is not None:
                t.close()
        self.client_metrics = self.engine_targets = self.client_targets = None

    def _observe(self, record: RequestRecord, client_node_id: str) -> None:
        if self.client_metrics is not None:
            self.client_metrics.observe(record, node=node_label(client_node_id))

    def _arm_active(self, r: ArmRunner, round_index: int, active: bool) -> None:
        if self.client_metrics is not None:
            self.client_metrics.arm_active(r.arm.name, round_index, active)

    def _stop(self, r: ArmRunner) -> None:
        r.stop()
        if self.engine_targets is not None:
            self.engine_targets.remove(r.arm.name)

    def _bar(self, r: ArmRunner, round_index: int, position: int = 0) -> tqdm:
        label = r.arm.name if self.cfg.rounds == 1 else f"{r.arm.name} r{round_index}"
        bar = tqdm(total=len(r.requests), desc=f"{label:>20}", unit="req", position=position, dynamic_ncols=True)
        self.bars[r.arm.name] = bar
        return bar

    def _start(self, r: ArmRunner, round_index: int) -> bool:
        print(f"arm {r.arm.name}: round {round_index}: starting engine ({r.flags.describe()})", flush=True)
        if not r.start():
            print(f"arm {r.arm.name}: FAILED to start: {r.failure[0] if r.failure else ''}", flush=True)
            self._stop(r)
            return False
        assert r.info is not None
        if self.engine_targets is not None:
            self.engine_targets.add(r.arm.name, r.info.url, {"node": node_label(r.info.node_id)})
        print(f"arm {r.arm.name}: engine healthy at {r.info.url} after {r.info.startup_s:.1f} s", flush=True)
        return True

    def _run_interleaved(self, runners: list[ArmRunner]) -> None:
        """A B B A ...: each arm gets the same resources in turn; alternating order cancels linear drift."""
        for round_index in range(self.cfg.rounds):
            order = runners if round_index % 2 == 0 else runners[::-1]
            for r in order:
                if r.failed or not self._start(r, round_index):
                    continue
                bar = self._bar(r, round_index)
                self._arm_active(r, round_index, True)
                try:
                    r.replay(round_index, time.time() + START_DELAY_S)
                finally:
                    self._arm_active(r, round_index, False)
                bar.close()
                self._stop(r)

    def _run_parallel(self, runners: list[ArmRunner]) -> None:
        started = [r for r in runners if self._start(r, 0)]
        for round_index in range(self.cfg.rounds):
            live = [r for r in started if not r.failed and (round_index == 0 or r.between_rounds())]
            bars = [self._bar(r, round_index, i) for i, r in enumerate(live)]
            start = time.time() + START_DELAY_S
            threads = [threading.Thread(target=r.replay, args=(round_index, start), daemon=True) for r in live]
            for r in live:
                self._arm_active(r, round_index, True)
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    while t.is_alive():
                        t.join(timeout=0.5)  # short joins keep Ctrl-C deliverable to the main thread
            finally:
                for r in live:
                    self._arm_active(r, round_index, False)
            for bar in bars:
                bar.close()

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
            config=self.cfg.model_dump(mode="json"),
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


def print_result(result: RunResult, run_dir: Path) -> None:
    print()
    print(arm_table(result))
    for note in result.notes:
        print(f"note: {note}")
    for a in result.arms:
        if a.status == "failed":
            print(f"arm {a.name} FAILED: {a.failure_reason}")
            if a.engine_log_tail:
                print("  engine log (last lines):")
                for line in a.engine_log_tail.strip().splitlines()[-15:]:
                    print(f"    {line}")
    print(f"\nresult: {run_dir / 'result.json'}  (status: {result.status})")


__all__ = ["Driver", "RunError", "ConfigError", "print_result", "plan"]
