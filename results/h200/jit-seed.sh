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
    # the newest run's own cache (-type d: not the link to an earlier seed's origin that unpack made)
    run=$(find "$C/runs" -mindepth 2 -maxdepth 2 -name jit-cache -type d -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2)
    echo "packing $run ($(du -sh "$run" | cut -f1))"
    # Inductor's generated code names its files by absolute path: keep where they were (unpack links it back).
    echo "$run" >"$run/origin"
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
    origin=$(cat "$HOME/jit-seed/origin" 2>/dev/null ||
      grep -rhoa '/[A-Za-z0-9_./-]*/runs/[^/]*/jit-cache' "$HOME/jit-seed/vllm" | head -1 || true)
    if [ -n "$origin" ] && [ ! -e "$origin" ]; then mkdir -p "$(dirname "$origin")" && ln -s "$HOME/jit-seed" "$origin"; fi
    echo "seed made at ${origin:-?}, linked there"
    du -sh "$HOME/jit-seed"/* ;;
  *) echo "usage: $0 pack | keep DIR | unpack" >&2; exit 2 ;;
esac
