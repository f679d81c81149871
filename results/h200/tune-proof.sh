#!/usr/bin/env bash
# Issue 20's proof on the H200 machine, detached, the named steps one after another (launch.sh --runner):
#   cost      what the routing counter costs inside a MoE forward (moe_opt/bench/expert_load_cost.py);
#   tune      `moeperf tune` for the end-to-end model's shape (DeepSeek-V3 per rank at TP=8, per-tensor FP8), under
#             the Zipf routing its engines are biased to, into the folder experiments/h200-tuned-dsv3-fp8.yaml
#             names (about 9 min); without it, e2e uses the folder tuned on 2026-12-02 (committed, same GPU type,
#             vLLM 0.26.0, Triton 3.6.0);
#   e2e       that experiment: vLLM's configs, the tuned folder, an A/A control, the load sweep (on a card other
#             than an H200 with no tuned folder yet, the tune step runs first: the committed one is H200's);
#   kernels   kernel level for the other per-rank TP=8 shapes vLLM ships no H200 config for (Qwen3-235B-A22B FP8,
#             DeepSeek-V3 bf16), uniform routing as vLLM's own tuner times them;
#   vs-vllm   moe_opt's kernels beside vLLM's, 56 cells (moe_opt/bench/vs_vllm.py);
#   gpu-tests the counter's GPU tests (inline and overlapped, graph replays) before an engine relies on them;
#   profile   the cells where moe_opt was slower than vLLM 0.26 on 2026-12-02, each side kernel by kernel
#             (vs_vllm --profile): where the time goes when both run the same tile;
#   moe-opt-tiles  moe_opt's tile table re-tuned at the buckets where it was slower, with vLLM's own tile among the
#             candidates (bench/tune.py --seed-vllm) and uniform routing as vs_vllm times; the table is rewritten
#             in this copy (so a later vs-vllm step uses it) and saved as $C/tile_configs.json.
#   bash results/h200/launch.sh --runner results/h200/tune-proof.sh e2e vs-vllm
# Results in $C (tuned folders packed as tuned.tgz: the device's transfer refuses vLLM's file names, which hold
# '=' and ','). Then `bash results/h200/collect.sh 540` in back-to-back calls until done.
set -u
source "$(dirname "$0")/gpu-env.sh"
tuned=/tmp/moeperf-tuned
committed=results/h200/issue20-tune-20261202/tuned
tune() {  # NAME ARGS...: one shape, its folder $tuned/NAME, its output in $C/tune-NAME.log
  local name=$1; shift
  step "start tune-$name"
  python3 -m moe_opt.tune.cli "$@" --out "$tuned/$name" >"$C/tune-$name.log" 2>&1
  step "end tune-$name rc=$?"
  tar -C "$tuned" -czf "$C/tuned.tgz" .
}
for what in "$@"; do
  case "$what" in
  cost)
    step "start expert-load-cost"
    python3 -m moe_opt.bench.expert_load_cost --out "$C/expert_load_cost.json" >"$C/expert_load_cost.log" 2>&1
    step "end expert-load-cost rc=$?" ;;
  tune) tune h200-dsv3-fp8 --model experiments/h200-tuned-dsv3-fp8.yaml --routing zipf:1.0 ;;
  e2e)
    # vLLM picks a tuned file by the card's name (device_name=NVIDIA_H200 in the committed one). On another card
    # the committed folder would be ignored and the tuned arm would run vLLM's default, so tune for this card.
    if [ ! -d "$tuned/h200-dsv3-fp8" ]; then
      if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q 'H200'; then
        mkdir -p "$tuned" && cp -r "$committed/h200-dsv3-fp8" "$tuned/"
      else
        step "the committed folder is for NVIDIA_H200: tuning for this card first"
        tune h200-dsv3-fp8 --model experiments/h200-tuned-dsv3-fp8.yaml --routing zipf:1.0
      fi
    fi
    study h200-tuned-dsv3-fp8 ;;
  kernels)
    buckets=1,16,64,256,1024,4096
    tune qwen3-235b-fp8-tp8 --experts 128 --hidden 4096 --intermediate 1536 --tp 8 --top-k 8 --dtype fp8_w8a8 \
      --buckets $buckets --routing uniform
    tune dsv3-bf16-tp8 --experts 256 --hidden 7168 --intermediate 2048 --tp 8 --top-k 8 --dtype bf16 \
      --buckets $buckets --routing uniform ;;
  vs-vllm)
    step "start vs-vllm"
    python3 -m moe_opt.bench.vs_vllm --out "$C/vs_vllm.json" >"$C/vs_vllm.log" 2>&1
    step "end vs-vllm rc=$?" ;;
  profile)
    step "start profile"
    python3 -m moe_opt.bench.vs_vllm --profile --shapes mixtral-8x7b,qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3 \
      --batches 1024,4096 --trials 5 --out "$C/vs_vllm_profile.json" >"$C/vs_vllm_profile.log" 2>&1
    step "end profile rc=$?" ;;
  moe-opt-tiles)
    step "start moe-opt-tiles"
    python3 -m moe_opt.bench.tune --seed-vllm --routing uniform --buckets 256,1024,4096 \
      --log "$C/moe-opt-tune-log.json" >"$C/moe-opt-tiles.log" 2>&1; rc1=$?
    python3 -m moe_opt.bench.tune --seed-vllm --routing uniform --shapes qwen3-235b-a22b --dtypes bf16 \
      --buckets 16,64 --log "$C/moe-opt-tune-log-2.json" >>"$C/moe-opt-tiles.log" 2>&1
    step "end moe-opt-tiles rc=$rc1,$?"
    cp moe_opt/kernels/tile_configs.json "$C/tile_configs.json" ;;
  gpu-tests)
    step "start gpu-tests"
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_expert_load.py >"$C/gpu-tests.log" 2>&1
    step "end gpu-tests rc=$?" ;;
  *) step "unknown step $what" ;;
  esac
done
touch "$C/done"
