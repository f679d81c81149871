"""`moeperf nightly` (also `python -m cluster.cli.nightly`): run the nightly experiment, then gate it.

Exit codes are the CI contract: 1 a regression held for the policy's consecutive nights, 0 no
regression (or too little history to judge), 2 the run itself failed (no night is stored then,
so a broken night never becomes part of the baseline).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.gate import gate_night
from analysis.markdown import nightly_markdown
from analysis.nightly import NightlyPolicy
from cluster.cli.from_model import add_model_options, apply_overrides, collect_overrides
from cluster.cli.loading import sigterm_as_interrupt
from cluster.cli.log_setup import add_verbosity_options, setup_logging
from experiment.config import ConfigError, ExperimentConfig, parse_experiment, read_yaml
from result_format.run_result import RunResult, attach_records


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moeperf nightly", description=__doc__)
    p.add_argument("--experiment", required=True, help="Experiment YAML, e.g. experiments/nightly.yaml.")
    p.add_argument("--history", required=True, help="Folder of past nights' summaries (read and appended).")
    p.add_argument("--out", default=None, help="Report folder; default: the run's own folder.")
    p.add_argument("--consecutive-nights", type=int, default=None, help="K nights in a row before failing.")
    p.add_argument("--baseline-nights", type=int, default=None, help="Baseline: median of the last N nights.")
    add_verbosity_options(p)
    add_model_options(p, ExperimentConfig)
    return p


def main(argv: list[str] | None = None) -> int:
    from cluster.orchestration.driver import Driver, RunError

    ns = build_parser().parse_args(argv)
    setup_logging(ns.log_level)
    sigterm_as_interrupt()
    policy_args = {"consecutive_nights": ns.consecutive_nights, "baseline_nights": ns.baseline_nights}
    policy = NightlyPolicy(**{k: v for k, v in policy_args.items() if v is not None})
    history = Path(ns.history)
    result: RunResult | None = None
    failure: str | None = None
    out = Path(ns.out) if ns.out else None
    try:
        path = Path(ns.experiment)
        cfg = parse_experiment(apply_overrides(read_yaml(path), collect_overrides(ns)), str(path))
        driver = Driver(cfg, path.resolve().parent, ["moeperf", "nightly", *(argv or sys.argv[1:])])
        # Where its records are: a report folder other than the run's then names them by path (analysis.gate).
        result = attach_records(driver.run(), driver.run_dir)
        out = out or driver.run_dir
        if result.status != "ok":
            failed = [f"{a.name}: {a.failure_reason}" for a in result.arms if a.status != "ok"]
            if result.error:
                failed.insert(0, f"driver: {result.error}")
            failure = f"run {result.status}: " + ("; ".join(failed) or "no arm completed")
    except (ConfigError, RunError) as e:
        failure = str(e)
    out = out or history / "failed-nights"
    verdict = gate_night(result, history, out, policy=policy, failure=failure)
    print("\n".join(nightly_markdown(verdict)))
    print(f"\nnightly: {verdict.status} (exit {verdict.exit_code}); report in {out}")
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
