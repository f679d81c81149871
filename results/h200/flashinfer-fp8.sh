#!/usr/bin/env bash
# FlashInfer 0.6.14's CUTLASS fused-MoE module (fused_moe_90) for vLLM 0.26, built with only what a
# per-tensor FP8 MoE of a bf16 model runs (flashinfer_fp8_ninja.py says what is kept and why): 34 of the full
# module's 183 build steps, the 18 kernel files among them at half their size. It is built off the H200 (any machine with CUDA 13.0's nvcc: no GPU is needed to compile),
# carried in as git-ignored parts and put where FlashInfer looks for prebuilt modules
# (flashinfer/data/aot/fused_moe_90/fused_moe_90.so), so an engine that picks FlashInfer CUTLASS loads it
# and builds nothing. The module is a compiled binary: it never goes into git; this script rebuilds it.
#   build [JOBS]       here: FlashInfer from the bundle's parts (.gpuK), the FP8-only build file, then ninja
#                      (JOBS, default: all cores). Log in $FI_LOG.
#   pack [SIZE]        here: the built module, xz'd, as parts of SIZE (default 11m) in git-ignored .fi1, .fi2, ...
#                      each with its install script and the module's SHA-256.
#   check [SO]         here: load the module with FlashInfer's own loader (tvm_ffi) against a stub driver, and
#                      say which glibc and libstdc++ versions it needs.
# On the H200, after the bundle's stash calls: one call per part, carrying .fiK, running `bash .fiK/install.sh`;
# the call that brings the last part unpacks the module into the bundle's FlashInfer and checks it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/carry-lib.sh"
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
FI_SITE=${FI_SITE:-$HOME/fi-site}            # the bundle unpacked (here; on the H200 it is $HOME/moeperf-stash/site)
FI_LOG=${FI_LOG:-$HOME/fi-fp8-build.log}
so_path() { echo "$HOME/.cache/flashinfer/0.6.14/90a/cached_ops/fused_moe_90/fused_moe_90.so"; }
# A CUDA home for the build: the toolkit nvcc belongs to, plus what the module includes and links that a
# compiler-only toolkit lacks (cuBLAS, NVRTC and cuRAND headers and libraries, from their CUDA 13.0 wheels) and a
# stub libcuda.so.1 (the driver's own is found at load time on the GPU machine).
cuda_home() {
  local ch=$HOME/fi-cuda real
  # the toolkit's own folder (nvcc on the PATH may be a wrapper script elsewhere)
  real=$(nvcc -v -x cu -E /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
  [ -f "$real/bin/nvcc.profile" ] || real=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  [ -f "$real/bin/nvcc.profile" ] || real=/usr/local/cuda
  if [ ! -f "$ch/.ready" ]; then
    rm -rf "$ch"; mkdir -p "$ch/bin" "$ch/include" "$ch/lib64/stubs"
    printf '#!/bin/sh\nexec %s/bin/nvcc "$@"\n' "$real" >"$ch/bin/nvcc"; chmod +x "$ch/bin/nvcc"
    ln -s "$real"/include/* "$ch/include/"; ln -s "$real"/lib64/* "$ch/lib64/" 2>/dev/null || true
    if [ ! -e "$ch/include/cublasLt.h" ] || [ ! -e "$ch/include/nvrtc.h" ] || [ ! -e "$ch/include/curand_kernel.h" ]; then
      local w; w=$(mktemp -d)
      python3 -m pip download -q --no-deps -d "$w" "nvidia-cublas>=13.0,<13.1" "nvidia-cuda-nvrtc>=13.0,<13.1" \
        "nvidia-curand>=10.4,<10.4.1"
      for f in "$w"/*.whl; do python3 -m zipfile -e "$f" "$w/x"; done
      cp -n "$w"/x/nvidia/cu13/include/* "$ch/include/" 2>/dev/null || true
      cp -n "$w"/x/nvidia/cu13/lib/* "$ch/lib64/"; rm -rf "$w"
      ln -sf libnvrtc.so.13 "$ch/lib64/libnvrtc.so"
    fi
    echo 'void cuGetErrorString(void) {}' | cc -shared -fPIC -Wl,-soname,libcuda.so.1 -x c - -o "$ch/lib64/stubs/libcuda.so"
    touch "$ch/.ready"
  fi
  echo "$ch"
}
case "${1:-}" in
build)
  jobs=${2:-$(nproc)}
  if [ ! -d "$FI_SITE/flashinfer" ]; then
    mkdir -p "$FI_SITE"
    bundle_parts "$root" | xargs cat | xz -dc | tar -x -C "$FI_SITE"
  fi
  # Only FlashInfer and pynvml on the path: the bundle's other packages are built for the H200's Python.
  shim=$(mktemp -d); ln -s "$FI_SITE/flashinfer" "$shim/flashinfer"
  python3 -c 'import pynvml' 2>/dev/null || python3 -m pip install -q --target "$shim" nvidia-ml-py
  export CUDA_HOME; CUDA_HOME=$(cuda_home)
  ninja_file=$(PYTHONPATH=$shim python3 "$here/flashinfer_fp8_ninja.py")
  echo "$(date -u +%FT%TZ) build start: $ninja_file, $jobs jobs, nvcc $(nvcc --version | tail -1)" >>"$FI_LOG"
  t0=$(date +%s)
  ninja -C "$(dirname "$ninja_file")" -f "$(basename "$ninja_file")" -j "$jobs" >>"$FI_LOG" 2>&1
  # The dropped types' runners and kernels are called from code an FP8 MoE never runs, but some are referenced
  # by address, so the loader wants them even with lazy binding (seen: "undefined symbol: ...kernelLauncher<...
  # half ...>"). Link in a stub for each one instead: it says which was called, then aborts.
  so=$(so_path); stubs=$(dirname "$so")/dropped_stubs
  nm -D --undefined-only "$so" | awk '{print $2}' | grep -E '^_ZNK?12tensorrt_llm' >"$stubs.txt" || true
  if [ -s "$stubs.txt" ]; then
    {
      echo '#include <stdio.h>'; echo '#include <stdlib.h>'
      echo 'static void dropped(const char *name) {'
      echo '  fprintf(stderr, "fused_moe_90 built for per-tensor FP8 only (flashinfer-fp8.sh): %s is not in it\n", name);'
      echo '  abort();'
      echo '}'
      awk '{printf "void s%d(void) __asm__(\"%s\");\nvoid s%d(void) { dropped(\"%s\"); }\n", NR, $1, NR, $1}' "$stubs.txt"
    } >"$stubs.c"
    cc -c -fPIC -O1 "$stubs.c" -o "$stubs.o"
    link=$(ninja -C "$(dirname "$ninja_file")" -f "$(basename "$ninja_file")" -t commands "$so" | tail -1)
    (cd "$(dirname "$ninja_file")" && eval "$link $stubs.o")
    echo "$(date -u +%FT%TZ) linked $(wc -l <"$stubs.txt") stubs for the dropped types' symbols" >>"$FI_LOG"
  fi
  left=$(nm -D --undefined-only "$so" | grep -cE ' _ZNK?12tensorrt_llm' || true)
  [ "$left" = 0 ] || { echo "$so: $left tensorrt_llm symbols still undefined" | tee -a "$FI_LOG" >&2; exit 1; }
  echo "$(date -u +%FT%TZ) BUILD DONE in $(( $(date +%s) - t0 )) s: $(ls -la "$(so_path)")" >>"$FI_LOG" ;;
pack)
  size=${2:-11m}
  so=$(so_path); tmp=$(mktemp -d)
  xz -T0 -9 -c "$so" >"$tmp/fused_moe_90.so.xz"
  sum=$(sha256sum "$so" | cut -d' ' -f1)
  rm -rf "$root"/.fi[0-9]*
  split -b "$size" -d "$tmp/fused_moe_90.so.xz" "$tmp/part_"
  parts=("$tmp"/part_*)
  for i in "${!parts[@]}"; do
    d="$root/.fi$((i + 1))"; mkdir -p "$d"; mv "${parts[$i]}" "$d/"
    echo "${#parts[@]}" >"$d/parts"; echo "$sum" >"$d/sha256"
    cp "$here/flashinfer-fp8-install.sh" "$d/install.sh"
  done
  rm -rf "$tmp"; du -sh "$root"/.fi[0-9]*
  echo "carry .fi1 .. .fi${#parts[@]} one per call after the bundle's, each running: bash .fiK/install.sh" ;;
check)
  # Here, with no GPU: the module loads the way FlashInfer loads it (tvm_ffi, lazy binding), against the build's
  # CUDA home and a stub driver; and which C and C++ runtime versions it needs from the GPU machine's image.
  so=${2:-$(so_path)}; ch=$(cuda_home)
  ln -sf libcuda.so "$ch/lib64/stubs/libcuda.so.1"
  ls -la "$so"
  echo "undefined symbols: $(nm -D --undefined-only "$so" | wc -l) (the dropped types' runners and kernels, CUDA's, the C++ runtime's)"
  echo "needs: $(objdump -T "$so" | grep -oE 'GLIBC(XX)?_[0-9.]+' | sort -uV | awk -F_ '{v[$1]=$0} END {print v["GLIBC"], v["GLIBCXX"]}')"
  LD_LIBRARY_PATH=$ch/lib64:$ch/lib64/stubs python3 -c \
    'import sys, tvm_ffi; tvm_ffi.load_module(sys.argv[1]); print("tvm_ffi loads", sys.argv[1])' "$so" ;;
*) sed -n 2,15p "$0" >&2; exit 2 ;;
esac
