#!/usr/bin/env bash
# Start one hold's campaign on the H200 machine, detached, from a copy of the repo under $HOME (each call
# re-lays the working tree; a job must not run from it). From the repo root, after the stash calls:
#   bash results/h200/launch.sh [--flashinfer] EXPERIMENT...
# --flashinfer also resumes FlashInfer's CUTLASS MoE build (flashinfer-build.sh) on CPUs 6-15, and the
# experiments then run pinned to CPUs 0-5 so that the build's nvcc jobs do not share their cores.
# Then `bash results/h200/collect.sh 540` in back-to-back calls (within 30 s of each other) until done.
set -u
fi=0; [ "${1:-}" = --flashinfer ] && { fi=1; shift; }
src=$(cd "$(dirname "$0")/../.." && pwd)
dst=$HOME/moeperf
rm -rf "$dst"; mkdir -p "$dst"
tar -C "$src" --exclude='./.gpu[0-9]*' --exclude='./.fi[0-9]*' --exclude='./runs' -cf - . | tar -C "$dst" -xf -
cd "$dst"
cpus=0-$(( $(nproc) - 1 ))
if [ $fi = 1 ]; then bash results/h200/flashinfer-build.sh start 6-15 10; cpus=0-5; fi
setsid nohup taskset -c "$cpus" bash results/h200/studies.sh "$@" >/tmp/studies.out 2>&1 < /dev/null &
sleep 5; cat "${CAMPAIGN_DIR:-$HOME/campaign}/progress" 2>/dev/null; bash results/h200/flashinfer-build.sh status
