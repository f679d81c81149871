#!/usr/bin/env bash
# Issue 9's second H200 campaign, on nvidia-h200-x2 (2 GPUs of one host). Run from the repo root once the
# vLLM 0.26 + Ray bundle is unpacked in $HOME/moeperf-stash/site (README.md here), detached with
#   setsid nohup bash results/h200/campaign.sh > /tmp/campaign.out 2>&1 &
# Phase 1 uses the two GPUs side by side, each study with its own local Ray that sees only its GPU:
#   GPU 0: the GPU engine test at TP=1, then the Qwen3-30B-A3B study;  GPU 1: the vLLM warm-up study.
# Phase 2 runs the TP=2 study over both GPUs, then the GPU engine test at TP=2.
set -u
C=${CAMPAIGN_DIR:-$HOME/campaign}
mkdir -p "$C/runs" /tmp/ep/moeperf-0.1.0.dist-info
# The bundle has no pip-installed moeperf: give vLLM the plugin's entry point through a dist-info.
printf 'Metadata-Version: 2.1\nName: moeperf\nVersion: 0.1.0\n' >/tmp/ep/moeperf-0.1.0.dist-info/METADATA
printf '[vllm.general_plugins]\nmoeperf = moe_opt.plugin:register\n' >/tmp/ep/moeperf-0.1.0.dist-info/entry_points.txt
export PYTHONPATH=$PWD:/tmp/ep:$HOME/moeperf-stash/site PYTHONUNBUFFERED=1
nvidia-smi >"$C/nvsmi.txt" 2>&1
step() { echo "$(date -u +%FT%TZ) $*" >>"$C/progress"; }
study() {
  step "start $1"
  python3 -m cluster.cli run "experiments/$1.yaml" --output_dir "$C/runs" >"$C/$1.log" 2>&1
  step "end $1 rc=$?"
}
gpu_test() {
  step "start gpu-test-$1"
  python3 -m pytest -p no:cacheprovider -q "tests/gpu/test_gpu_engine_plugin.py" -k "$1" >"$C/gpu-test-$1.log" 2>&1
  step "end gpu-test-$1 rc=$?"
}
(export CUDA_VISIBLE_DEVICES=0; gpu_test tp1; study h200-qwen3-30b-a3b-fp8) &
(export CUDA_VISIBLE_DEVICES=1; study h200-mixtral-fp8-warmup) &
wait
study h200-mixtral-fp8-tp2
gpu_test tp2
touch "$C/done"
