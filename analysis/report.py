"""Render and write a run's report files from its saved result (HTML, Markdown, analysis JSON)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from analysis.html_report import render_html
from analysis.markdown import render_markdown
from analysis.nightly import NightlyVerdict
from analysis.sweep import analyse_sweep
from analysis.verdicts import AnalysisSettings, RunAnalysis, analyse_run
from result_format.run_result import RunResult, load_run

FORMATS = ("html", "md")
FILE_NAMES = {"html": "report.html", "md": "report.md"}


def load_result(path: Path) -> RunResult:
    """A run folder (``runs/<id>``) or its ``result.json``, its arms' records found in its folder."""
    return load_run(path)


def write_report(
    result: RunResult,
    out_dir: Path,
    formats: Iterable[str] = FORMATS,
    settings: AnalysisSettings | None = None,
    nightly: NightlyVerdict | None = None,
) -> tuple[RunAnalysis, list[Path]]:
    """Write ``report.html`` / ``report.md`` and ``analysis.json`` (and ``nightly.json`` with a verdict, and
    ``sweep.json`` for a run with a sweep: analysed once here, shown by both reports)."""
    wanted = list(formats)
    unknown = sorted(set(wanted) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown report format(s) {unknown}; choose from {list(FORMATS)}")
    if nightly is not None and nightly.analysis is not None:
        analysis = nightly.analysis
    else:
        analysis = analyse_run(result, settings)
    sweep = analyse_sweep(result, analysis.settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if "html" in wanted:
        p = out_dir / FILE_NAMES["html"]
        p.write_text(render_html(result, analysis, nightly, sweep), encoding="utf-8")
        written.append(p)
    if "md" in wanted:
        p = out_dir / FILE_NAMES["md"]
        p.write_text(render_markdown(result, analysis, nightly, sweep), encoding="utf-8")
        written.append(p)
    p = out_dir / "analysis.json"
    p.write_text(analysis.model_dump_json(indent=2))
    written.append(p)
    if sweep is not None:
        p = out_dir / "sweep.json"
        p.write_text(sweep.model_dump_json(indent=2))
        written.append(p)
    if nightly is not None:
        p = out_dir / "nightly.json"
        p.write_text(nightly.model_dump_json(indent=2))
        written.append(p)
    return analysis, written
