#!/usr/bin/env bash
# Here (the development machine, where scripts/setup.sh installed Debian's prometheus): pack its binary for the
# H200 machine, which has none, into the git-ignored .prom/ (about 10 MB), carried by `launch.sh --prometheus`.
# The binary needs glibc 2.34 or newer only (checked with objdump -T on Debian 12's prometheus 2.42).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
mkdir -p "$root/.prom"
xz -T0 -6 -c "$(command -v prometheus)" >"$root/.prom/prometheus.xz"
grep -q '^/.prom/' "$root/.gitignore" || echo '/.prom/' >>"$root/.gitignore"
ls -la "$root/.prom"
