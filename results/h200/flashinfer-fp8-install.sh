#!/usr/bin/env bash
# On the H200 machine, from the repo root, after the bundle's stash calls: keep this part of the FP8-only
# FlashInfer CUTLASS MoE module (flashinfer-fp8.sh pack) outside the repo; once all parts are here, put the
# module where FlashInfer loads prebuilt modules from, so no engine builds it, and load it once to prove it.
set -euo pipefail
part_dir=$(cd "$(dirname "$0")" && pwd)
site=${STASH:-$HOME/moeperf-stash}/site
parts_dir=$HOME/fi-parts
mkdir -p "$parts_dir"
cp "$part_dir"/part_* "$parts_dir/"
want=$(cat "$part_dir/parts"); have=$(ls "$parts_dir" | wc -l)
echo "module parts here: $have of $want"
[ "$have" -eq "$want" ] || exit 0
[ -f "$site/.done" ] || { echo "the bundle is not unpacked in $site yet: run its stash calls first" >&2; exit 2; }
aot=$site/flashinfer/data/aot/fused_moe_90
mkdir -p "$aot"
cat "$parts_dir"/part_* | xz -dc >"$aot/fused_moe_90.so"
echo "$(cat "$part_dir/sha256")  $aot/fused_moe_90.so" | sha256sum -c -
PYTHONPATH=$site FLASHINFER_CUDA_ARCH_LIST=9.0a python3 - <<'EOF'
import time
t0 = time.monotonic()
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
spec = gen_cutlass_fused_moe_sm90_module()
assert spec.is_aot, f"FlashInfer does not see the module at {spec.aot_path}: it would build it"
spec.build_and_load()
print(f"FlashInfer loads the prebuilt {spec.aot_path} ({time.monotonic() - t0:.1f} s); no build")
EOF
