#!/usr/bin/env bash
# Start one hold's campaign on the H200 machine, detached, from a copy of the repo under $HOME (each call
# re-lays the working tree; a job must not run from it). From the repo root, after the stash calls:
#   bash results/h200/launch.sh [--flashinfer] [--prometheus] [--seed] [--runner SCRIPT] EXPERIMENT...
# --flashinfer also resumes FlashInfer's CUTLASS MoE build (flashinfer-build.sh) on CPUs 8-15, and the
# experiments then run pinned to CPUs 0-7 so that the build's nvcc jobs do not share their cores.
# --prometheus starts the Debian package's Prometheus, carried in as .prom/prometheus.xz (made here by
# `bash results/h200/prometheus-pack.sh`; git-ignored), with the shipped config and 1 s scrapes, so that
# it scrapes every engine and the client metrics of the runs; after each run, every dashboard query is
# run against it (`moeperf dashboards check`, into the run folder's dashboards-check.json).
# --seed starts every engine from the JIT cache an earlier hold packed (jit-seed.sh; carried in as .jit/,
# git-ignored): the runs get --engine.cache_state seeded, so no warm-up pass and no cold first engine.
# --runner SCRIPT runs SCRIPT (e.g. results/h200/tune-proof.sh) instead of studies.sh, with the same arguments.
# Then `bash results/h200/collect.sh 540` in back-to-back calls (within 30 s of each other) until done.
set -u
fi=0; prom=0; seed=0; runner=results/h200/studies.sh
while [ $# -gt 0 ]; do
  case "$1" in
    --flashinfer) fi=1 ;; --prometheus) prom=1 ;; --seed) seed=1 ;; --runner) runner=$2; shift ;; *) break ;;
  esac; shift
done
src=$(cd "$(dirname "$0")/../.." && pwd)
dst=$HOME/moeperf
rm -rf "$dst"; mkdir -p "$dst"
tar -C "$src" --exclude='./.gpu[0-9]*' --exclude='./.fi[0-9]*' --exclude='./runs' -cf - . | tar -C "$dst" -xf -
cd "$dst"
if [ $prom = 1 ]; then
  # Unpacked here, or by an earlier call that carried .prom alone (the same two commands): a call carries the
  # tracked tree and its parts within 64 MiB, and the tree grows with every committed hold.
  if [ -f .prom/prometheus.xz ]; then
    mkdir -p "$HOME/prom/bin" && xz -dc .prom/prometheus.xz >"$HOME/prom/bin/prometheus" && chmod +x "$HOME/prom/bin/prometheus"
  fi
  [ -x "$HOME/prom/bin/prometheus" ] || { echo "--prometheus: no .prom/prometheus.xz carried and no $HOME/prom/bin/prometheus" >&2; exit 2; }
  PATH=$HOME/prom/bin:$PATH PYTHONPATH=$PWD:$HOME/moeperf-stash/site setsid nohup python3 -m dashboards.cli prometheus \
    --port 9090 --data "$HOME/prom/data" --scrape-interval 1s >"$HOME/prom/serve.log" 2>&1 </dev/null &
  export MOEPERF_DASHBOARDS_CHECK=http://127.0.0.1:9090
fi
if [ $seed = 1 ]; then  # unpacked here, or by an earlier call carrying .jit alone (`bash results/h200/jit-seed.sh unpack`)
  if [ -f .jit/jit-seed.tar.xz ]; then bash results/h200/jit-seed.sh unpack; fi
  [ -d "$HOME/jit-seed" ] || { echo "--seed: no .jit/jit-seed.tar.xz carried and no $HOME/jit-seed" >&2; exit 2; }
  export MOEPERF_ARGS="${MOEPERF_ARGS:-} --engine.cache_state seeded --engine.jit_cache_seed $HOME/jit-seed"
fi
# The card that came decides the engines' accelerator type (Ray's name for it: "NVIDIA H100 80GB HBM3" -> H100): the
# experiment files say H200, and an H100 is what often starts; a type the machine lacks would leave every engine
# unplaced. An --engine.accelerator_type given in MOEPERF_ARGS wins.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | awk '{print $2}')
if [ -n "$card" ] && [[ " ${MOEPERF_ARGS:-} " != *" --engine.accelerator_type "* ]]; then
  export MOEPERF_ARGS="${MOEPERF_ARGS:-} --engine.accelerator_type $card"
fi
echo "card: ${card:-none seen}; MOEPERF_ARGS:${MOEPERF_ARGS:-}"
# The machine's CPU and GPU layout, once per hold: which vCPUs share a core or a NUMA node with the GPU.
mkdir -p "${CAMPAIGN_DIR:-$HOME/campaign}"
{ lscpu; lscpu -e; nvidia-smi topo -m; cat /sys/fs/cgroup/cpu.max; } >"${CAMPAIGN_DIR:-$HOME/campaign}/topology.txt" 2>&1
cpus=0-$(( $(nproc) - 1 ))
if [ $fi = 1 ]; then bash results/h200/flashinfer-build.sh start 8-15 8; cpus=0-7; fi
setsid nohup taskset -c "$cpus" bash "$runner" "$@" >/tmp/studies.out 2>&1 < /dev/null &
sleep 5; cat "${CAMPAIGN_DIR:-$HOME/campaign}/progress" 2>/dev/null; bash results/h200/flashinfer-build.sh status
