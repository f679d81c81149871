#!/usr/bin/env bash
# Carry a run's JIT cache from one H200 hold to the next, so the next hold's engines start warm and it runs
# with engine.cache_state seeded (no warm-up pass). The cache is what the run compiled, not a product
# artifact: it lives in the git-ignored .jit/ here and is rebuilt by any run with cache_state shared_warm.
#   bash results/h200/jit-seed.sh pack          # on the H200, in a hold's last call: the newest run's
#                                               # jit-cache -> $OUT/jit-seed.tar.xz.NN (15 MiB parts)
#   bash results/h200/jit-seed.sh keep DIR      # here: the parts a call brought back (DIR) -> .jit/
#   launch.sh --seed ...                        # on the next hold, in a call carrying .jit: unpacks it into
#                                               # $HOME/jit-seed and runs with --engine.cache_state seeded
set -euo pipefail
C=${CAMPAIGN_DIR:-$HOME/campaign}
case "${1:-}" in
  pack)
    run=$(ls -td "$C"/runs/*/jit-cache | head -1)
    echo "packing $run ($(du -sh "$run" | cut -f1))"
    tar -C "$run" -cf - . | xz -T0 -6 | split -b 15m -d - "$OUT/jit-seed.tar.xz."
    ls -la "$OUT"/jit-seed.tar.xz.* ;;
  keep)
    mkdir -p .jit
    cat "$2"/jit-seed.tar.xz.* >.jit/jit-seed.tar.xz
    xz -t .jit/jit-seed.tar.xz
    ls -la .jit ;;
  unpack)  # launch.sh --seed
    rm -rf "$HOME/jit-seed"
    mkdir -p "$HOME/jit-seed"
    xz -dc .jit/jit-seed.tar.xz | tar -C "$HOME/jit-seed" -xf -
    du -sh "$HOME/jit-seed"/* ;;
  *) echo "usage: $0 pack | keep DIR | unpack" >&2; exit 2 ;;
esac
