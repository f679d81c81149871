"""One call for the nightly driver: judge tonight against the history, write the report, store the night.

``cluster/cli/nightly.py`` runs the experiment and then calls :func:`gate_night`; everything after the
run is here so it can be rerun offline (``python -m analysis.gate``) on saved files. Tonight is judged
once into its summary, which both the verdict and the history get; only the report reads its records.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.history import add_to_history, load_history
from analysis.markdown import nightly_markdown
from analysis.night_summary import summarise_night
from analysis.nightly import NightlyPolicy, NightlyVerdict, judge_night, run_failed_verdict
from analysis.report import load_result, write_report
from result_format.run_result import RunResult


def _copy_for(result: RunResult, out_dir: Path) -> RunResult:
    """``result`` as ``out_dir/result.json`` must say it: each arm's ``records_file`` is relative to the file's
    folder, so an arm whose records were read from another run folder names them by absolute path there
    (``load_run`` of the copy then still finds them; the run folder's own file is left as the driver wrote it)."""
    arms = []
    for arm in result.arms:
        source = arm.records_source
        if source is not None and (out_dir / arm.records_file).resolve() != source.resolve():
            arm = arm.relocated(str(source.resolve()))
        arms.append(arm)
    return result.model_copy(update={"arms": arms})


def gate_night(
    result: RunResult | None,
    history_dir: Path,
    out_dir: Path,
    policy: NightlyPolicy | None = None,
    failure: str | None = None,
    store: bool = True,
) -> NightlyVerdict:
    """Judge; write report.{html,md}, analysis.json, nightly.json, result.json to ``out_dir``; store the night's
    summary in ``history_dir``.

    ``result`` None (the run produced no result file) or ``failure`` set gives the run-failed verdict
    (exit 2). Failed runs are never stored: they would poison the baseline.
    """
    policy = policy or NightlyPolicy()
    out_dir.mkdir(parents=True, exist_ok=True)
    tonight = None
    if result is None or failure is not None:
        verdict = run_failed_verdict(failure or "the run produced no result file", policy, result)
    else:
        history, skipped = load_history(history_dir, experiment=result.experiment, policy=policy)
        tonight = summarise_night(result, policy) if result.status == "ok" else None
        verdict = judge_night(result, history, policy, tonight=tonight)
        if skipped:
            verdict = verdict.model_copy(update={"notes": verdict.notes + [f"history: {s}" for s in skipped]})
    if result is not None:
        (out_dir / "result.json").write_text(_copy_for(result, out_dir).model_dump_json())
        write_report(result, out_dir, nightly=verdict)
        if store and tonight is not None and verdict.status != "run_failed":
            add_to_history(history_dir, tonight)
    else:
        (out_dir / "nightly.json").write_text(verdict.model_dump_json(indent=2))
        (out_dir / "report.md").write_text("\n".join(nightly_markdown(verdict)) + "\n")
    return verdict


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.gate", description="Gate a saved run against history.")
    p.add_argument("run", help="Run folder or result.json of tonight's run.")
    p.add_argument(
        "--history",
        required=True,
        help="History folder of past nights' summaries (full result files of old folders are read too).",
    )
    p.add_argument("--out", required=True, help="Where the report and nightly.json go.")
    p.add_argument("--no-store", action="store_true", help="Do not add the run to the history.")
    ns = p.parse_args(argv)
    try:
        result: RunResult | None = load_result(Path(ns.run))
        failure = None
    except (OSError, ValueError) as e:
        result, failure = None, f"cannot read {ns.run}: {str(e).splitlines()[0]}"
    verdict = gate_night(result, Path(ns.history), Path(ns.out), failure=failure, store=not ns.no_store)
    print("\n".join(nightly_markdown(verdict)))
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
