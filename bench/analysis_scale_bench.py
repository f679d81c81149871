"""How the records files and the analysis scale: 10k, 100k, 1M requests per arm.

Each size runs in a child process of its own: two arms (B's TPOT 3% lower) of two rounds each are built
as columns (no objects per request), written through the arm's journal and sealed into Parquet as a run
does; then a second process does what ``moeperf report`` does on a saved run, so its peak memory is the
report's alone (``VmHWM``; ``ru_maxrss`` would carry the writer's over, as Linux keeps a process's peak
across fork and exec): ``load_run``, the run's analysis (the two-level bootstrap with the settings' default
replicates) and both reports. Output tokens are 8-64 per request, so the token times
dominate the bytes.

    python3 -m bench.analysis_scale_bench --sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from workloads.record_columns import SCALAR_FIELDS, RecordColumns

HERE = Path(__file__).resolve().parent
RATE_RPS = 50.0


def _jittered(cols: RecordColumns, rng: np.random.Generator) -> RecordColumns:
    """Inter-token gaps that vary inside a request, as real ones do (evenly spaced tokens would merge into one
    value per request and make the ITL family as small as TTFT's)."""
    times, offsets = cols.token_times_s, cols.token_offsets
    gaps = np.diff(times, prepend=times[:1])
    gaps *= rng.lognormal(0, 0.3, gaps.size)
    gaps[offsets[:-1][np.diff(offsets) > 0]] = 0.0  # each request's first token stays where it was
    starts = np.repeat(times[offsets[:-1]], np.diff(offsets))
    seg = np.cumsum(gaps)
    seg -= np.repeat(seg[offsets[:-1]], np.diff(offsets))
    new = starts + seg
    end = new[offsets[1:] - 1]
    fields = {name: getattr(cols, name) for name in SCALAR_FIELDS}
    return RecordColumns.from_arrays({**fields, "end_s": end}, new, offsets)


def _one(size: int, work: Path) -> dict[str, object]:
    from analysis.synthetic import SyntheticArm, synthetic_run, timed_columns
    from result_format.records_store import RecordJournal, seal

    t0 = time.perf_counter()
    rng = np.random.default_rng(size)
    rounds, per_round = 2, size // 2
    skeleton = synthetic_run("scale", "2026-12-01T00:00:00+00:00", [SyntheticArm("A"), SyntheticArm("B")], 4,
                             rounds=rounds)  # fmt: skip
    gaps = rng.exponential(1 / RATE_RPS, per_round)
    send = np.cumsum(gaps) - gaps[0]
    tokens = rng.integers(8, 65, per_round)
    arms = []
    build_s = write_s = 0.0
    for arm, tpot_scale in (("A", 1.0), ("B", 0.97)):
        journal = RecordJournal(work / "records" / f"{arm}.arrows")
        for rnd in range(rounds):
            tb = time.perf_counter()
            ttft = 0.05 * rng.lognormal(0, 0.25, per_round)
            tpot = 0.01 * tpot_scale * rng.lognormal(0, 0.25, per_round)
            cols = _jittered(timed_columns(arm, rnd, send, ttft, tpot, tokens), rng)
            tw = time.perf_counter()
            build_s += tw - tb
            for lo in range(0, per_round, 50_000):  # batches as they reach the driver
                journal.append_columns(cols.select(np.arange(lo, min(lo + 50_000, per_round))))
            write_s += time.perf_counter() - tw
            del cols
        journal.close()
        tw = time.perf_counter()
        sealed = seal(journal.path)
        write_s += time.perf_counter() - tw
        base = skeleton.arm(arm)
        arms.append(base.model_copy(update={
            "records": [], "records_file": f"records/{arm}.parquet", "records_count": sealed.rows,
            "records_sha256": sealed.sha256, "requests_planned": size, "requests_sent": size,
            "requests_succeeded": size,
        }))  # fmt: skip
    result = skeleton.model_copy(update={"arms": arms, "schema_version": 3})
    (work / "result.json").write_text(result.model_dump_json())
    bytes_on_disk = sum(p.stat().st_size for p in (work / "records").glob("*.parquet"))
    rss_writer_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # The report runs in a process of its own, as `moeperf report` does: its peak memory is the analysis's alone.
    cmd = [sys.executable, "-m", "bench.analysis_scale_bench", "--report", str(work)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=HERE.parent)
    report = json.loads(r.stdout.strip().splitlines()[-1])
    return {
        "requests_per_arm": size,
        "arms": 2,
        "rounds": rounds,
        "token_times": int(tokens.sum()) * rounds * 2,
        "build_columns_s": round(build_s, 3),
        "journal_and_seal_s": round(write_s, 3),
        "bytes_on_disk": bytes_on_disk,
        "bytes_per_request": round(bytes_on_disk / (2 * size), 1),
        **report,
        "peak_rss_mb_writer": round(rss_writer_mb, 1),
        "total_s": round(time.perf_counter() - t0, 3),
    }


def _own_peak_rss_mb() -> float:
    """This process's own peak resident memory (``VmHWM``, of its address space since exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _report(work: Path) -> dict[str, object]:
    """``load_run`` and the report of a saved run, timed, with this process's peak memory."""
    from analysis.report import write_report
    from result_format.run_result import load_run

    t_load = time.perf_counter()
    loaded = load_run(work)
    for a in loaded.arms:
        _ = a.columns
    load_s = time.perf_counter() - t_load
    t_rep = time.perf_counter()
    analysis, _files = write_report(loaded, work / "report")
    report_s = time.perf_counter() - t_rep
    comparison = analysis.comparisons[0] if analysis.comparisons else None
    tpot = comparison.metric("tpot_s_p50") if comparison is not None else None
    return {
        "load_s": round(load_s, 3),
        "analysis_and_report_s": round(report_s, 3),
        "bootstrap_resamples": analysis.settings.bootstrap_resamples,
        "peak_rss_mb_report": round(_own_peak_rss_mb(), 1),
        "tpot_p50_ratio_b_over_a": None if tpot is None else tpot.ratio,
        "tpot_p50_verdict": None if tpot is None else tpot.verdict,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=HERE / "results")
    ns = p.parse_args(argv)
    if ns.report is not None:
        print(json.dumps(_report(ns.report)))
        return 0
    if ns.child is not None:
        print(json.dumps(_one(ns.child, ns.work)))
        return 0
    rows = []
    for size in ns.sizes:
        with tempfile.TemporaryDirectory(prefix="moeperf-scale-") as work:
            cmd = [sys.executable, "-m", "bench.analysis_scale_bench", "--child", str(size), "--work", work]
            r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=HERE.parent)
            if r.returncode != 0:
                print(r.stderr[-4000:], file=sys.stderr)
                return 1
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    import pyarrow

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = {
        "command": " ".join(["python3 -m bench.analysis_scale_bench", *(sys.argv[1:] or [])]),
        "date": datetime.now(UTC).isoformat(),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": len(__import__("os").sched_getaffinity(0)),
            "pyarrow": pyarrow.__version__,
            "numpy": np.__version__,
        },  # fmt: skip
        "sizes": rows,
    }
    ns.out.mkdir(parents=True, exist_ok=True)
    path = ns.out / f"analysis_scale_bench-{stamp}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
