"""Write FlashInfer's CUTLASS fused-MoE build file cut down to what a per-tensor FP8 MoE runs on Hopper.

FlashInfer 0.6.14 builds `fused_moe_90` for every input type at once: 183 ninja steps, about 43 minutes of
the H200 machine's 16 cores, more than one hold. A per-tensor FP8 MoE (what vLLM 0.26 sends to FlashInfer
CUTLASS for a static-scale FP8 checkpoint) runs only the FP8 x FP8 grouped GEMMs. This keeps FlashInfer's own
build file (same flags, same sources, same link) and drops the generated kernel files that instantiate
anything else: the mixed-input (w4a8, fp4) and 16/32-bit grouped GEMMs, the dense mixed GEMMs and the SM80
ones. Every FP8 x FP8 tile FlashInfer generates is kept, so its tactic search chooses among the same
kernels as with a full build: the comparison with Triton stays fair to FlashInfer.

The runners of the other types (`moe_gemm_kernels_<activation>_<weight>.cu`, one explicit instantiation of
`MoeGemmRunner` each, no virtual functions) are dropped too. So the library has undefined symbols: the
other types' runners and kernels. They are functions, called directly from code that runs only when FlashInfer
is asked for that type. FlashInfer loads modules with tvm_ffi, which opens them with lazy binding (a library
with an undefined function loads; seen with tvm_ffi 0.1.15), so the module loads and an FP8 MoE never reaches
them. `flashinfer-fp8-install.sh` loads it on the GPU machine to prove it.

Run with FlashInfer importable (the vLLM bundle's site, or a folder holding only its `flashinfer` package and
`pynvml`) and FLASHINFER_CUDA_ARCH_LIST=9.0a; prints the path of the file it wrote.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FP8_X_FP8 = re.compile(r"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\(\s*Sm90,\s*__nv_fp8_e4m3,\s*__nv_fp8_e4m3,")
# moe_gemm_kernels_<activation>_<weight>.cu: one explicit instantiation of MoeGemmRunner per type pair
TYPED_RUNNER = re.compile(r"^moe_gemm_kernels_(\w+?)_(\w+)\.cu$")
INSTANTIATION = re.compile(r"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\((.*?)\);", re.DOTALL)
OUT_NAME = "fp8only.ninja"
OUTPUT_DTYPE = "__nv_bfloat16"  # what vLLM's FP8 MoE writes for a bf16 model (FlashInfer's output_dtype)


def keeps(source: Path) -> bool:
    """Kept: the FP8 x FP8 grouped-GEMM kernel files, the FP8 x FP8 runner, and every source of no one type."""
    if source.name.endswith(".generated.cu"):
        return bool(FP8_X_FP8.search(source.read_text()))
    typed = TYPED_RUNNER.match(source.name)
    return typed is None or typed.groups() == ("fp8", "fp8")


def one_output_type(kernel_file: Path, out_dir: Path) -> Path:
    """A copy of a generated kernel file that instantiates only the tiles writing ``OUTPUT_DTYPE``.

    Each FP8 x FP8 file instantiates every tile twice, for half and for bf16 output; the model is bf16, so
    FlashInfer never runs the half ones, and they are half of the compile time.
    """

    def keep(match: re.Match[str]) -> str:
        output_type = match.group(1).split(",")[3].strip()
        return match.group(0) if output_type == OUTPUT_DTYPE else ""

    text, n_kept = INSTANTIATION.subn(keep, kernel_file.read_text())
    if OUTPUT_DTYPE not in text:
        raise SystemExit(f"{kernel_file}: no {OUTPUT_DTYPE} output tile: has FlashInfer's generator changed?")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / kernel_file.name
    if not target.exists() or target.read_text() != text:  # an unchanged copy keeps its time: no rebuild
        target.write_text(text)
    return target


def cut(ninja_text: str, copies_dir: Path | None = None) -> tuple[str, int, int]:
    """FlashInfer's build file without the dropped sources' compile steps and objects (kept, dropped).

    With ``copies_dir``, the kept kernel files are compiled from their one-output-type copies written there.
    """
    dropped_objects: set[str] = set()
    lines = []
    for line in ninja_text.split("\n"):
        if line.startswith("build ") and ": link " not in line:
            obj, source = line.split()[1].rstrip(":"), Path(line.split()[-1])
            if not keeps(source):
                dropped_objects.add(obj)
                continue
            if copies_dir is not None and source.name.endswith(".generated.cu"):
                line = line[: -len(str(source))] + str(one_output_type(source, copies_dir))
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
    copies_dir = Path(spec.build_dir) / f"kernels_fp8_{OUTPUT_DTYPE.strip('_')}"
    text, kept, dropped = cut(Path(spec.ninja_path).read_text(), copies_dir)
    if not any(": link " in line and "fp8_fp8" in line for line in text.split("\n")):
        print("no link step or no FP8 runner in FlashInfer's build file: has FlashInfer changed?", file=sys.stderr)
        return 1
    target = Path(spec.build_dir) / OUT_NAME
    target.write_text(text)
    print(f"{kept} of {kept + dropped} build steps kept ({dropped} sources of other types dropped)", file=sys.stderr)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
