"""Write FlashInfer's CUTLASS fused-MoE build file cut down to what a per-tensor FP8 MoE runs on Hopper.

FlashInfer 0.6.14 builds `fused_moe_90` for every input type at once: 183 ninja steps, about 43 minutes of
the H200 machine's 16 cores, more than one hold. A per-tensor FP8 MoE (what vLLM 0.26 sends to FlashInfer
CUTLASS for a static-scale FP8 checkpoint) runs only the FP8 x FP8 grouped GEMMs. This keeps FlashInfer's own
build file (same flags, same sources, same link) and drops the generated kernel files that instantiate
anything else: the mixed-input (w4a8, fp4) and 16/32-bit grouped GEMMs, the dense mixed GEMMs and the SM80
ones. Every FP8 x FP8 tile FlashInfer generates is kept, so its tactic search chooses among the same
kernels as with a full build: the comparison with Triton stays fair to FlashInfer.

The runners of the other types are still compiled (their sources are shared), so the library has undefined
symbols for the kernels that were dropped; they are functions, bound lazily, and never called for FP8.
`flashinfer-fp8.sh check` loads the module to prove it.

Run with FlashInfer importable (the vLLM bundle's site, or a folder holding only its `flashinfer` package and
`pynvml`) and FLASHINFER_CUDA_ARCH_LIST=9.0a; prints the path of the file it wrote.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FP8_X_FP8 = re.compile(r"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\(\s*Sm90,\s*__nv_fp8_e4m3,\s*__nv_fp8_e4m3,")
OUT_NAME = "fp8only.ninja"


def keeps(source: Path) -> bool:
    """A generated kernel file stays when it instantiates an FP8 x FP8 grouped GEMM; every other source stays."""
    if not source.name.endswith(".generated.cu"):
        return True
    return bool(FP8_X_FP8.search(source.read_text()))


def cut(ninja_text: str) -> tuple[str, int, int]:
    """FlashInfer's build file without the dropped kernels' compile steps and objects (kept, dropped)."""
    dropped_objects: set[str] = set()
    lines = []
    for line in ninja_text.split("\n"):
        if line.startswith("build ") and ": link " not in line and line.endswith(".generated.cu"):
            obj, source = line.split()[1].rstrip(":"), Path(line.split()[-1])
            if not keeps(source):
                dropped_objects.add(obj)
                continue
        lines.append(line)
    out = [
        " ".join(p for p in line.split(" ") if p not in dropped_objects)
        if line.startswith("build ") and ": link " in line
        else line
        for line in lines
    ]
    kept = sum(1 for line in out if line.startswith("build "))
    return "\n".join(out) + "\n", kept, len(dropped_objects)


def main() -> int:
    from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module

    spec = gen_cutlass_fused_moe_sm90_module()
    spec.write_ninja()
    text, kept, dropped = cut(Path(spec.ninja_path).read_text())
    if not any(": link " in line and "fp8_fp8" in line for line in text.split("\n")):
        print("no link step or no FP8 runner in FlashInfer's build file: has FlashInfer changed?", file=sys.stderr)
        return 1
    target = Path(spec.build_dir) / OUT_NAME
    target.write_text(text)
    print(f"{kept} of {kept + dropped} build steps kept ({dropped} kernel files dropped)", file=sys.stderr)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
