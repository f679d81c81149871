"""Compiles while serving, matched with the requests that waited for them: hand-computed overlaps and the reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.compile_attribution import EVENT_ROWS_PER_ARM, SECTION_TITLE, attribute_arm, event_rows
from analysis.report import load_result, write_report
from analysis.verdicts import AnalysisSettings
from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult, CompileEventRecord, RunResult, ShardResult
from workloads.records import RequestRecord

FIXTURE = Path(__file__).parent / "data" / "analysis_quick_cpu_result.json"  # schema 1: no compile events
QUICK = AnalysisSettings(bootstrap_resamples=100)


def rec(index: int, round: int, client: int, send: float, first: float | None, end: float) -> RequestRecord:
    times = [] if first is None else [first]
    return RequestRecord(index=index, arm="a", round=round, client=client, intended_send_s=send, actual_send_s=send,
                         first_token_s=first, token_times_s=times, end_s=end, prompt_tokens_requested=8,
                         output_tokens_requested=4)  # fmt: skip


def shard(round: int, client: int, start: float) -> ShardResult:
    return ShardResult(round=round, client=client, node_id=None, start_epoch_s=start, planned=1, received=1,
                       status="ok")  # fmt: skip


def event(round: int, end: float, wall: float, phase: str = "serving", cache_hit: bool = False) -> CompileEventRecord:
    return CompileEventRecord(round=round, rank=0, kernel="m.k", cache_hit=cache_hit, wall_s=wall, compiler_s=None,
                              end_epoch_s=end, phase=phase)  # fmt: skip


# Round 0: client 0 starts at 1000 s, client 1 at 1001 s; round 1 at 2000 s. Epoch times in the comments.
RECORDS = [
    rec(0, 0, 0, 1.0, 1.5, 3.0),  # A: 1001 -> first 1001.5 -> end 1003
    rec(1, 0, 0, 1.2, 2.5, 4.0),  # B: 1001.2 -> 1002.5 -> 1004
    rec(2, 0, 1, 0.5, 2.0, 5.0),  # C: 1001.5 -> 1003 -> 1006 (client 1's start)
    rec(3, 0, 0, 6.0, 6.2, 7.0),  # D: 1006 -> 1006.2 -> 1007
    rec(4, 1, 0, 0.1, 0.3, 1.0),  # E: 2000.1 -> 2000.3 -> 2001
]
SHARDS = [shard(0, 0, 1000.0), shard(0, 1, 1001.0), shard(1, 0, 2000.0)]
EVENTS = [
    event(0, 1000.5, 0.3),  # before any request
    event(0, 1002.4, 0.4),  # [1002, 1002.4]: A decoding, B and C still waiting for their first token
    event(0, 1005.0, 0.5, cache_hit=True),  # [1004.5, 1005]: only C in flight, decoding
    event(0, 1002.2, 0.1, phase="startup"),  # not serving: ignored
    event(1, 2000.2, 0.2),  # round 1: E waits
    event(3, 1002.2, 0.1),  # a round without requests, at round 0's time: round 0's requests did not wait for it
]


def arm(events: list[CompileEventRecord], records: list[RequestRecord] = RECORDS) -> ArmResult:
    return ArmResult(name="a", flags=OptimizationFlags(), flags_applied=False, status="ok", requests_planned=5,
                     requests_sent=5, requests_succeeded=5, requests_failed=0, requests_not_sent=0,
                     records_file="records/a.jsonl", records=records, shards=SHARDS,
                     compile_events=events)  # fmt: skip


def test_each_serving_compile_counts_the_requests_of_its_round_in_flight_and_waiting() -> None:
    x = attribute_arm(arm(EVENTS))
    assert x is not None
    got = [(e.round, e.at_s, e.wall_s, e.in_flight, e.waiting_first_token, e.cache_hit) for e in x.events]
    assert got == [
        (0, pytest.approx(-0.8), 0.3, 0, 0, False),
        (0, pytest.approx(1.0), 0.4, 3, 2, False),
        (0, pytest.approx(3.5), 0.5, 1, 0, True),
        (1, pytest.approx(-0.1), 0.2, 1, 1, False),
        (3, None, 0.1, 0, 0, False),
    ]  # by round, then by start
    s = x.summary
    assert (s.serving_compiles, s.serving_cache_hits, s.compile_s) == (5, 1, pytest.approx(1.5))
    assert (s.requests_waited, s.requests_other) == (3, 2)  # B, C, E against A, D
    assert s.ttft_p50_waited_s == pytest.approx(1.3)  # median of 1.3, 1.5, 0.2
    assert s.ttft_p50_other_s == pytest.approx(0.35)  # median of 0.5, 0.2


def test_a_request_with_no_first_token_waits_for_a_compile_it_overlaps() -> None:
    failed = rec(0, 0, 0, 1.0, None, 3.0)  # 1001 -> no token -> closed at 1003
    x = attribute_arm(arm([event(0, 1002.4, 0.4), event(0, 1004.0, 0.5)], [failed]))
    assert x is not None
    assert [(e.in_flight, e.waiting_first_token) for e in x.events] == [(1, 1), (0, 0)]
    assert (x.summary.requests_waited, x.summary.ttft_p50_waited_s) == (0, None)  # no TTFT to compare


def test_no_serving_compile_no_attribution() -> None:
    assert attribute_arm(arm([event(0, 1002.2, 0.1, phase="startup")])) is None
    assert attribute_arm(arm([])) is None


def test_event_rows_are_capped_and_the_rest_counted() -> None:
    x = attribute_arm(arm([event(0, 1000.0 + i, 0.01) for i in range(EVENT_ROWS_PER_ARM + 7)]))
    assert x is not None
    rows, left_out = event_rows(x)
    assert len(rows) == EVENT_ROWS_PER_ARM and left_out == 7


def test_a_result_without_compile_events_still_loads() -> None:
    result = load_result(FIXTURE)
    assert result.arms and all(a.compile_events == [] for a in result.arms)
    raw = json.loads(FIXTURE.read_text())["arms"][0]
    assert "compile_events" not in raw and ArmResult.model_validate(raw).compile_events == []


def _with_serving_compile(result: RunResult) -> RunResult:
    """The fixture's first arm given shards at 1000 s and a compile over its first request's wait."""
    a = result.arms[0]
    cols = a.columns
    shards = [
        shard(int(r), int(c), 1000.0)
        for r, c in sorted({(int(r), int(c)) for r, c in zip(cols.round, cols.client, strict=True)})
    ]
    first = int(cols.actual_send_s.argmin())
    end = 1000.0 + float(cols.first_token_s[first])
    events = [event(0, end, float(cols.first_token_s[first] - cols.actual_send_s[first]) / 2)]
    arms = [a.model_copy(update={"shards": shards, "compile_events": events}), *result.arms[1:]]
    return result.model_copy(update={"arms": arms})


def test_reports_show_the_section_only_with_serving_compiles(tmp_path: Path) -> None:
    result = load_result(FIXTURE)
    write_report(result, tmp_path / "without", settings=QUICK)
    for name in ("report.md", "report.html"):
        assert SECTION_TITLE not in (tmp_path / "without" / name).read_text()
    assert json.loads((tmp_path / "without" / "analysis.json").read_text())["compile_attribution"] == {}

    write_report(_with_serving_compile(result), tmp_path / "with", settings=QUICK)
    md = (tmp_path / "with" / "report.md").read_text()
    html = (tmp_path / "with" / "report.html").read_text()
    assert f"## {SECTION_TITLE}" in md and f"<h2>{SECTION_TITLE}</h2>" in html
    assert "| round | rank | kernel |" in md and "<th>waiting for 1st token</th>" in html
    summary = json.loads((tmp_path / "with" / "analysis.json").read_text())["compile_attribution"]
    name = result.arms[0].name
    assert list(summary) == [name] and summary[name]["serving_compiles"] == 1
    assert summary[name]["requests_waited"] >= 1
