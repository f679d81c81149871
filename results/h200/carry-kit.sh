#!/usr/bin/env bash
# Here, on a fresh development machine: make everything a GPU hold carries that is not in git, in the order the
# hold sends it, skipping what is already there; then hold-plan.sh checks it and prints the calls.
#   bash results/h200/carry-kit.sh [--fi]     (about 4 minutes; with --fi about 21 more on 2 cores)
# .gpu1..N: the vLLM 0.26 bundle (bundle/build-vllm-bundle.sh), split to fit beside the tree (resplit.sh).
# .fi1: claim 2's FP8-only FlashInfer module (flashinfer-fp8.sh build, check, pack), with --fi.
# .prom: Debian's prometheus binary (prometheus-pack.sh; scripts/setup.sh installs it).
# The development machine is new in every session, so none of these outlives one; this makes them again.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
fi=0; [ "${1:-}" != --fi ] || fi=1
t0=$(date +%s)
say() { echo "carry-kit.sh: $* ($(( $(date +%s) - t0 )) s)"; }
source results/h200/carry-lib.sh
if ! bundle_is_whole .; then
  bash results/h200/bundle/build-vllm-bundle.sh ray==2.60.0
  bash results/h200/resplit.sh
  say "bundle built"
fi
if [ $fi = 1 ] && [ ! -f .fi1/install.sh ]; then
  export FI_SITE=${FI_SITE:-$HOME/fi-site}
  bash results/h200/flashinfer-fp8.sh build
  bash results/h200/flashinfer-fp8.sh check
  bash results/h200/flashinfer-fp8.sh pack
  say "FlashInfer module built"
fi
[ -f .prom/prometheus.xz ] || bash results/h200/prometheus-pack.sh
say "done; next: bash results/h200/hold-plan.sh $([ $fi = 1 ] && echo '--fi ')LAUNCH_ARGS"
