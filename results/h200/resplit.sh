#!/usr/bin/env bash
# Re-split the vLLM bundle parts (.gpu1..N from results/h200/bundle/build-vllm-bundle.sh) into parts that fit a
# `run` call beside the tree that travels with it: the call carries the tracked and untracked-not-ignored files
# plus its carried paths within 64 MiB, and the tree grows with every committed hold. Run from the repo root;
# then send .gpu1..M as before (the last part's call also carries .fi1, at most 4 MiB).
#   bash results/h200/resplit.sh [SIZE]   SIZE as split -b takes it; default: what fits now, less 4 MiB for
#                                         .fi1 and 2 MiB for results committed before the hold
set -euo pipefail
source "$(dirname "$0")/carry-lib.sh"
if [ $# -ge 1 ]; then
  size=$1
else
  size=$(( (64 * 1048576 - $(tree_bytes) - 6 * 1048576) / 1048576 ))
  [ "$size" -ge 4 ] || { echo "resplit.sh: the tree leaves ${size} MiB for a part; make it smaller first" >&2; exit 2; }
  size=${size}m
  echo "resplit.sh: parts of $size (the tree that travels is $(( $(tree_bytes) / 1048576 )) MiB)"
fi
tmp=$(mktemp -d)
# in part order (part_00, part_01, ...), whatever folder holds each
bundle_parts . | xargs cat >"$tmp/bundle.tar.xz"
xz -t "$tmp/bundle.tar.xz"
stash=$(cat results/h200/bundle/stash.sh)  # the committed one: a fix to it reaches the parts
rm -rf .gpu[0-9]*
split -b "$size" -d "$tmp/bundle.tar.xz" "$tmp/part_"
rm "$tmp/bundle.tar.xz"
parts=("$tmp"/part_*)
for i in "${!parts[@]}"; do
  d=.gpu$((i + 1))
  mkdir -p "$d"
  mv "${parts[$i]}" "$d/"
  echo "${#parts[@]}" >"$d/parts"
  printf '%s\n' "$stash" >"$d/stash.sh"
  chmod +x "$d/stash.sh"
done
rmdir "$tmp"
du -sh .gpu[0-9]*
