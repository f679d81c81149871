#!/usr/bin/env bash
# Here, before a GPU hold: check that every git-ignored part the hold carries is present and fits a call, and
# print the hold's `run` calls in order (what each carries, what it runs), so the calls can go back to back:
# the machine forgets everything 30 s after a call ends.
#   bash results/h200/hold-plan.sh [--fi] [--seed] LAUNCH_ARGS...
# --fi: the last bundle part's call also carries .fi1 (claim 2's FlashInfer module: flashinfer-fp8.sh pack).
# --seed: .jit (a JIT seed, jit-seed.sh keep) is carried to the launch, which gets --seed.
# LAUNCH_ARGS: what launch.sh gets, e.g. `--prometheus h200-claim2-flashinfer-vs-triton`; MOEPERF_ARGS and
# MOEPERF_PREWARM, when set here, are written into the launch call.
# Exits 2, saying what to do, when a part is missing or a call would carry more than 64 MiB.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
fi=0; seed=0; prom=0
while [ $# -gt 0 ]; do
  case "$1" in --fi) fi=1 ;; --seed) seed=1 ;; *) break ;; esac; shift
done
[[ " $* " != *" --prometheus "* ]] || prom=1
limit=$((64 * 1048576))
source results/h200/carry-lib.sh
tree=$(tree_bytes)
size_of() { du -sb "$@" | awk '{s += $1} END {print s + 0}'; }
fail() { echo "hold-plan.sh: $*" >&2; exit 2; }
fits() {  # name, paths...: the tree plus these within a call
  local name=$1; shift
  local total=$((tree + $(size_of "$@")))
  [ "$total" -le "$limit" ] || fail "$name would carry $((total / 1048576)) MiB with the tree, over 64: run results/h200/resplit.sh"
}
parts=$(ls -d .gpu[0-9]* 2>/dev/null | sort -V) || true
[ -n "$parts" ] || fail "no .gpuK parts: bash results/h200/bundle/build-vllm-bundle.sh ray==2.60.0, then resplit.sh"
n=$(echo "$parts" | wc -l)
bundle_is_whole . || fail ".gpu1/parts says $(cat .gpu1/parts) parts, $n are here: build them again"
[ $fi = 0 ] || [ -f .fi1/install.sh ] || fail "no .fi1: bash results/h200/flashinfer-fp8.sh build && check && pack"
[ $seed = 0 ] || [ -f .jit/jit-seed.tar.xz ] || fail "no .jit: bash results/h200/jit-seed.sh keep DIR"
[ $prom = 0 ] || [ -f .prom/prometheus.xz ] || fail "no .prom: bash results/h200/prometheus-pack.sh"
echo "the tree that travels: $((tree / 1048576)) MiB; $n bundle parts"
[ "$n" -le 5 ] || echo "fewer calls: bash results/h200/light-tree.sh on (a tree without the run folders; off after the hold)"
# The last call: the last bundle part with whatever the launch needs (.fi1, .jit, .prom) and the launch itself,
# when all of it fits one call with the tree; otherwise each in a call of its own before the launch. Every call
# saved is a gap of up to 30 s in which the hold can be lost.
launch_args=("$@")
[ $seed = 0 ] || [[ " $* " == *" --seed "* ]] || launch_args=(--seed "${launch_args[@]}")
env_part=""
[ -z "${MOEPERF_PREWARM:-}" ] || env_part="MOEPERF_PREWARM=$MOEPERF_PREWARM "
[ -z "${MOEPERF_ARGS:-}" ] || env_part="${env_part}MOEPERF_ARGS=\"$MOEPERF_ARGS\" "
launch="export PYTHONPATH=\$HOME/moeperf-stash/site && ${env_part}bash results/h200/launch.sh ${launch_args[*]}"
last=$(echo "$parts" | tail -1)
extras=()
[ $fi = 0 ] || extras+=(.fi1)
[ $seed = 0 ] || extras+=(.jit)
[ $prom = 0 ] || extras+=(.prom)
quoted() { printf '"%s", ' "$@" | sed 's/, $//'; }
merged=0
[ $((tree + $(size_of "$last" "${extras[@]}"))) -le "$limit" ] && merged=1
k=0
for p in $parts; do
  k=$((k + 1))
  if [ "$p" = "$last" ] && [ $merged = 1 ]; then
    run="bash $p/stash.sh"
    [ $fi = 0 ] || run="$run && bash .fi1/install.sh"
    echo "call $k: carry [$(quoted "$p" "${extras[@]}")]: $run && $launch"
  elif [ "$p" = "$last" ] && [ $fi = 1 ]; then
    fits "$p with .fi1" "$p" .fi1
    echo "call $k: carry [\"$p\", \".fi1\"]: bash $p/stash.sh && bash .fi1/install.sh"
  else
    fits "$p" "$p"
    echo "call $k: carry [\"$p\"]: bash $p/stash.sh"
  fi
done
if [ $merged = 0 ]; then
  if [ $seed = 1 ]; then
    k=$((k + 1)); fits .jit .jit
    echo "call $k: carry [\".jit\"]: bash results/h200/jit-seed.sh unpack"
  fi
  k=$((k + 1))
  if [ $prom = 1 ]; then fits ".prom" .prom; carry='[".prom"]'; else carry='[]'; fi
  echo "call $k: carry $carry: $launch"
fi
echo "then: bash results/h200/collect.sh 540, call after call, each within 30 s of the last; nothing run here between them"
