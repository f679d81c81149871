"""The MoE backend vLLM chose is read from the lines its oracles really log (vLLM 0.26 CUDA, 0.32 CPU)."""

from pathlib import Path

from cluster.engine.startup_log import moe_backends_in_log, selected_moe_backends

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
