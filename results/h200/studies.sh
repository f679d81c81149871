#!/usr/bin/env bash
# Run the named experiments (experiments/<name>.yaml) one after another on the H200 machine, detached:
#   setsid nohup bash results/h200/studies.sh h200-mixtral-fp8-warmup > /tmp/studies.out 2>&1 &
# then `bash results/h200/collect.sh 540` in back-to-back calls until it reports done.
set -u
source "$(dirname "$0")/gpu-env.sh"
# MOEPERF_PREWARM=0 skips the import timings (about 70 s): a hold of cold starts (claim 3) has no time for them.
[ "${MOEPERF_PREWARM:-1}" = 0 ] || prewarm
for name in "$@"; do study "$name"; done
touch "$C/done"
