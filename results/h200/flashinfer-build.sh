#!/usr/bin/env bash
# FlashInfer's CUTLASS fused-MoE module (fused_moe_90) for vLLM 0.26 / FlashInfer 0.6.14 on the H200
# machine, built across holds: it takes about 43 min of the machine's 16 cores and a hold lasts 30.
# Subcommands, run from the repo root on the H200 machine after the bundle's stash calls:
#   start [CPUS] [JOBS]  unpack what earlier holds built (the git-ignored .fi-cache/ parts, if carried),
#                        then build in the background, detached, pinned to CPUS (default 6-15) with
#                        JOBS ninja jobs (default 10); progress in $FI_LOG (objects done, every 30 s).
#   status               objects built so far, nvcc processes, the module's .so if linked.
#   pack [PART_MB]       stop the build and pack FlashInfer's whole JIT workspace (objects, generated
#                        sources, ninja's log and deps, mtimes kept) as fi-cache.tar.xz.NN parts of PART_MB
#                        MiB (default 15) in $HOME/fi-pack.
#   send K               copy parts 4K..4K+3 to $OUT (a call brings back at most 64 MiB): K = 0, 1, ...
#                        until it says none are left. Here, put them in git-ignored folders .fi1, .fi2, ...
#                        (at most 45 MiB each, beside the bundle's .gpuK).
#   stash DIR            next hold: copy a carried part folder (.fiK) to $HOME/fi-stash, one call per folder;
#                        `start` unpacks $HOME/fi-stash and ninja builds only what is missing.
# The module is a compiled binary: it never goes into git.
#   plan                 how many build steps ninja would still run (a dry run), and why the first would run.
# Why it resumes: FlashInfer writes generated sources only when their content changes, the bundle
# unpacks to the same path in every hold ($HOME/moeperf-stash/site) and tar keeps the objects' mtimes, so
# ninja finds the carried objects up to date: same command lines in .ninja_log, and every input older
# than the object's mtime recorded there. pip does not keep a wheel's file times (it writes them at install),
# so a bundle built later than the objects would make every source newer than them; `start` therefore sets
# the bundle's files to one fixed old time first (their content, not their time, is what the objects are of).
set -u
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
export PYTHONPATH=$HOME/moeperf-stash/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
FI_WS=$HOME/.cache/flashinfer
FI_LOG=${FI_LOG:-$HOME/fi-build.log}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
objects() { find "$FI_WS" -path '*fused_moe_90*' -name '*.o' 2>/dev/null | wc -l; }
pin_times() { find "$HOME/moeperf-stash/site" -newermt 2026-01-02 -exec touch -h -d 2026-01-01T00:00:00Z {} + 2>/dev/null; }
unpack() {  # once per machine: what earlier holds built, stashed from the carried .fiK folders
  if [ ! -f "$FI_WS/.unpacked" ] && ls "$HOME"/fi-stash/fi-cache.tar.xz.* >/dev/null 2>&1; then
    mkdir -p "$FI_WS"; cat "$HOME"/fi-stash/fi-cache.tar.xz.* | xz -d | tar -x -C "$FI_WS" && touch "$FI_WS/.unpacked"
    echo "$(date -u +%FT%TZ) unpacked $(objects) objects carried from earlier holds" >>"$FI_LOG"
  fi
}
module_dir() { dirname "$(find "$FI_WS" -path '*cached_ops/fused_moe_90/build.ninja' | head -1)"; }
case "${1:-status}" in
start)
  cpus=${2:-6-15}; jobs=${3:-10}
  unpack
  pin_times
  echo "$(date -u +%FT%TZ) build start on cpus $cpus, $jobs jobs ($(objects) objects present)" >>"$FI_LOG"
  MAX_JOBS=$jobs setsid nohup taskset -c "$cpus" python3 -c '
import time
t0 = time.monotonic()
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
spec = gen_cutlass_fused_moe_sm90_module()
print("ninja file:", spec.ninja_path if hasattr(spec, "ninja_path") else spec.name, flush=True)
spec.build(verbose=True)
print(f"BUILD DONE in {time.monotonic() - t0:.0f} s: {spec.jit_library_path}", flush=True)
' >>"$FI_LOG.ninja" 2>&1 &
  # The monitor needs a session of its own too: the device kills what a call leaves in the call's session.
  FI_WS=$FI_WS FI_LOG=$FI_LOG setsid nohup bash -c 'while sleep 30; do
     echo "$(date -u +%FT%TZ) objects=$(find "$FI_WS" -path "*fused_moe_90*" -name "*.o" | wc -l) nvcc=$(pgrep -c nvcc)" >>"$FI_LOG"
     grep -q "BUILD DONE" "$FI_LOG.ninja" 2>/dev/null && break
   done' </dev/null >/dev/null 2>&1 &
  disown -a
  ;;
plan)
  unpack; pin_times; d=$(module_dir)
  [ -d "$d" ] || { echo "no fused_moe_90 build.ninja under $FI_WS"; exit 1; }
  echo "steps ninja would still run: $(ninja -n -C "$d" -f build.ninja | grep -c '^\[')"
  ninja -n -d explain -C "$d" -f build.ninja 2>&1 | grep '^ninja explain' | head -3
  ;;
status)
  echo "objects=$(objects) nvcc=$(pgrep -c nvcc || true)"; ls -la "$FI_WS"/*/*/cached_ops/fused_moe_90/*.so 2>/dev/null
  tail -3 "$FI_LOG" 2>/dev/null; grep -E "BUILD DONE|FAILED|rror" "$FI_LOG.ninja" 2>/dev/null | tail -3
  ;;
pack)
  pkill -f gen_cutlass_fused_moe_sm90_module; pkill -x ninja; pkill -x nvcc; sleep 2
  # Half-written objects of killed jobs: ninja would trust their mtimes, so drop any newer than the log.
  log=$(find "$FI_WS" -path '*fused_moe_90*' -name .ninja_log | head -1)
  [ -n "$log" ] && find "$(dirname "$log")" -name '*.o' -newer "$log" -delete
  echo "$(date -u +%FT%TZ) packed $(objects) objects" >>"$FI_LOG"
  rm -rf "$HOME/fi-pack"; mkdir -p "$HOME/fi-pack"
  tar -C "$FI_WS" -cf - . | xz -T0 -3 | split -b "${2:-15}m" -d - "$HOME/fi-pack/fi-cache.tar.xz."
  ls -la "$HOME/fi-pack"
  ;;
send)
  k=${2:-0}; ls "$HOME"/fi-pack/fi-cache.tar.xz.* | sort | sed -n "$((4 * k + 1)),$((4 * k + 4))p" | xargs -r cp -t "$OUT"
  [ "$k" = 0 ] && { cp "$FI_LOG" "$OUT/fi-build.log"; tail -c 2000000 "$FI_LOG.ninja" >"$OUT/fi-build-ninja.log"; }
  ls "$OUT" | grep -q fi-cache || echo "no parts left"; ls -la "$OUT"
  ;;
stash)
  mkdir -p "$HOME/fi-stash"; cp "$root/${2:?part folder}"/fi-cache.tar.xz.* "$HOME/fi-stash/" && ls -la "$HOME/fi-stash"
  ;;
esac
