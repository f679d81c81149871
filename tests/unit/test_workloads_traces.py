"""Every trace loader on the bundled samples and on hand-made broken files."""

import json
from pathlib import Path

import pytest

from workloads.trace_cli import main as trace_main
from workloads.traces import TraceFormatError, load_trace, read_trace
from workloads.traces.azure import AzureTraceSpec
from workloads.traces.burstgpt import BurstGptTraceSpec
from workloads.traces.mooncake import MooncakeTraceSpec
from workloads.traces.sharegpt import ShareGptTraceSpec
from workloads.traces.synthetic import SyntheticTraceSpec

BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- real and hand-made samples ---------------------------------------------------------------
def test_azure_2024_zone_timestamps():
    rows = load_trace(AzureTraceSpec(path=Path("azure_code_2024_sample.csv")))
    assert len(rows) == 10
    assert rows[1].arrival_s == pytest.approx(0.144442)
    assert (rows[0].input_tokens, rows[0].output_tokens) == (2162, 5)


def test_burstgpt_drops_failed_and_counts_them():
    loaded = read_trace(BurstGptTraceSpec())
    assert len(loaded.rows) == 12
    assert loaded.skipped == {"failed request (zero response tokens)": 3}
    assert all(r.output_tokens > 0 for r in loaded.rows)
    assert loaded.rows[0].arrival_s == 0.0 and loaded.rows[1].arrival_s == 113.0


def test_burstgpt_keep_failed_and_filter_model():
    assert len(load_trace(BurstGptTraceSpec(drop_failed=False))) == 15
    loaded = read_trace(BurstGptTraceSpec(models=["GPT-4"], drop_failed=False))
    assert len(loaded.rows) == 4 and loaded.skipped == {"model not selected": 11}


def test_mooncake_blocks_follow_hash_ids():
    rows = load_trace(MooncakeTraceSpec())
    assert len(rows) == 120
    first = rows[0]  # input 40160 = 78 full blocks of 512 + 224
    assert len(first.shared_blocks) == 79
    assert first.shared_blocks[0] == (0, 512) and first.shared_blocks[-1] == (78, 224)
    assert sum(n for _, n in first.shared_blocks) == first.input_tokens
    assert rows[2].arrival_s == pytest.approx(0.04)  # timestamps are milliseconds


def test_mooncake_bundled_sample_shares_blocks_between_requests():
    # The bundled sample is the real trace's first 120 lines: 152 of its 3078 hash ids recur.
    rows = load_trace(MooncakeTraceSpec())
    keys = [k for r in rows for k, _ in r.shared_blocks]
    assert len(rows) == 120 and len(keys) - len(set(keys)) > 0


def test_sharegpt_single_turn_counts_bytes_and_skips_unanswered():
    loaded = read_trace(ShareGptTraceSpec())
    assert len(loaded.rows) == 4
    assert loaded.skipped == {"conversation without an answered user turn": 1}
    assert loaded.rows[0].input_tokens == len(b"What is a mixture-of-experts layer?")
    assert all(r.follows is None and r.arrival_s is None for r in loaded.rows)


def test_sharegpt_multi_turn_chains_and_carries_history():
    rows = load_trace(ShareGptTraceSpec(multi_turn=True))
    assert len(rows) == 7
    t0, t1, t2 = rows[0], rows[1], rows[2]
    assert t1.follows == 0 and t2.follows == 1
    # turn 2's prompt opens with turn 1's prompt and (reference) answer
    assert t1.shared_blocks[: len(t0.shared_blocks)] == t0.shared_blocks
    assert t1.input_tokens == t0.input_tokens + t0.output_tokens + t1.shared_blocks[-1][1]


def test_sharegpt_with_engine_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    tok = tokenizers.Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    rows = load_trace(ShareGptTraceSpec(tokenizer=str(tmp_path / "tokenizer.json")))
    assert rows[0].input_tokens == 10  # words and punctuation ("mixture - of - experts ... ?"), not 35 bytes


def test_synthetic_distributions_are_seeded_and_in_range():
    spec = SyntheticTraceSpec(
        num_requests=500,
        input_tokens={"kind": "uniform", "min_tokens": 10, "max_tokens": 20},
        output_tokens={"kind": "lognormal", "median_tokens": 50, "sigma": 0.5, "max_tokens": 200},
        shared_prefix_tokens=7,
        seed=3,
    )
    rows = load_trace(spec)
    assert rows == load_trace(spec)
    assert {r.input_tokens - 7 for r in rows} == set(range(10, 21))
    outs = sorted(r.output_tokens for r in rows)
    assert max(outs) <= 200 and 40 <= outs[len(outs) // 2] <= 60
    assert all(r.shared_blocks == rows[0].shared_blocks and r.shared_blocks[0][1] == 7 for r in rows)


def test_synthetic_empirical_draws_from_another_trace():
    rows = load_trace(
        SyntheticTraceSpec(
            num_requests=50,
            input_tokens={"kind": "empirical", "trace": {"kind": "burstgpt"}, "side": "input"},
            output_tokens=4,
        )
    )
    pool = {r.input_tokens for r in load_trace(BurstGptTraceSpec())}
    assert {r.input_tokens for r in rows} <= pool


# --- broken files: clear error naming file and line ---------------------------------------------
@pytest.mark.parametrize(
    ("spec_cls", "name", "text", "match"),
    [
        (AzureTraceSpec, "a.csv", "", r"a.csv:1: empty file"),
        (AzureTraceSpec, "a.csv", AZURE_HEADER, r"a.csv: no requests"),
        (AzureTraceSpec, "a.csv", AZURE_HEADER + "2023-11-16 18:15:46,5,-1\n", r"a.csv:2: GeneratedTokens: negative"),
        (AzureTraceSpec, "a.csv", AZURE_HEADER + "yesterday,5,1\n", r"a.csv:2: TIMESTAMP"),
        (AzureTraceSpec, "a.csv", AZURE_HEADER + "2023-11-16 18:15:46,5\n", r"a.csv:2: wrong number of fields"),
        (BurstGptTraceSpec, "b.csv", BURST_HEADER, r"b.csv: no requests"),
        (BurstGptTraceSpec, "b.csv", BURST_HEADER + "5,m,1,1,2,x\n3,m,1,1,2,x\n", r"b.csv:3: timestamps go backwards"),
        (BurstGptTraceSpec, "b.csv", BURST_HEADER + "5,m,-4,1,2,x\n", r"b.csv:2: Request tokens: negative"),
        (BurstGptTraceSpec, "b.csv", "Timestamp,Model\n1,m\n", r"b.csv:1: missing column"),
        (MooncakeTraceSpec, "m.jsonl", "", r"m.jsonl: no requests"),
        (
            MooncakeTraceSpec,
            "m.jsonl",
            '{"timestamp": 0, "input_length": 3}\n',
            r"m.jsonl:1: missing field 'output_length'",
        ),
        (MooncakeTraceSpec, "m.jsonl", "{oops\n", r"m.jsonl:1: not JSON"),
        (
            MooncakeTraceSpec,
            "m.jsonl",
            '{"timestamp": 9, "input_length": 3, "output_length": 1, "hash_ids": [0]}\n'
            '{"timestamp": 2, "input_length": 3, "output_length": 1, "hash_ids": [1]}\n',
            r"m.jsonl:2: timestamps go backwards",
        ),
        (
            MooncakeTraceSpec,
            "m.jsonl",
            '{"timestamp": 0, "input_length": -3, "output_length": 1, "hash_ids": [0]}\n',
            r"m.jsonl:1: input_length: negative",
        ),
        (ShareGptTraceSpec, "s.json", "", r"s.json: no requests"),
        (ShareGptTraceSpec, "s.json", '[\n{"id": 1,\n', r"s.json:3: not JSON"),
        (ShareGptTraceSpec, "s.json", '[{"id": 1}]', r"s.json: entry 0: no 'conversations'"),
    ],
)
def test_broken_files_name_file_and_line(tmp_path, spec_cls, name, text, match):
    p = write(tmp_path, name, text)
    with pytest.raises(TraceFormatError, match=match):
        load_trace(spec_cls(path=p))


def test_trace_stats_cli(capsys):
    assert trace_main(["stats", "workloads/data/burstgpt_sample.csv", "--kind", "burstgpt"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 12 and out["duration_s"] == 249.0
    assert out["mean_rate_rps"] == pytest.approx(11 / 249)
    assert out["interarrival_cv"] > 0 and set(out["input_tokens"]) == {"mean", "p50", "p90", "p99"}
    assert out["skipped"] == {"failed request (zero response tokens)": 3}


def test_trace_stats_cli_bad_file(tmp_path, capsys):
    p = write(tmp_path, "bad.csv", AZURE_HEADER + "2023-11-16 18:15:46,x,1\n")
    assert trace_main(["stats", str(p), "--kind", "azure"]) == 2
    assert "bad.csv:2:" in capsys.readouterr().err
