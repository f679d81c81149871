#!/usr/bin/env bash
# Issue 9's second H200 campaign, on nvidia-h200-x2 (2 GPUs of one host), detached from the repo root:
#   setsid nohup bash results/h200/campaign.sh > /tmp/campaign.out 2>&1 &
# Phase 1 uses the two GPUs side by side, each study with its own local Ray that sees only its GPU:
#   GPU 0: the GPU engine test at TP=1, then the Qwen3-30B-A3B study;  GPU 1: the vLLM warm-up study.
# Phase 2 runs the TP=2 study over both GPUs, then the GPU engine test at TP=2.
set -u
source "$(dirname "$0")/gpu-env.sh"
(export CUDA_VISIBLE_DEVICES=0; gpu_test tp1; study h200-qwen3-30b-a3b-fp8) &
(export CUDA_VISIBLE_DEVICES=1; study h200-mixtral-fp8-warmup) &
wait
study h200-mixtral-fp8-tp2
gpu_test tp2
touch "$C/done"
