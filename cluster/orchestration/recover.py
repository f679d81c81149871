"""``moeperf recover runs/<id>``: a valid ``result.json`` for a run whose driver died without writing one.

A driver that is SIGKILLed (the OOM killer, a node lost, ``kill -9``) cannot write its result, but it wrote
its inputs before the first engine started (``config.yaml``, ``environment.json``, ``schedule.parquet``; an
older run folder's ``schedule.json`` reads too) and
appended every finished record to its arm's journal (``records/<arm>.arrows``) as it arrived. That is
enough for the analysis and the reports: each journal sealed into Parquet, each arm's records summarised as
the driver would have, under status ``interrupted``. What died with the driver is said in the result's
notes: engine details, shards, client health, window metrics and per-level results. A last batch cut by
the kill is dropped and said, never fatal.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cluster.orchestration.arm_records import RecordsOutcome, seal_found
from cluster.orchestration.driver import schedule_info
from experiment.config import ConfigError, ExperimentConfig
from result_format.records_store import JOURNAL_SUFFIX
from result_format.run_result import ArmResult, RunResult
from workloads.schedule_columns import SCHEDULE_FILE
from workloads.schedule_file import ScheduleFileError, read_schedule, schedule_file
from workloads.workload import Schedule

RECOVERED_ERROR = "the driver ended without writing its result; rebuilt from records/ by moeperf recover"


def _iso(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, UTC).isoformat()


def _inputs(run_dir: Path) -> tuple[ExperimentConfig, dict[str, Any], Schedule]:
    missing = [] if (run_dir / "config.yaml").exists() else ["config.yaml"]
    if schedule_file(run_dir) is None:
        missing.append(SCHEDULE_FILE)
    if missing:
        raise ConfigError(f"{run_dir}: not a run folder moeperf can recover (missing {', '.join(missing)})")
    try:
        cfg = ExperimentConfig.model_validate(yaml.safe_load((run_dir / "config.yaml").read_text()))
        schedule = read_schedule(run_dir)
    except (ValidationError, yaml.YAMLError, ScheduleFileError) as e:
        raise ConfigError(f"{run_dir}: its saved inputs cannot be read: {e}") from None
    env_path = run_dir / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.exists() else {}
    return cfg, env, schedule


def recover_result(run_dir: Path, command: list[str]) -> RunResult:
    """The run's result as far as its files tell; raises ``ConfigError`` if they are not a run's."""
    cfg, env, schedule = _inputs(run_dir)
    records_dir = run_dir / "records"
    notes = [
        "recovered: engine details, client shards and health, window metrics and per-level results died with "
        "the driver; the records below are every one it had written"
    ]
    arms, last_write_s = [], (run_dir / "config.yaml").stat().st_mtime
    planned = len(schedule.requests) * max(1, cfg.rounds)
    for arm in cfg.arms:
        journal = records_dir / f"{arm.name}{JOURNAL_SUFFIX}"
        if journal.exists():
            last_write_s = max(last_write_s, journal.stat().st_mtime)
        sealed, records = seal_found(records_dir, arm.name)
        if sealed.torn_tail:
            notes.append(f"arm {arm.name}: the last batch of records was cut by the driver's end and is dropped")
        outcome = RecordsOutcome.of(sealed, records, run_dir, cfg.slo, cfg.client.max_dispatch_lag_p99_ms)
        arms.append(
            ArmResult(
                name=arm.name,
                control_of=arm.control_of,
                flags=cfg.arm_flags(arm),
                flags_applied=False,
                status="failed",
                failure_reason="interrupted: the driver ended mid-run (recovered)",
                requests_planned=planned,
                requests_not_sent=max(0, planned - outcome.sent),
                rounds=len(records.rounds()),
                **outcome.fields,
            ).with_columns(records)
        )
    return RunResult(
        run_id=run_dir.name,
        experiment=cfg.name,
        status="interrupted",
        started_at=_iso((run_dir / "config.yaml").stat().st_mtime),
        finished_at=_iso(last_write_s),
        command=command,
        config=cfg,
        environment=env,
        schedule=schedule_info(schedule, requests=len(schedule.requests), duration_s=schedule.duration_s),
        arms=arms,
        notes=notes,
        error=RECOVERED_ERROR,
    )


def recover(run_dir: Path, command: list[str], overwrite: bool = False) -> RunResult:
    """Write ``run_dir/result.json``; an existing one (the driver did write it) is kept unless ``overwrite``."""
    target = run_dir / "result.json"
    if target.exists() and not overwrite:
        raise ConfigError(f"{target} exists: the run has its result (pass --force to rebuild it from records/)")
    result = recover_result(run_dir, command)
    target.write_text(result.model_dump_json(indent=1))
    return result
