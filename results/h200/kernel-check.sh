#!/usr/bin/env bash
# The GPU check of moe_opt's chunked alignment and Triton top-k sum (2026-12-07), which no GPU has run yet:
# the two kernels passed their torch twins in Triton's CPU interpreter only, and the session's device time ran
# out before this call. Two steps:
#   bash results/h200/kernel-check.sh here [OLD_COMMIT]   # here: the kernels before the change into git-ignored .old/
#   bash results/h200/kernel-check.sh gpu                 # on the GPU, one call carrying .old (no vLLM needed)
# `gpu` runs the kernels' tests on the real GPU, then times the whole forward per cell with the old and the new
# code alternating (kernel_cells.py, twice each), into $OUT/cells.jsonl. The vLLM side of the comparison is
# `python3 -m moe_opt.bench.vs_vllm` (needs the bundle); on 2026-12-07 the old code gave 47 of 56 cells.
set -u
case "${1:-}" in
  here)
    old=${2:-8bef3b6}
    grep -qx '/.old/' .git/info/exclude || echo '/.old/' >>.git/info/exclude
    rm -rf .old && mkdir -p .old && git archive "$old" moe_opt | tar -x -C .old/ && cp results/h200/kernel_cells.py .old/
    echo "kernel-check.sh: .old/ holds moe_opt at $old; carry it: [\".old\"]" ;;
  gpu)
    export PYTHONUNBUFFERED=1
    new=$PWD; old=$PWD/.old
    nvidia-smi -L
    PYTHONPATH=$new timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_routing_align.py \
      tests/kernels/test_kernel_topk_sum.py tests/kernels/test_kernel_fused_moe.py tests/kernels/test_bench_align_paths.py \
      tests/gpu/test_gpu_kernels.py \
      >"$OUT/gpu-tests.log" 2>&1
    echo "tests rc=$?"; tail -3 "$OUT/gpu-tests.log"
    # where one launch stops paying (align.ONE_LAUNCH_MAX_SLOTS, 4,096 slots since 2026-12-07, not yet timed)
    PYTHONPATH=$new timeout 200 python3 -m moe_opt.bench.align_paths --out "$OUT/align_paths.json" >"$OUT/align_paths.log" 2>&1
    echo "align_paths rc=$?"; tail -1 "$OUT/align_paths.log"
    cells() { (cd "$2" && PYTHONPATH=$2 timeout 120 python3 "$3" --label "$1" --batches 64,256,1024,4096 >>"$OUT/cells.jsonl" 2>>"$OUT/cells.err"); echo "cells $1 rc=$?"; }
    [ -d "$old" ] || { echo "kernel-check.sh: no .old carried, so no old-against-new cells"; exit 0; }
    for _ in 1 2; do cells old "$old" kernel_cells.py; cells new "$new" results/h200/kernel_cells.py; done
    wc -l "$OUT/cells.jsonl" ;;
  *) echo "usage: bash results/h200/kernel-check.sh here [OLD_COMMIT] | gpu" >&2; exit 2 ;;
esac
