#!/usr/bin/env bash
# Re-split the vLLM bundle parts (.gpu1..N from results/h200/bundle/build-vllm-bundle.sh, 60 MiB each) into
# smaller ones: a `run` call carries the tracked tree plus one part within 64 MiB, and the tracked tree
# (results included) has grown past 4 MiB. Run from the repo root; then send .gpu1..M as before.
set -euo pipefail
size=${1:-45m}
tmp=$(mktemp -d)
# in part order (part_00, part_01, ...), whatever folder holds each
ls .gpu[0-9]*/part_* | sort -t/ -k2 | xargs cat >"$tmp/bundle.tar.xz"
xz -t "$tmp/bundle.tar.xz"
stash=$(cat .gpu1/stash.sh)
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
