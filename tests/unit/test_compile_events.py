"""The engine side of compile events: the server's environment names the directory, the reader is torn-line safe."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.engine.command import server_env
from cluster.engine.compile_events import CompileEventReader
from experiment.config import EngineSpec
from moe_opt.flags import OptimizationFlags


def line(rank: int, end: float, phase: str = "serving") -> str:
    return json.dumps(
        {"rank": rank, "kernel": "m.k", "cache_hit": False, "wall_s": 0.5, "compiler_s": 0.4, "end_epoch_s": end,
         "phase": phase}
    )  # fmt: skip


def test_the_engine_environment_names_the_compile_events_dir(tmp_path: Path) -> None:
    env = server_env(EngineSpec(), OptimizationFlags(), "cpu", None, None, tmp_path / "prom", None, tmp_path / "ev")
    assert env["MOEPERF_COMPILE_EVENTS_DIR"] == str(tmp_path / "ev")
    assert "MOEPERF_COMPILE_EVENTS_DIR" not in server_env(EngineSpec(), None, "cpu", None, None, None)


def test_reader_returns_each_whole_line_once_and_keeps_a_torn_last_line_for_later(tmp_path: Path) -> None:
    reader = CompileEventReader(tmp_path)
    assert reader.read(0) == []
    (tmp_path / "rank0.jsonl").write_text(line(0, 10.0) + "\n" + line(0, 12.0)[:30])  # still being written
    (tmp_path / "rank1.jsonl").write_text(line(1, 11.0, "startup") + "\n")
    first = reader.read(0)
    assert [(e.round, e.rank, e.end_epoch_s, e.phase) for e in first] == [
        (0, 0, 10.0, "serving"),
        (0, 1, 11.0, "startup"),
    ]
    with (tmp_path / "rank0.jsonl").open("a") as f:
        f.write(line(0, 12.0)[30:] + "\n")
    assert [(e.round, e.rank, e.end_epoch_s) for e in reader.read(1)] == [(1, 0, 12.0)]
    assert reader.read(2) == []


def test_a_corrupt_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "rank0.jsonl").write_text('{"rank": 0, "kern\n' + "[1, 2]\n" + line(0, 5.0) + "\n")
    assert [e.end_epoch_s for e in CompileEventReader(tmp_path).read(0)] == [5.0]


def test_a_missing_directory_gives_no_events(tmp_path: Path) -> None:
    assert CompileEventReader(tmp_path / "absent").read(0) == []
