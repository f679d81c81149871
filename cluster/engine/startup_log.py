"""What a vLLM server says at start-up and its config does not: which MoE kernel it chose.

With ``moe_backend: auto`` vLLM picks the backend itself (FlashInfer CUTLASS, Triton, Marlin, ...) from the
checkpoint's quantization scheme and the GPU, and only its log says which. On the H200 an "auto" baseline ran
Triton, not FlashInfer CUTLASS, because online FP8 has dynamic activation scales; a result that did not record
this would let a reader believe the baseline was FlashInfer. So the engine's choice is kept with every arm.
"""

from __future__ import annotations

import re
from pathlib import Path

# vLLM's oracles log "Using TRITON Fp8 MoE backend out of ...", "Using 'marlin' Mxfp4 MoE backend." and, for the
# kernel class, "Using CPUUnquantizedExperts MoE backend"; every TP rank logs its own copy.
MOE_BACKEND_LINE = re.compile(
    r"Using '?(?P<backend>[\w.-]+)'? (?:(?P<scheme>Fp8|Int8|WNA16|Mxfp4|MxFp8|NvFp4|Unquantized|W4A8) )?MoE backend\b"
)


def selected_moe_backends(log_text: str) -> list[str]:
    """Each distinct choice once, in the order logged: '<scheme>: <backend>' or the bare kernel class."""
    found = (
        f"{m['scheme']}: {m['backend']}" if m["scheme"] else m["backend"] for m in MOE_BACKEND_LINE.finditer(log_text)
    )
    return list(dict.fromkeys(found))


def moe_backends_in_log(log_path: Path) -> list[str]:
    try:
        return selected_moe_backends(log_path.read_text(errors="replace"))
    except OSError:
        return []
