"""The MoE backend vLLM chose is read from the lines its oracles really log (vLLM 0.26 CUDA, 0.32 CPU)."""

import time
from pathlib import Path

from cluster.engine.startup_log import (
    moe_backends_in_log,
    read_log,
    selected_moe_backends,
    startup_phases,
    startup_timeline,
)
from result_format.run_result import EngineInfo

# Copied from engine logs: results/h200/probe-flashinfer/probe-flashinfer-per_tensor_static.log (vLLM 0.26 on an
# H200, one line per TP rank at TP=2) and a vLLM 0.32 CPU engine of the default run.
GPU_LOG = """\
(EngineCore pid=792) INFO 11-30 12:36:34 [cuda.py:482] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER'].
(Worker_TP0 pid=11) INFO 11-30 12:36:34 [fp8.py:325] Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: ['AITER', 'FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'TRITON'].
(Worker_TP1 pid=12) INFO 11-30 12:36:34 [fp8.py:325] Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: ['AITER', 'FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'TRITON'].
(EngineCore pid=792) INFO 11-30 12:36:34 [fp8.py:688] Using MoEPrepareAndFinalizeNoDPEPModular
"""  # noqa: E501
CPU_LOG = """\
(EngineCore pid=5) INFO 11-30 06:40:01 [unquantized.py:294] Using CPU Unquantized MoE backend out of potential backends: ['CPU'].
(EngineCore pid=5) INFO 11-30 06:40:01 [unquantized.py:529] Using CPUUnquantizedExperts MoE backend
"""  # noqa: E501


def test_gpu_choice_is_named_once_whatever_the_number_of_ranks():
    assert selected_moe_backends(GPU_LOG) == ["Fp8: FLASHINFER_CUTLASS"]


def test_cpu_choice_and_kernel_class():
    assert selected_moe_backends(CPU_LOG) == ["Unquantized: CPU", "CPUUnquantizedExperts"]


def test_quoted_backend_names_and_attention_lines():
    assert selected_moe_backends("Using 'marlin' Mxfp4 MoE backend.") == ["Mxfp4: marlin"]
    assert selected_moe_backends("Using FLASH_ATTN attention backend out of potential backends") == []


def test_missing_log_names_nothing(tmp_path: Path):
    assert moe_backends_in_log(tmp_path / "gone.log") == []
    (tmp_path / "server.log").write_bytes(CPU_LOG.encode() + b"\xff\xfe binary noise\n")
    assert moe_backends_in_log(tmp_path / "server.log") == ["Unquantized: CPU", "CPUUnquantizedExperts"]


# Start-up lines as vLLM 0.26 formats them (gpu_model_runner.py, compilation/backends.py, v1/engine/core.py), at
# TP=2: each worker logs its own load, compile and capture; the engine core logs the init once. The first line
# is copied from results/h200/probe-flashinfer/probe-engine-per_tensor_static-20261202.log.
TP2_START_LOG = """\
(Worker_TP0 pid=11) INFO 12-02 03:35:56 [gpu_model_runner.py:5347] Model loading took 2.74 GiB memory and 0.519883 seconds
(Worker_TP1 pid=12) INFO 12-02 03:35:57 [gpu_model_runner.py:5347] Model loading took 2.74 GiB memory and 1.250000 seconds
(Worker_TP0 pid=11) INFO 12-02 03:36:04 [backends.py:1156] Dynamo bytecode transform time: 6.10 s
(Worker_TP1 pid=12) INFO 12-02 03:36:04 [backends.py:1156] Dynamo bytecode transform time: 6.30 s
(Worker_TP0 pid=11) INFO 12-02 03:36:40 [backends.py:394] Compiling a graph for compile range (1, 8192) takes 30.50 s
(Worker_TP0 pid=11) INFO 12-02 03:36:50 [backends.py:394] Compiling a graph for compile range (1, 1) takes 10.00 s
(Worker_TP1 pid=12) INFO 12-02 03:36:41 [backends.py:293] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 2.125 s
(Worker_TP0 pid=11) INFO 12-02 03:37:30 [gpu_model_runner.py:6845] Graph capturing finished in 21 secs, took 0.52 GiB
(Worker_TP1 pid=12) INFO 12-02 03:37:31 [gpu_model_runner.py:6845] Graph capturing finished in 22 secs, took 0.52 GiB
(EngineCore pid=9) INFO 12-02 03:37:32 [core.py:341] init engine (profile, create kv cache, warmup model) took 95.20 s (compilation: 46.60 s)
"""  # noqa: E501


def test_startup_phases_take_the_slowest_rank_and_add_up_compiles_per_rank() -> None:
    assert startup_phases(TP2_START_LOG) == {
        "model_load_s": 1.25,
        "dynamo_transform_s": 6.3,
        "compile_graphs_s": 40.5,  # rank 0 compiled two ranges; rank 1 loaded its one from the cache
        "compile_cache_load_s": 2.125,
        "compilation_s": 46.6,
        "cuda_graph_capture_s": 22.0,
        "init_engine_s": 95.2,
    }
    assert startup_phases(CPU_LOG) == {}


def test_startup_phases_are_described_with_what_lies_outside_them() -> None:
    info = EngineInfo(
        url="http://127.0.0.1:1", node_id="n", pid=1, device="cuda", gpu_ids=["0"], tensor_parallel_size=2,
        vllm_version="0.26.0", torch_version="2.11.0", argv=[], env={}, startup_s=228.3,
        startup_phases_s={"model_load_s": 1.25, "init_engine_s": 95.2},
    )  # fmt: skip
    assert info.describe_startup() == (
        "228.3 s (model load 1.2 s, init engine 95.2 s, outside model load and init engine 131.9 s)"
    )
    assert info.model_copy(update={"startup_phases_s": {}}).describe_startup() == "228.3 s"


def test_a_missing_log_has_no_phases(tmp_path: Path) -> None:
    assert startup_phases(read_log(tmp_path / "absent.log")) == {}


# Lines of a cold vLLM 0.26 start on the H200 (results/h200/probe-flashinfer/probe-flashinfer-per_tensor_static.log,
# its ranks' lines interleaved as logged), and the two lines vLLM 0.32 logs where 0.26 logs others.
TIMELINE_LOG = """\
(APIServer pid=665) INFO 11-30 12:35:45 [api_utils.py:273] non-default args: {'host': '127.0.0.1'}
(APIServer pid=665) WARNING 11-30 12:35:45 [system_utils.py:299] Found ulimit of 20000 and failed to increase
(APIServer pid=665) INFO 11-30 12:36:09 [model.py:623] Resolved architecture: MixtralForCausalLM
(EngineCore pid=792) INFO 11-30 12:36:31 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model=
(Worker_TP1 pid=12) INFO 11-30 12:36:33 [gpu_model_runner.py:5250] Starting to load model /tmp/probe/models/m...
(Worker_TP0 pid=11) INFO 11-30 12:36:34 [gpu_model_runner.py:5250] Starting to load model /tmp/probe/models/m...
(EngineCore pid=792) INFO 11-30 12:37:40 [core.py:402] init engine (profile, create kv cache, warmup model) took 60.1 s
(APIServer pid=665) INFO 11-30 12:37:41 [api_server.py:1000] Starting vLLM API server 0 on http://127.0.0.1:58043
"""


def test_the_timeline_puts_each_point_of_a_start_at_its_first_line_in_seconds_after_the_spawn() -> None:
    spawned = time.mktime((2026, 11, 30, 12, 35, 30, 0, 0, -1)) + 0.6  # vLLM's stamps are local time
    assert startup_timeline(TIMELINE_LOG, spawned) == {
        "api_server_first_line_s": 15.0,
        "config_resolved_s": 39.0,
        "engine_core_started_s": 61.0,
        "model_loading_started_s": 63.0,  # the first rank to get there
        "engine_initialized_s": 130.0,
        "api_server_listening_s": 131.0,
    }
    cpu = "(APIServer pid=5) INFO 12-05 06:56:36 [entry.py:140] Starting vLLM server on http://127.0.0.1:18001\n"
    at = startup_timeline(cpu, time.mktime((2026, 12, 5, 6, 56, 37, 0, 0, -1)))  # a second before: 0
    assert at == {"api_server_first_line_s": 0.0, "api_server_listening_s": 0.0}
    assert startup_timeline(CPU_LOG + "no stamp: Resolved architecture: X\n", spawned) == {}
    new_year = "(APIServer pid=5) INFO 01-01 00:00:05 [model.py:623] Resolved architecture: MixtralForCausalLM\n"
    at = startup_timeline(new_year, time.mktime((2026, 12, 31, 23, 59, 50, 0, 0, -1)))
    assert at == {"api_server_first_line_s": 15.0, "config_resolved_s": 15.0}


def test_the_timeline_is_described_after_the_phases() -> None:
    info = EngineInfo(
        url="http://127.0.0.1:1", node_id="n", pid=1, device="cuda", gpu_ids=["0"], tensor_parallel_size=1,
        vllm_version="0.26.0", torch_version="2.11.0", argv=[], env={}, startup_s=88.6,
        startup_phases_s={"init_engine_s": 28.3},
        startup_timeline_s={
            "api_server_first_line_s": 9.0, "engine_core_started_s": 40.0, "api_server_listening_s": 87.0
        },
    )  # fmt: skip
    assert info.describe_startup() == (
        "88.6 s (init engine 28.3 s, outside model load and init engine 60.3 s, seconds after spawn: "
        "api server first line 9, engine core started 40, api server listening 87)"
    )
