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
echo "this machine: $(ldd --version | head -1); $(strings "$(ldconfig -p | awk '/libstdc\+\+\.so\.6 / {print $NF; exit}')" 2>/dev/null | grep -E '^GLIBCXX_[0-9.]+$' | sort -V | tail -1)"
# CUDA libraries the module names that the loader cannot find by itself: look for them on this machine (the
# CUDA toolkit, the nvidia wheels) and keep their folders in $HOME/fi-ld.env, which gpu-env.sh sources.
: >"$HOME/fi-ld.env"
for lib in $(ldd "$aot/fused_moe_90.so" | awk '/not found/ {print $1}'); do
  found=$(find /usr /opt "$site" -name "$lib" 2>/dev/null | head -1)
  echo "the loader does not find $lib; found at: ${found:-nowhere}"
  if [ -n "$found" ]; then
    echo "export LD_LIBRARY_PATH=$(dirname "$found")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" >>"$HOME/fi-ld.env"
  fi
done
. "$HOME/fi-ld.env"
PYTHONPATH=$site FLASHINFER_CUDA_ARCH_LIST=9.0a python3 - <<'EOF'
import time
import torch  # as in the engine: torch and its CUDA libraries are loaded first
torch.zeros(1, device="cuda")
t0 = time.monotonic()
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
spec = gen_cutlass_fused_moe_sm90_module()
assert spec.is_aot, f"FlashInfer does not see the module at {spec.aot_path}: it would build it"
spec.build_and_load()
print(f"FlashInfer loads the prebuilt {spec.aot_path} ({time.monotonic() - t0:.1f} s); no build")
EOF
