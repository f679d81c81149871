"""``moeperf combine RUN... --out DIR``: one result from runs of one experiment made in separate stretches.

A design with power for 1-5% effects needs many engine pairs (6 interleaved rounds and an A/A control,
``bench/README.md``), and a GPU hold can be too short for them: a 48-layer engine takes 70-110 s to start
warm, so one 30-minute hold fits about two rounds of three arms. The rounds are then spread over holds,
each run continuing where the last stopped (``first_round``), and this pools them. Why pooling is sound:
with interleaved placement every round starts a fresh engine per arm, so a round is an engine pair
whichever hold it ran in; the analysis takes the engine-instance variance from the spread of those pairs
(and from the A/A control's) and a hold-to-hold shift that hits both arms of a round cancels in their
ratio. What cannot be pooled is refused: a different experiment (any setting but the name of the run,
its output folder, its rounds and how its JIT cache was warmed), rounds that overlap (their prompts
would repeat), or placement ``parallel`` (its engines stay up across a run's rounds, which the analysis
takes as one pair).

The combined folder holds a ``result.json`` like a run's (records concatenated per arm and sealed anew,
counts and per-level summaries recomputed, window metrics and compile counts summed, per-round step times and
compile events kept with their rounds, each source run named
in the notes and in ``environment.combined_from``), ``config.yaml`` and ``environment.json``, so
``moeperf report`` renders it as one run of all the rounds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from cluster.orchestration.arm_records import RecordsOutcome
from cluster.orchestration.level_subset import keep_levels
from experiment.config import ConfigError, ExperimentConfig
from result_format.records_store import JOURNAL_SUFFIX, write_sealed
from result_format.run_result import ArmResult, ExpertLoad, LevelResult, RunResult, load_run
from workloads.metrics import summarize_level
from workloads.record_columns import RecordColumns

# Settings that may differ between the runs pooled: where a run was written, which of its rounds it ran and in
# what time.
PER_RUN_FIELDS = frozenset({"output_dir", "ray_address", "rounds", "first_round", "time_budget_s", "steady_state"})
# steady_state says which requests the verdicts judge, not what ran: the pooled result takes the last part's
# (the experiment file as it stood when the newest hold ran), and `moeperf report --steady-state` overrides it.
# And how a run's shared JIT cache was warmed: a warm-up pass (shared_warm, of some length) or a seed from an
# earlier run (seeded). Either way every measured engine starts warm, and the compiles each measured window
# counts show where one did not.
WARMING_FIELDS = ("engine.jit_cache_seed", "engine.warmup_pass_fraction")


def _comparable(cfg: ExperimentConfig) -> dict[str, Any]:
    """The config as JSON, without what may differ between the runs pooled."""
    data = cfg.model_dump(mode="json", exclude=set(PER_RUN_FIELDS))
    engine = data["engine"]
    for field in WARMING_FIELDS:
        engine.pop(field.split(".", 1)[1], None)
    if engine.get("cache_state") == "seeded":
        engine["cache_state"] = "shared_warm"
    return data


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted names of the settings where two configs (as JSON) differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if a == b else [path or "(the whole config)"]


def check_poolable(runs: Sequence[RunResult], names: Sequence[str]) -> None:
    """Raise ``ConfigError`` naming the run and the setting when ``runs`` are not one experiment's rounds."""
    if len(runs) < 2:
        raise ConfigError("combine needs two runs or more")
    first = _comparable(runs[0].config)
    for run, name in zip(runs[1:], names[1:], strict=True):
        diff = _differences(first, _comparable(run.config))
        if diff:
            raise ConfigError(
                f"{name}: not the same experiment as {names[0]}: {', '.join(diff)} differ(s); only "
                f"{', '.join(sorted(PER_RUN_FIELDS))} and how the JIT cache was warmed (cache_state shared_warm "
                f"or seeded, {', '.join(WARMING_FIELDS)}) may"
            )
    if runs[0].config.placement != "interleaved":
        raise ConfigError(
            f"{names[0]}: placement {runs[0].config.placement}: only interleaved runs pool (a parallel run's engines "
            "stay up across its rounds, which the analysis takes as one engine pair)"
        )
    seen: dict[int, str] = {}
    for run, name in zip(runs, names, strict=True):
        for rnd in sorted({r for arm in run.arms for r in arm.columns.rounds()}):
            if rnd in seen:
                raise ConfigError(
                    f"{name}: round {rnd} is also in {seen[rnd]}; give each stretch its own rounds "
                    f"(--first_round N, where N is the first round not run yet)"
                )
            seen[rnd] = name
        arms = [a.name for a in run.arms]
        if arms != [a.name for a in runs[0].arms]:
            raise ConfigError(f"{name}: arms {arms} are not those of {names[0]}")


def _sum_metrics(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in parts:
        for k, v in p.items():
            out[k] = out.get(k, 0.0) + v
    return dict(sorted(out.items()))


def _merge_by_round(parts: Sequence[ArmResult], names: Sequence[str]) -> dict[int, dict[str, float]]:
    """Every part's per-round step times under its own round; ``ConfigError`` when two parts hold the same round
    of an arm (the records' rounds were checked disjoint, but the engine's windows are another record of them)."""
    out: dict[int, dict[str, float]] = {}
    seen: dict[int, str] = {}
    for part, name in zip(parts, names, strict=True):
        for rnd, metrics in part.window_metrics_by_round.items():
            if rnd in seen:
                raise ConfigError(
                    f"{name}: arm {part.name}: the engine step times of round {rnd} are also in {seen[rnd]}; a round "
                    "is one engine pair and cannot be pooled twice"
                )
            seen[rnd] = name
            out[rnd] = dict(metrics)
    return dict(sorted(out.items()))


def _sum_expert_load(parts: Sequence[Sequence[ExpertLoad]]) -> list[ExpertLoad]:
    """Tokens per expert of every part's window added per layer (a part without them adds nothing)."""
    out: dict[int, list[int]] = {}
    for p in parts:
        for load in p:
            acc = out.setdefault(load.layer, [])
            acc.extend([0] * (len(load.tokens) - len(acc)))
            for e, n in enumerate(load.tokens):
                acc[e] += n
    return [ExpertLoad(layer=layer, tokens=tokens) for layer, tokens in sorted(out.items())]


def _levels(cfg: ExperimentConfig, template: Sequence[LevelResult], cols: RecordColumns) -> list[LevelResult]:
    """Per-level results of the pooled records, summarised as the driver summarises one run's (per-round
    counts are the same in every run of one experiment)."""
    return [lv.model_copy(update={"summary": summarize_level(cols, lv.index, cfg.slo)}) for lv in template]


def _combine_arm(
    cfg: ExperimentConfig, parts: Sequence[ArmResult], by_round: dict[int, dict[str, float]], out_dir: Path
) -> ArmResult:
    cols = RecordColumns.concat([p.columns for p in parts])
    sealed = write_sealed(out_dir / "records" / f"{parts[0].name}{JOURNAL_SUFFIX}", cols)
    outcome = RecordsOutcome.of(sealed, cols, out_dir, cfg.slo, cfg.client.max_dispatch_lag_p99_ms)
    failed = [p for p in parts if p.status != "ok"]
    compiles = [p.triton_compiles_in_window for p in parts]
    planned = sum(p.requests_planned for p in parts)
    first = parts[0]
    return ArmResult(
        name=first.name,
        control_of=first.control_of,
        flags=first.flags,
        flags_applied=all(p.flags_applied for p in parts),
        notes=[n for p in parts for n in p.notes if n not in first.notes] + list(first.notes),
        status="failed" if failed else "ok",
        failure_reason="; ".join(f"{p.failure_reason}" for p in failed) or None,
        engine=first.engine,
        engine_log_tail=next((p.engine_log_tail for p in failed if p.engine_log_tail), None),
        requests_planned=planned,
        requests_not_sent=max(0, planned - outcome.sent),
        rounds=sum(p.rounds for p in parts),
        shards=[s for p in parts for s in p.shards],
        client_health=[h for p in parts for h in p.client_health],
        window_metrics=_sum_metrics([p.window_metrics for p in parts]),
        window_metrics_by_round=by_round,
        expert_load=_sum_expert_load([p.expert_load for p in parts]),
        triton_compiles_in_window=None if any(c is None for c in compiles) else sum(c or 0 for c in compiles),
        compile_events=[e for p in parts for e in p.compile_events],
        levels=_levels(cfg, first.levels, cols),
        observed=first.observed,
        **outcome.fields,
    ).with_columns(cols)


def combine(run_paths: Sequence[Path], out_dir: Path, command: list[str], levels: Sequence[str] = ()) -> RunResult:
    """Pool the runs at ``run_paths`` into ``out_dir`` (created; must hold no result), each first cut to the sweep
    levels named ``levels`` when some are (``level_subset``); ``ConfigError`` on bad input."""
    names = [str(p) for p in run_paths]
    runs = []
    for path in run_paths:
        try:
            run = load_run(path)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{path}: not a run moeperf can read: {e}") from None
        runs.append(keep_levels(run, path if path.is_dir() else path.parent, levels) if levels else run)
    check_poolable(runs, names)
    by_round = {a.name: _merge_by_round([r.arm(a.name) for r in runs], names) for a in runs[0].arms}
    if (out_dir / "result.json").exists():
        raise ConfigError(f"{out_dir / 'result.json'} exists: combine into a new folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    first = runs[0]
    rounds = sum(r.config.rounds for r in runs)
    cfg = first.config.model_copy(
        update={
            "rounds": rounds,
            "first_round": min(r.config.first_round for r in runs),
            "steady_state": runs[-1].config.steady_state,
        }
    )
    arms = [_combine_arm(cfg, [r.arm(a.name) for r in runs], by_round[a.name], out_dir) for a in first.arms]
    sources = [
        {
            "run_id": r.run_id,
            "first_round": r.config.first_round,
            "rounds": r.config.rounds,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "status": r.status,
            "environment": r.environment,
        }
        for r in runs
    ]
    spans = [f"{r.run_id} (rounds {r.config.first_round}-{r.config.first_round + r.config.rounds - 1})" for r in runs]
    notes = [
        f"combined by moeperf combine from {'; '.join(spans)}: every round is an engine pair of its own "
        "(interleaved), pooled as one run's"
    ] + [f"{r.run_id}: {n}" for r in runs for n in r.notes]
    result = RunResult(
        run_id=out_dir.name,
        experiment=first.experiment,
        # An interrupted run whose arms are all ok is one ``moeperf recover --whole_rounds`` cut to its whole rounds.
        status="ok" if all(a.status == "ok" for a in arms) and all(r.status != "failed" for r in runs) else "failed",
        started_at=min(r.started_at for r in runs),
        finished_at=max(r.finished_at for r in runs),
        command=command,
        config=cfg,
        environment={**first.environment, "combined_from": sources},
        schedule=first.schedule,
        arms=arms,
        notes=notes,
        error="; ".join(f"{r.run_id}: {r.error}" for r in runs if r.error) or None,
        warmup_pass=[w for r in runs for w in r.warmup_pass],
        turns=[t for r in runs for t in r.turns],
    )
    (out_dir / "result.json").write_text(result.model_dump_json(indent=1))
    (out_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    (out_dir / "environment.json").write_text(json.dumps(result.environment, indent=1))
    return result
