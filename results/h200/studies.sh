#!/usr/bin/env bash
# Run the named experiments (experiments/<name>.yaml) one after another on the H200 machine, detached:
#   setsid nohup bash results/h200/studies.sh h200-mixtral-fp8-warmup > /tmp/studies.out 2>&1 &
# then `bash results/h200/collect.sh 540` in back-to-back calls until it reports done.
set -u
source "$(dirname "$0")/gpu-env.sh"
prewarm
for name in "$@"; do study "$name"; done
touch "$C/done"
