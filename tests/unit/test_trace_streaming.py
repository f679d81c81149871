"""Traces read as streams: same rows and stats as the list path, bounded memory, errors that keep their line."""

import json
import tracemalloc
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

import workloads.traces as traces
from workloads.trace_cli import main as trace_main
from workloads.trace_stats import LengthCounts, percentile_linear, trace_stats, trace_stats_stream
from workloads.traces import AnyTraceSpec, LoadedTrace, TraceFormatError, iter_trace, read_trace
from workloads.traces import sharegpt as sharegpt_module
from workloads.traces.azure import AzureTraceSpec
from workloads.traces.burstgpt import BurstGptTraceSpec
from workloads.traces.mooncake import MooncakeTraceSpec
from workloads.traces.sharegpt import ShareGptTraceSpec
from workloads.traces.synthetic import SyntheticTraceSpec

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
T0 = datetime(2023, 11, 16, 18, 15, 46, 680590)
MB = 1 << 20


# --- the list-based stats as they were before streaming, kept as the reference ---------------------
def _pcts(values: Sequence[int]) -> dict[str, float]:
    p50, p90, p99 = np.percentile(np.asarray(values, dtype=np.float64), (50, 90, 99))
    return {"mean": float(np.mean(values)), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def list_stats(loaded: LoadedTrace) -> dict[str, object]:
    rows = loaded.rows
    times = [r.arrival_s for r in rows if r.arrival_s is not None]
    timed = len(times) == len(rows)
    duration_s = (times[-1] - times[0]) if timed and rows else None
    gaps = np.diff(np.asarray(times)) if timed else np.array([])
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else None
    return {
        "requests": len(rows),
        "skipped": loaded.skipped,
        "duration_s": duration_s,
        "mean_rate_rps": (len(rows) - 1) / duration_s if duration_s else None,
        "interarrival_cv": cv,
        "input_tokens": _pcts([r.input_tokens for r in rows]),
        "output_tokens": _pcts([r.output_tokens for r in rows]),
        "chained_requests": sum(1 for r in rows if r.follows is not None),
        "shared_block_tokens": sum(n for r in rows for _, n in r.shared_blocks),
    }


def assert_same_stats(streamed: dict[str, object], reference: dict[str, object]) -> None:
    """Equal, key for key; the CV alone to rounding, as Welford's sums and numpy's two passes round differently
    (absolutely too: a constant rate's CV is rounding noise, ~1e-14, whose relative error means nothing)."""
    assert streamed.keys() == reference.keys()
    for key in reference:
        if key == "interarrival_cv" and reference[key] is not None:
            assert streamed[key] == pytest.approx(reference[key], rel=1e-12, abs=1e-12), key
        else:
            assert streamed[key] == reference[key], key


def stream_stats(spec: AnyTraceSpec) -> dict[str, object]:
    skipped: dict[str, int] = {}
    return trace_stats_stream(iter_trace(spec, None, skipped), skipped)


def check_against_list_path(spec: AnyTraceSpec) -> dict[str, object]:
    loaded = read_trace(spec)
    skipped: dict[str, int] = {}
    assert list(iter_trace(spec, None, skipped)) == loaded.rows
    assert skipped == loaded.skipped
    streamed = stream_stats(spec)
    assert_same_stats(streamed, list_stats(loaded))
    assert trace_stats(loaded) == streamed  # the wrapper is the same pass
    return streamed


def write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def azure_csv(p: Path, rows: int, seed: int = 0, bad_line: int | None = None) -> Path:
    """2023-format rows, 0-2 s apart, lengths up to 20k/2k (thousands of distinct ones, as real traces have)."""
    rng = np.random.default_rng(seed)
    at_us = rng.integers(0, 2_000_000, size=rows).cumsum()
    ctx, gen = rng.integers(1, 20_000, size=rows).tolist(), rng.integers(1, 2_000, size=rows).tolist()
    day = T0.replace(hour=0, minute=0, second=0, microsecond=0)
    start_us = (T0 - day) // timedelta(microseconds=1)
    with p.open("w") as f:
        f.write(AZURE_HEADER)
        for i, t_us in enumerate((start_us + at_us).tolist()):
            s, us = divmod(t_us, 1_000_000)
            d, s = divmod(s, 86_400)  # 300k rows span ~3.5 days: still November
            c = "ten" if bad_line == i + 2 else ctx[i]
            f.write(f"2023-11-{16 + d:02d} {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{us:06d}0,{c},{gen[i]}\n")
    return p


def mooncake_jsonl(p: Path, rows: int, seed: int = 0, bad_line: int | None = None) -> Path:
    """Rows 0-0.5 s apart with one or two hash ids each (a few shared), as the published traces' short prompts."""
    rng = np.random.default_rng(seed)
    ts_ms = rng.integers(0, 500, size=rows).cumsum().tolist()
    inp, out = rng.integers(1, 1_000, size=rows).tolist(), rng.integers(1, 500, size=rows).tolist()
    with p.open("w") as f:
        for i in range(rows):
            if bad_line == i + 1:
                f.write('{"timestamp": 1, "input_length": 3}\n')
                continue
            ids = f"{i % 7}, {i + 7}" if inp[i] > 512 else f"{i % 7}"
            lengths = f'"input_length": {inp[i]}, "output_length": {out[i]}'
            f.write(f'{{"timestamp": {ts_ms[i]}, {lengths}, "hash_ids": [{ids}]}}\n')
    return p


def conversations(n: int, seed: int = 0) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    convs: list[dict[str, object]] = []
    for i in range(n):
        turns = []
        for t in range(int(rng.integers(0, 4))):
            turns.append({"from": "human", "value": "q" * int(rng.integers(0 if t == 2 else 1, 40)) + f" {i}"})
            turns.append({"from": "gpt", "value": "\u00e9" * int(rng.integers(0, 30))})
        convs.append({"id": f"c{i}", "conversations": turns})
    return convs


# --- every kind: streamed stats are the list path's stats ----------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [
        AzureTraceSpec(),
        AzureTraceSpec(path=Path("azure_code_2024_sample.csv")),
        AzureTraceSpec(max_requests=17),
        BurstGptTraceSpec(),
        BurstGptTraceSpec(drop_failed=False),
        BurstGptTraceSpec(models=["GPT-4"], drop_failed=False),
        MooncakeTraceSpec(),
        MooncakeTraceSpec(block_tokens=64, max_requests=50),
        ShareGptTraceSpec(),
        ShareGptTraceSpec(multi_turn=True),
        ShareGptTraceSpec(multi_turn=True, max_turns=1, max_requests=2),
        SyntheticTraceSpec(num_requests=300, input_tokens=100, output_tokens=10, rate_rps=3.0),
        SyntheticTraceSpec(
            num_requests=301,
            input_tokens={"kind": "lognormal", "median_tokens": 300, "sigma": 1.0},
            output_tokens={"kind": "empirical", "trace": {"kind": "mooncake"}, "side": "output"},
            shared_prefix_tokens=9,
        ),
    ],
    ids=lambda s: s.kind,
)
def test_bundled_samples_stream_to_the_list_path_stats(spec):
    check_against_list_path(spec)


def test_generated_csv_and_jsonl_traces(tmp_path):
    check_against_list_path(AzureTraceSpec(path=azure_csv(tmp_path / "a.csv", 2_001, seed=1)))
    zoned = "".join(f"2024-05-10 00:00:{i // 10:02d}.{i % 10}00000+00:00,{i % 13},{i % 5}\n" for i in range(555))
    check_against_list_path(AzureTraceSpec(path=write(tmp_path / "z.csv", AZURE_HEADER + zoned)))
    burst = "".join(
        f"{i * 0.5},{'GPT-4' if i % 3 else 'ChatGPT'},{i % 97},{i % 4},0,{'API log' if i % 5 else 'x'}\n"
        for i in range(999)
    )
    for spec in (
        BurstGptTraceSpec(path=write(tmp_path / "b.csv", BURST_HEADER + burst)),
        BurstGptTraceSpec(path=tmp_path / "b.csv", models=["GPT-4"], log_types=["API log"], max_requests=100),
    ):
        check_against_list_path(spec)
    moon = mooncake_jsonl(tmp_path / "m.jsonl", 1_500, seed=2)
    write(moon, moon.read_text().replace("\n", "\n\n", 3))  # blank lines: skipped and counted
    assert check_against_list_path(MooncakeTraceSpec(path=moon))["skipped"] == {"blank line": 3}


def test_generated_sharegpt_array_and_jsonl_give_the_same_requests(tmp_path):
    convs = conversations(400, seed=3)
    array = write(tmp_path / "s.json", json.dumps(convs, indent=1))
    lines = write(tmp_path / "s.jsonl", "".join(json.dumps(c) + "\n" for c in convs))
    for multi_turn in (False, True):
        a = check_against_list_path(ShareGptTraceSpec(path=array, multi_turn=multi_turn))
        j = check_against_list_path(ShareGptTraceSpec(path=lines, multi_turn=multi_turn))
        assert a == j
        assert a["skipped"]  # the generator makes unanswered and empty turns
    rows = list(iter_trace(ShareGptTraceSpec(path=lines, multi_turn=True)))
    assert all(r.follows is None or rows[r.follows].line == r.line for r in rows)  # chains stay in a conversation


@pytest.mark.parametrize("chunk_chars", [1, 2, 3, 7, 64, 1 << 16])
def test_array_reader_agrees_with_json_loads_at_any_chunk_boundary(tmp_path, monkeypatch, chunk_chars):
    monkeypatch.setattr(sharegpt_module, "_CHUNK_CHARS", chunk_chars)
    doc = [1, 123456, 1e5, -2.5e-3, True, False, None, "s\u00e9\\n", {"a": [1, {"b": "]"}]}, [], 7]
    for text in (json.dumps(doc), json.dumps(doc, indent=3), " [ ] ", "[]", "[12345678901234567890]", "[1e+5]"):
        p = write(tmp_path / "e.json", text)
        assert [e for _, e, _ in sharegpt_module._entries(p, {})] == json.loads(text)
    convs = conversations(60, seed=4)
    p = write(tmp_path / "c.json", json.dumps(convs, indent=2))
    lines = write(tmp_path / "c.jsonl", "".join(json.dumps(c) + "\n" for c in convs))
    from_lines = [
        r.model_copy(update={"line": None}) for r in iter_trace(ShareGptTraceSpec(path=lines, multi_turn=True))
    ]
    assert list(iter_trace(ShareGptTraceSpec(path=p, multi_turn=True))) == from_lines  # array rows carry no line


BROKEN_JSON = [
    '[\n{"id": 1,\n',
    '[{"a": 1}\n{"b": 2}]',
    '[{"a": 1},\n ]',
    '[{"a": 1}]\n x',
    '[{"a": "x\n',
    '[{"a": "\\q"}]',
    "[",
    "[\n\n",
    "   \n ",
    '{"a": 1}',
    '\n\n{"a": ',
    '[{"a": 1}, {"a": tru}]',
    "[1 2]",
    '[{"a": 1},\n\n{"a": [1, 2,, 3]}]',
    "\ufeff[]",
]


@pytest.mark.parametrize("chunk_chars", [1, 5, 1 << 16])
@pytest.mark.parametrize("text", BROKEN_JSON)
def test_broken_json_arrays_give_the_whole_file_parse_error(tmp_path, monkeypatch, chunk_chars, text):
    monkeypatch.setattr(sharegpt_module, "_CHUNK_CHARS", chunk_chars)
    p = write(tmp_path / "s.json", text)
    try:
        data = json.loads(text)
        expected = f"{p}: expected a JSON list of conversations"
        assert not isinstance(data, list)
    except json.JSONDecodeError as e:
        expected = f"{p}:{e.lineno}: not JSON: {e.msg}"
    with pytest.raises(TraceFormatError) as err:
        list(sharegpt_module._entries(p, {}))
    assert str(err.value) == expected


# --- percentiles from counts are numpy's, bit for bit ---------------------------------------------------
GRID = [[5], [5, 5], [1, 2], [1, 2, 3], [3, 1, 2, 2], [0, 0, 0, 7], [9, 1, 4, 4, 4, 4, 2], [2**40, 1, 2**40 + 3]]
GRID += [list(np.random.default_rng(n).integers(0, 1 + n % 9, size=n)) for n in range(1, 60)]
GRID += [list(np.random.default_rng(7).integers(0, 100_000, size=10_001))]


@pytest.mark.parametrize("values", GRID, ids=lambda v: f"n{len(v)}")
def test_percentiles_from_counts_equal_numpy(values):
    counts = LengthCounts()
    for v in values:
        counts.add(int(v))
    summary = counts.summary()
    reference = np.asarray(values, dtype=np.float64)
    assert summary["mean"] == float(np.mean(values))
    for pct in (50, 90, 99):
        assert summary[f"p{pct}"] == float(np.percentile(reference, pct))
    ordered = sorted(float(v) for v in values)
    for pct in [*np.linspace(0, 100, 201), 33.3, 66.7, 99.9]:
        assert percentile_linear(ordered.__getitem__, len(ordered), float(pct)) == float(
            np.percentile(reference, pct)
        ), pct


def test_no_rows_is_an_error_not_a_number():
    with pytest.raises(ValueError, match="no rows"):
        trace_stats_stream([], {})


# --- bounded memory --------------------------------------------------------------------------------------
def traced_peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # 50k rows through both paths under tracemalloc
@pytest.mark.parametrize(
    ("make", "spec_cls"), [(azure_csv, AzureTraceSpec), (mooncake_jsonl, MooncakeTraceSpec)], ids=["azure", "mooncake"]
)
def test_streaming_memory_does_not_grow_with_the_trace(tmp_path, make, spec_cls):
    small = spec_cls(path=make(tmp_path / "small", 10_000, seed=4))
    big = spec_cls(path=make(tmp_path / "big", 50_000, seed=5))
    _, small_peak = traced_peak(lambda: stream_stats(small))
    streamed, stream_peak = traced_peak(lambda: stream_stats(big))
    listed, list_peak = traced_peak(lambda: list_stats(read_trace(big)))
    assert streamed["requests"] == 50_000
    assert_same_stats(streamed, listed)
    print(f"{spec_cls.__name__}: tracemalloc peak streaming {stream_peak / MB:.1f} MB, list {list_peak / MB:.1f} MB")
    # Five times the rows: memory bounded by the distinct token counts (a few MB), not by the rows.
    assert stream_peak < max(4 * MB, 2 * small_peak), (small_peak, stream_peak)
    assert stream_peak * 10 < list_peak, (stream_peak, list_peak)


# --- errors far into a file still name file and line ---------------------------------------------------
def test_errors_deep_in_a_file_name_their_line(tmp_path):
    p = azure_csv(tmp_path / "a.csv", 50_000, bad_line=49_997)
    with pytest.raises(TraceFormatError, match=rf"^{p}:49997: ContextTokens: not a number: 'ten'$"):
        stream_stats(AzureTraceSpec(path=p))
    p = mooncake_jsonl(tmp_path / "m.jsonl", 50_000, bad_line=49_999)
    with pytest.raises(TraceFormatError, match=rf"^{p}:49999: missing field 'output_length'"):
        stream_stats(MooncakeTraceSpec(path=p))
    body = "".join(f"{i},m,1,1,2,x\n" for i in range(50_000)) + "5,m,1,1,2,x\n"
    p = write(tmp_path / "b.csv", BURST_HEADER + body)
    with pytest.raises(TraceFormatError, match=rf"^{p}:50002: timestamps go backwards"):
        stream_stats(BurstGptTraceSpec(path=p))


def test_json_errors_deep_in_a_sharegpt_array_name_their_line(tmp_path):
    text = json.dumps(conversations(20_000, seed=6), indent=1)
    cut = text.index('"id": "c19990"')
    for broken in (text[:cut] + '"id" "c19990"' + text[cut + 14 :], text[: cut + 20], text[:-2] + "}}"):
        p = write(tmp_path / "s.json", broken)
        with pytest.raises(json.JSONDecodeError) as want:
            json.loads(broken)
        assert want.value.lineno > 100_000
        with pytest.raises(TraceFormatError) as got:
            stream_stats(ShareGptTraceSpec(path=p))
        assert str(got.value) == f"{p}:{want.value.lineno}: not JSON: {want.value.msg}"


def test_jsonl_entry_errors_name_their_line(tmp_path):
    good = json.dumps({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})
    p = write(tmp_path / "s.jsonl", f"{good}\n" * 5_000 + '{"conversations": [{"from": "human"}]}\n')
    with pytest.raises(TraceFormatError, match=rf"^{p}:5001: entry 5000: each turn needs"):
        stream_stats(ShareGptTraceSpec(path=p))
    write(p, f"{good}\n\n{{oops\n")
    with pytest.raises(TraceFormatError, match=rf"^{p}:3: not JSON"):
        stream_stats(ShareGptTraceSpec(path=p))


def test_max_requests_stops_reading(tmp_path):
    p = write(tmp_path / "a.csv", AZURE_HEADER + "2023-11-16 18:15:46,1,1\n2023-11-16 18:15:47,2,1\nbroken\n")
    assert stream_stats(AzureTraceSpec(path=p, max_requests=2))["requests"] == 2
    with pytest.raises(TraceFormatError, match=":4: wrong number of fields"):
        stream_stats(AzureTraceSpec(path=p))


# --- the CLI streams -----------------------------------------------------------------------------------
def test_cli_streams_and_matches_the_list_path(monkeypatch, capsys):
    reference = list_stats(read_trace(MooncakeTraceSpec()))

    def no_lists(*_args, **_kwargs):
        raise AssertionError("the CLI must not build the row list")

    monkeypatch.setattr(traces, "LOADERS", dict.fromkeys(traces.LOADERS, no_lists))
    assert trace_main(["stats", "workloads/data/mooncake_synthetic_sample.jsonl", "--kind", "mooncake"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert_same_stats({k: out[k] for k in reference}, json.loads(json.dumps(reference)))


@pytest.mark.parametrize(
    ("kind", "name", "text"),
    [
        ("azure", "e.csv", AZURE_HEADER),
        ("burstgpt", "e.csv", BURST_HEADER + "1,m,4,0,4,x\n"),
        ("mooncake", "e.jsonl", "\n"),
        ("sharegpt", "e.json", "[]"),
        ("sharegpt", "e.jsonl", ""),
    ],
)
def test_cli_empty_trace_exits_2_naming_the_file(tmp_path, capsys, kind, name, text):
    p = write(tmp_path / name, text)
    assert trace_main(["stats", str(p), "--kind", kind]) == 2
    err = capsys.readouterr().err
    assert f"{p}: no requests in trace" in err
