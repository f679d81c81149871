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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from cluster.orchestration.arm_records import RecordsOutcome, seal_found
from cluster.orchestration.driver import plan_turns, schedule_info
from experiment.config import ConfigError, ExperimentConfig
from result_format.records_store import (
    JOURNAL_SUFFIX,
    PARQUET_SUFFIX,
    SealedRecords,
    read_columns,
    write_sealed,
)
from result_format.run_result import INTERRUPTED, ArmResult, LevelResult, RunResult, TurnRecord
from workloads.metrics import summarize_level
from workloads.record_columns import RecordColumns
from workloads.schedule_columns import SCHEDULE_FILE
from workloads.schedule_file import ScheduleFileError, read_schedule, schedule_file
from workloads.workload import Schedule

RECOVERED_ERROR = "the driver ended without writing its result; rebuilt from records/ by moeperf recover"
AFTER_WHOLE_ROUNDS = ".after-whole-rounds"


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


@dataclass(frozen=True)
class _Arm:
    """One arm's records as the dead driver left them."""

    sealed: SealedRecords
    records: RecordColumns


def whole_rounds(cfg: ExperimentConfig, per_round: int, records: list[RecordColumns]) -> list[int]:
    """The rounds, from ``first_round`` on, that every arm finished: each has a record of every planned request
    (a failed request is a record too; one never sent is not). Stops at the first round some arm did not finish,
    so what is kept is a prefix a later run continues with ``--first_round``."""
    out = []
    for rnd in range(cfg.first_round, cfg.first_round + max(1, cfg.rounds)):
        if per_round == 0 or any(int((cols.round == rnd).sum()) != per_round for cols in records):
            break
        out.append(rnd)
    return out


def level_plan(schedule: Schedule) -> list[tuple[int, int]]:
    """(requests, of which warm-up) per sweep level and round: the saved schedule is the levels in sweep order,
    each numbered from 0, so a level starts where ``index`` is 0."""
    starts = [int(i) for i in np.flatnonzero(schedule.requests.index == 0)] + [len(schedule.requests)]
    warmup = schedule.requests.warmup
    return [(b - a, int(warmup[a:b].sum())) for a, b in zip(starts[:-1], starts[1:], strict=True)]


def recovered_turns(cfg: ExperimentConfig, records: dict[str, RecordColumns]) -> list[TurnRecord]:
    """The measured turns the dead driver ran, in its order, without times: its plan (``driver.plan_turns``) up to
    the last turn whose arms wrote a record. The driver runs its turns one after another, so every turn before
    that one started too, even one whose engine wrote nothing.

    Why: each engine's place in its round (``analysis.places``) comes from the turns, and the middle engine of a
    round has been the slow one at c=64 in three holds; a recovered run without turns could not say which arm held
    which place, in itself or pooled. Warm-up turns are left out: they have no place in a round."""
    planned = [t for t in plan_turns(cfg) if t.kind == "measured"]
    started = [i for i, t in enumerate(planned) if all((records[n].round == t.round).any() for n in t.names)]
    return [
        TurnRecord(kind="measured", round=t.round, arms=list(t.names), started_at=None)
        for t in planned[: started[-1] + 1 if started else 0]
    ]


def _level_results(cfg: ExperimentConfig, schedule: Schedule, records: RecordColumns) -> list[LevelResult]:
    """Per sweep level, as the driver summarises them."""
    if cfg.sweep is None:
        return []
    plan = level_plan(schedule)
    return [
        LevelResult.of(i, spec, *plan[i], summarize_level(records, i, cfg.slo))
        for i, spec in enumerate(cfg.sweep.levels)
    ]


def _write_sealed(records_dir: Path, name: str, cols: RecordColumns) -> SealedRecords:
    return write_sealed(records_dir / f"{name}{JOURNAL_SUFFIX}", cols)


def _keep_rounds(records_dir: Path, name: str, records: RecordColumns, rounds: list[int]) -> tuple[_Arm, int]:
    """The arm's records file rewritten with ``rounds`` only; the rest sealed beside it (never deleted)."""
    kept = np.isin(records.round, rounds)
    rest = records.select(~kept)
    if len(rest):
        _write_sealed(records_dir, f"{name}{AFTER_WHOLE_ROUNDS}", rest)
    cols = records.select(kept)
    return _Arm(_write_sealed(records_dir, name, cols), cols), len(rest)


def recover_result(run_dir: Path, command: list[str], keep_whole_rounds: bool = False) -> RunResult:
    """The run's result as far as its files tell; raises ``ConfigError`` if they are not a run's, or, with
    ``keep_whole_rounds``, if no round was finished by every arm."""
    cfg, env, schedule = _inputs(run_dir)
    records_dir = run_dir / "records"
    notes = [
        "recovered: engine details, client shards and health, window metrics and per-level results died with "
        "the driver; the records below are every one it had written"
    ]
    found, last_write_s = {}, (run_dir / "config.yaml").stat().st_mtime
    for arm in cfg.arms:
        journal = records_dir / f"{arm.name}{JOURNAL_SUFFIX}"
        if journal.exists():
            last_write_s = max(last_write_s, journal.stat().st_mtime)
        sealed, records = seal_found(records_dir, arm.name)
        after = records_dir / f"{arm.name}{AFTER_WHOLE_ROUNDS}{PARQUET_SUFFIX}"
        if after.exists():  # an earlier recover --whole_rounds set these aside: every record counts again
            records = RecordColumns.concat([records, read_columns(after)])
            sealed = _write_sealed(records_dir, arm.name, records)
            after.unlink()
        if sealed.torn_tail:
            notes.append(f"arm {arm.name}: the last batch of records was cut by the driver's end and is dropped")
        found[arm.name] = _Arm(sealed, records)
    per_round = len(schedule.requests)
    rounds = whole_rounds(cfg, per_round, [a.records for a in found.values()])
    if keep_whole_rounds:
        if not rounds:
            counts = ", ".join(f"{n} {int((a.records.round == cfg.first_round).sum())}" for n, a in found.items())
            raise ConfigError(
                f"{run_dir}: no round was finished by every arm (round {cfg.first_round} needs {per_round} records "
                f"per arm; found {counts}); recover without --whole_rounds keeps every record, each arm failed"
            )
        for name, arm_found in list(found.items()):
            found[name], moved = _keep_rounds(records_dir, name, arm_found.records, rounds)
            if moved:
                notes.append(
                    f"arm {name}: {moved} record(s) of rounds after {rounds[-1]} (not finished by every arm) are in "
                    f"records/{name}{AFTER_WHOLE_ROUNDS}.parquet, out of the analysis"
                )
        notes[0] = (
            f"recovered with --whole_rounds: rounds {rounds[0]}-{rounds[-1]}, which every arm finished, are kept "
            "as the run's rounds; engine details, client shards and health, window metrics and the warm-up pass "
            "died with the driver"
        )
        cfg = cfg.model_copy(update={"rounds": len(rounds)})
    turns = recovered_turns(cfg, {name: a.records for name, a in found.items()})
    if turns:
        notes.append(
            "the turns are the run's plan up to the last engine that wrote a record; their times died with the driver"
        )
    arms = []
    for arm in cfg.arms:
        sealed, records = found[arm.name].sealed, found[arm.name].records
        planned = per_round * max(1, cfg.rounds)
        outcome = RecordsOutcome.of(sealed, records, run_dir, cfg.slo, cfg.client.max_dispatch_lag_p99_ms)
        arms.append(
            ArmResult(
                name=arm.name,
                control_of=arm.control_of,
                flags=cfg.arm_flags(arm),
                flags_applied=False,
                status="ok" if keep_whole_rounds else "failed",
                failure_reason=None if keep_whole_rounds else f"{INTERRUPTED}: the driver ended mid-run (recovered)",
                requests_planned=planned,
                requests_not_sent=max(0, planned - outcome.sent),
                rounds=len(records.rounds()),
                levels=_level_results(cfg, schedule, records) if keep_whole_rounds else [],
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
        turns=turns,
        notes=notes,
        error=RECOVERED_ERROR,
    )


def recover(run_dir: Path, command: list[str], overwrite: bool = False, keep_whole_rounds: bool = False) -> RunResult:
    """Write ``run_dir/result.json``; an existing one (the driver did write it) is kept unless ``overwrite``."""
    target = run_dir / "result.json"
    if target.exists() and not overwrite:
        raise ConfigError(f"{target} exists: the run has its result (pass --force to rebuild it from records/)")
    result = recover_result(run_dir, command, keep_whole_rounds)
    if target.exists():
        result = result.model_copy(update=_times_of(target))
    target.write_text(result.model_dump_json(indent=1))
    return result


def _times_of(replaced: Path) -> dict[str, str]:
    """The start and end times of the result ``--force`` replaces. Why: a rebuilt result dates the run by its
    files' modification times, which a git checkout or a copy resets; the replaced file's times were taken when
    they were still the run's. Nothing when that file cannot be read (which may be why it is being replaced)."""
    try:
        old = json.loads(replaced.read_text())
    except (OSError, ValueError):
        return {}
    return {k: old[k] for k in ("started_at", "finished_at") if isinstance(old, dict) and isinstance(old.get(k), str)}
