from pathlib import Path

import pytest

from workloads.traces import TraceFormatError, load_trace
from workloads.traces.azure import AzureTraceSpec

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(HEADER + body)
    return p


def test_bundled_sample_loads():
    rows = load_trace(AzureTraceSpec())
    assert len(rows) == 200
    assert rows[0].arrival_s == 0.0
    assert (rows[0].input_tokens, rows[0].output_tokens) == (374, 44)
    assert rows[1].arrival_s == pytest.approx(4.314579)
    assert all(b.arrival_s >= a.arrival_s for a, b in zip(rows, rows[1:], strict=False))


def test_seven_digit_fractions_and_max_requests(tmp_path):
    p = write(tmp_path, "2023-11-16 18:15:46.6805900,10,2\n2023-11-16 18:15:47.1805901,20,3\n2023-11-16 18:15:48,5,1\n")
    rows = load_trace(AzureTraceSpec(path=p, max_requests=2))
    assert [r.arrival_s for r in rows] == [0.0, pytest.approx(0.5)]


def test_malformed_line_names_file_and_line(tmp_path):
    p = write(tmp_path, "2023-11-16 18:15:46.68,10,2\n2023-11-16 18:15:47.00,ten,2\n")
    with pytest.raises(TraceFormatError) as e:
        load_trace(AzureTraceSpec(path=p))
    assert f"{p}:3:" in str(e.value)
    assert e.value.line == 3


def test_missing_column(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,1\n")
    with pytest.raises(TraceFormatError, match="GeneratedTokens"):
        load_trace(AzureTraceSpec(path=p))


def test_timestamps_going_backwards(tmp_path):
    p = write(tmp_path, "2023-11-16 18:15:46,1,1\n2023-11-16 18:15:45,1,1\n")
    with pytest.raises(TraceFormatError, match=":3: timestamps go backwards"):
        load_trace(AzureTraceSpec(path=p))


def test_missing_file_named():
    with pytest.raises(TraceFormatError, match="no-such.csv"):
        load_trace(AzureTraceSpec(path=Path("no-such.csv")))


def test_empty_trace(tmp_path):
    with pytest.raises(TraceFormatError, match="no requests"):
        load_trace(AzureTraceSpec(path=write(tmp_path, "")))
