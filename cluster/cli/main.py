"""``moeperf``: the command line. It only wires commands to the parts; the logic lives elsewhere.

What a command prints is its output (a verdict, a table, the result path; errors on stderr) and
shows whatever the verbosity; what a run is doing meanwhile is logging, set up by ``log_setup``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cluster.cli.from_model import add_model_options, collect_overrides
from cluster.cli.loading import (
    EXIT_ARM_FAILED,
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    load_experiment,
    sigterm_as_interrupt,
)
from cluster.cli.log_setup import add_verbosity_options, setup_logging
from experiment.config import ConfigError, ExperimentConfig


def cmd_run(ns: argparse.Namespace) -> int:
    from cluster.cli.run_summary import print_result
    from cluster.orchestration.driver import Driver, RunError

    setup_logging(ns.log_level)
    sigterm_as_interrupt()
    try:
        cfg, base_dir = load_experiment(ns.experiment, collect_overrides(ns))
        driver = Driver(cfg, base_dir, [Path(sys.argv[0]).name, *sys.argv[1:]])
        result = driver.run()  # once anything started, every exception ends as a written result
    except (ConfigError, RunError) as e:
        print(f"moeperf: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # before anything started: nothing to stop, nothing to write
        print("moeperf: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    print_result(result, driver.run_dir)
    if result.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if result.status == "ok" else EXIT_ARM_FAILED


def cmd_validate(ns: argparse.Namespace) -> int:
    from cluster.orchestration.driver import RunError, plan
    from workloads.schedule_stats import schedule_line

    setup_logging(ns.log_level)
    bad = 0
    for f in ns.files:
        try:
            cfg, base_dir = load_experiment(f, {})
            schedule = plan(cfg, base_dir)  # columns, read from the trace as a stream: no object per request
            print(f"{f}: ok ({len(cfg.arms)} arms, {schedule_line(schedule)})")
        except (ConfigError, RunError) as e:
            print(f"moeperf: {e}", file=sys.stderr)
            bad += 1
    return EXIT_BAD_INPUT if bad else EXIT_OK


def cmd_plan(ns: argparse.Namespace) -> int:
    """Exit 0 when every arm fits the cluster now, 2 (refused) when one cannot."""
    import ray

    from cluster.orchestration.driver import RunError, connect_ray, plan, resolve_device
    from cluster.placement.plan import cluster_nodes, make_plan, peak_rate_rps, render

    setup_logging(ns.log_level)
    try:
        cfg, base_dir = load_experiment(ns.experiment, collect_overrides(ns))
        schedule = plan(cfg, base_dir)
    except (ConfigError, RunError) as e:
        print(f"moeperf: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    started = connect_ray(cfg)
    try:
        device = resolve_device(cfg)
        nodes = cluster_nodes()
        plans = make_plan(cfg, device, nodes)
        print(render(cfg, device, nodes, plans, peak_rate_rps(schedule.requests)))
    finally:
        if started:
            ray.shutdown()
    if any(p.missing for p in plans):
        print("moeperf: plan refused: at least one arm cannot be placed on this cluster", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def cmd_schema(ns: argparse.Namespace) -> int:
    from experiment.schemas import write_schemas

    for path in write_schemas(Path(ns.out)):
        print(path)
    return EXIT_OK


def cmd_recover(ns: argparse.Namespace) -> int:
    from cluster.orchestration.recover import recover

    try:
        command = ["moeperf", "recover", *sys.argv[2:]]
        result = recover(Path(ns.run_dir), command, overwrite=ns.force, keep_whole_rounds=ns.whole_rounds)
    except ConfigError as e:
        print(f"moeperf: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    kept = ", ".join(f"{a.name} {a.records_count}" for a in result.arms)
    print(f"recovered {Path(ns.run_dir) / 'result.json'} (status {result.status}); records per arm: {kept}")
    if ns.whole_rounds:
        first, last = result.config.first_round, result.config.first_round + result.config.rounds - 1
        print(
            f"round(s) {first}{'' if last == first else f'-{last}'} kept, every arm ok over them; continue with "
            f"--first_round {last + 1} and pool with moeperf combine"
        )
    return EXIT_OK


def cmd_combine(ns: argparse.Namespace) -> int:
    from cluster.orchestration.combine import combine

    try:
        levels = [lab.strip() for lab in ns.levels.split(",") if lab.strip()] if ns.levels is not None else []
        if ns.levels is not None and not levels:
            raise ConfigError(f"--levels {ns.levels!r} names no level; give labels as the report names them (c=1,c=4)")
        result = combine([Path(r) for r in ns.runs], Path(ns.out), ["moeperf", "combine", *sys.argv[2:]], levels)
    except ConfigError as e:
        print(f"moeperf: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    rounds = ", ".join(f"{a.name} {a.rounds}" for a in result.arms)
    print(
        f"combined {len(ns.runs)} runs into {Path(ns.out) / 'result.json'} (status {result.status}); rounds per arm: "
        f"{rounds}; render it with: moeperf report {ns.out}"
    )
    return EXIT_OK


def cmd_repack(ns: argparse.Namespace) -> int:
    from result_format.repack import RepackError, repack_run

    before = after = 0
    try:
        for run_dir in ns.run_dirs:
            for f in repack_run(Path(run_dir)):
                before, after = before + f.bytes_before, after + f.bytes_after
                print(f"{f.path}: {f.bytes_before} -> {f.bytes_after} bytes")
    except RepackError as e:
        print(f"moeperf: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"records: {before} -> {after} bytes")
    return EXIT_OK


def cmd_show_default(ns: argparse.Namespace) -> int:
    import yaml

    print(yaml.safe_dump(ExperimentConfig().model_dump(mode="json"), sort_keys=False), end="")
    return EXIT_OK


DELEGATED = {
    # command: (module, help). Each module has main(argv: list[str]) -> int and owns its own options.
    "trace": ("workloads.trace_cli", "Inspect traces before replaying them: moeperf trace stats FILE --kind KIND."),
    "report": ("analysis.report_cli", "Render the report of a saved run: moeperf report runs/<id>."),
    "nightly": ("cluster.cli.nightly", "Run the nightly experiment and gate on regressions against history."),
    "dashboards": ("dashboards.cli", "Grafana dashboards as code: moeperf dashboards build."),
    "tune": ("moe_opt.tune.cli", "Tune vLLM's Triton MoE kernel for one shape on a GPU: moeperf tune --help."),
}


def _delegate(module: str) -> Any:
    def run(ns: argparse.Namespace) -> int:
        import importlib

        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            print(f"moeperf: this command is not available yet ({e})", file=sys.stderr)
            return EXIT_BAD_INPUT
        return int(mod.main(ns.args))

    return run


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moeperf", description="A/B load tests of MoE kernel optimizations on vLLM.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="Run an experiment (no file: the embedded CPU default).")
    run.add_argument("experiment", nargs="?", help="Experiment YAML; omit for the embedded default.")
    add_verbosity_options(run)
    add_model_options(run, ExperimentConfig)
    run.set_defaults(func=cmd_run)
    pln = sub.add_parser("plan", help="Show where arms and client actors would go on the current cluster.")
    pln.add_argument("experiment", nargs="?", help="Experiment YAML; omit for the embedded default.")
    add_verbosity_options(pln)
    add_model_options(pln, ExperimentConfig)
    pln.set_defaults(func=cmd_plan)
    val = sub.add_parser("validate", help="Check experiment files (config, trace, lengths) without running.")
    val.add_argument("files", nargs="+")
    add_verbosity_options(val)
    val.set_defaults(func=cmd_validate)
    sch = sub.add_parser("schema", help="Write the JSON Schemas of the experiment and result files.")
    sch.add_argument("--out", default="docs")
    sch.set_defaults(func=cmd_schema)
    rec = sub.add_parser(
        "recover", help="Rebuild result.json of a run whose driver died (from records/ and the saved inputs)."
    )
    rec.add_argument("run_dir", help="The run folder, runs/<id>.")
    rec.add_argument(
        "--force",
        action="store_true",
        help="Rebuild even if result.json exists; its start and end times are kept (a checkout resets the files').",
    )
    rec.add_argument(
        "--whole_rounds",
        action="store_true",
        help="Keep only the rounds every arm finished, as a result whose arms are ok (the analysis compares them "
        "and moeperf combine pools them); the records of later rounds go to records/<arm>.after-whole-rounds.parquet.",
    )
    rec.set_defaults(func=cmd_recover)
    comb = sub.add_parser(
        "combine",
        help="Pool runs of one experiment made in separate stretches of machine time (each with its own "
        "--first_round) into one result of all their rounds.",
    )
    comb.add_argument("runs", nargs="+", help="Run folders (runs/<id>) or their result.json, two or more.")
    comb.add_argument("--out", required=True, help="New folder for the combined result.")
    comb.add_argument(
        "--levels",
        help="Sweep levels to keep, comma-separated as the report names them (c=1,c=4): each run is cut to them "
        "and to the rounds every arm finished there, so a round a hold lost part-way counts at the levels all its "
        "arms served (a recovered run needs no --whole_rounds then).",
    )
    comb.set_defaults(func=cmd_combine)
    rp = sub.add_parser(
        "repack",
        help="Rewrite saved runs' records in the current, smaller Parquet layout (lossless: each file is replaced "
        "only if it reads back as the same table; the checksums in the run's JSON files follow).",
    )
    rp.add_argument("run_dirs", nargs="+", help="Run folders (runs/<id>).")
    rp.set_defaults(func=cmd_repack)
    dflt = sub.add_parser("default", help="Print the embedded default experiment as YAML.")
    dflt.set_defaults(func=cmd_show_default)
    for name, (module, help_text) in DELEGATED.items():
        d = sub.add_parser(name, help=help_text, add_help=False)
        d.add_argument("args", nargs=argparse.REMAINDER)
        d.set_defaults(func=_delegate(module))
    return p


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in DELEGATED:  # argparse.REMAINDER drops leading options: hand over argv as is
        return int(_delegate(DELEGATED[args[0]][0])(argparse.Namespace(args=args[1:])))
    ns = build_parser().parse_args(args)
    return int(ns.func(ns))


if __name__ == "__main__":
    sys.exit(main())
