"""The FP8-only cut of FlashInfer's build file (results/h200/flashinfer_fp8_ninja.py).

A wrong cut costs a hold: a kernel an FP8 MoE needs left out makes the module abort in the engine, and one kept
in vain costs minutes of a 2-core build. FlashInfer itself is not needed: the cut works on the file's text.
"""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "results" / "h200" / "flashinfer_fp8_ninja.py"


@pytest.fixture(scope="module")
def fp8_ninja():
    spec = importlib.util.spec_from_file_location("flashinfer_fp8_ninja", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tile(act: str, weight: str, out: str, m: int) -> str:
    return (
        f"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM(Sm90, {act}, {weight}, {out},\n"
        f"        void, EpilogueOpDefault, NONE,\n        {m}, 16, 128, 1, 1, 1,\n        false, false, false, true);\n"
    )


@pytest.fixture
def build_file(tmp_path: Path) -> tuple[str, Path]:
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "k_fp8.generated.cu").write_text(
        '#include "launcher.inl"\n'
        + tile("__nv_fp8_e4m3", "__nv_fp8_e4m3", "half", 128)
        + tile("__nv_fp8_e4m3", "__nv_fp8_e4m3", "__nv_bfloat16", 128)
    )
    (gen / "k_bf16.generated.cu").write_text(tile("__nv_bfloat16", "__nv_bfloat16", "__nv_bfloat16", 128))
    (gen / "k_w4a8.generated.cu").write_text(tile("__nv_fp8_e4m3", "cutlass::uint4b_t", "half", 64))
    src = tmp_path / "src"
    sources = {
        "k_fp8": gen / "k_fp8.generated.cu",
        "k_bf16": gen / "k_bf16.generated.cu",
        "k_w4a8": gen / "k_w4a8.generated.cu",
        "runner_fp8": src / "moe_gemm_kernels_fp8_fp8.cu",
        "runner_bf16": src / "moe_gemm_kernels_bf16_bf16.cu",
        "runner_w4a8": src / "moe_gemm_kernels_fp8_uint4.cu",
        "binding": src / "flashinfer_cutlass_fused_moe_binding.cu",
        "logger": src / "logger.cpp",
    }
    lines = ["cuda_home = /usr/local/cuda", ""]
    for name, path in sources.items():
        rule = "compile" if path.suffix == ".cpp" else "cuda_compile"
        lines.append(f"build /b/{name}.o: {rule} {path}")
    lines += ["", "build /b/m.so: link " + " ".join(f"/b/{n}.o" for n in sources), "default /b/m.so"]
    return "\n".join(lines), tmp_path / "copies"


def test_keeps_fp8_kernels_its_runner_and_shared_sources_only(fp8_ninja, build_file):
    text, copies = build_file
    out, kept, dropped = fp8_ninja.cut(text, copies)
    compiled = {
        line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("build ") and "link" not in line
    }
    assert compiled == {"/b/k_fp8.o", "/b/runner_fp8.o", "/b/binding.o", "/b/logger.o"}
    link = next(line for line in out.splitlines() if ": link " in line)
    assert link.split()[3:] == ["/b/k_fp8.o", "/b/runner_fp8.o", "/b/binding.o", "/b/logger.o"]
    assert (kept, dropped) == (5, 4)


def test_kernel_file_is_compiled_from_a_copy_with_only_bf16_output_tiles(fp8_ninja, build_file):
    text, copies = build_file
    out, _, _ = fp8_ninja.cut(text, copies)
    line = next(line for line in out.splitlines() if line.startswith("build /b/k_fp8.o"))
    copy = Path(line.split()[-1])
    assert copy.parent == copies
    body = copy.read_text()
    assert body.count("INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM") == 1
    assert "__nv_bfloat16," in body and ", half," not in body
    assert body.startswith('#include "launcher.inl"')  # includes are resolved by -I, not next to the file


def test_unchanged_copy_keeps_its_time_so_ninja_does_not_rebuild(fp8_ninja, build_file):
    text, copies = build_file
    fp8_ninja.cut(text, copies)
    copy = copies / "k_fp8.generated.cu"
    before = copy.stat().st_mtime_ns
    fp8_ninja.cut(text, copies)
    assert copy.stat().st_mtime_ns == before


def test_kernel_file_without_bf16_output_is_refused(fp8_ninja, tmp_path):
    only_half = tmp_path / "k.generated.cu"
    only_half.write_text(tile("__nv_fp8_e4m3", "__nv_fp8_e4m3", "half", 128))
    with pytest.raises(SystemExit, match="no __nv_bfloat16 output tile"):
        fp8_ninja.one_output_type(only_half, tmp_path / "copies")
