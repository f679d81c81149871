#!/usr/bin/env bash
# Here, around a GPU hold: send a tree without the committed results, so each `run` call carries a larger bundle
# part. Every call sends the tracked files beside what it carries, within 64 MiB; by 2026-12-06 the run folders
# under results/h200 made 34 of the tree's 38 MiB, and the bundle needed 11 stash calls of 21 MiB parts. Every
# call is a chance to lose the machine (it forgets everything 30 s after a call ends). From the light tree it
# took 5 calls of 53 MiB, and the last one also carried .fi1 and .prom and launched (hold 14: 48 s held in all).
#   bash results/h200/light-tree.sh on    # a throw-away branch hold-light without the run folders, then resplit.sh
#   bash results/h200/light-tree.sh off   # back to the branch before, hold-light deleted, parts split for that tree
# Nothing the hold runs reads the run folders: the folders without a script (.sh, .py) in them are dropped.
# Bring results back onto the real branch: `off` first, then copy them in and commit there.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
here=$(dirname "$0")
branch=hold-light
case "${1:-}" in
  on)
    [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "light-tree.sh: commit or stash first" >&2; exit 2; }
    [ "$(git branch --show-current)" != "$branch" ] || { echo "light-tree.sh: already on $branch" >&2; exit 2; }
    git branch --show-current > .git/light-tree-from
    git checkout -q -b "$branch"
    for d in results/h200/*/; do
      git ls-files "$d" | grep -qE '\.(sh|py)$' || git rm -rq "$d"
    done
    git commit -qm "hold-light: the tree a GPU hold sends (never merged)"
    bash "$here/resplit.sh"
    ;;
  off)
    [ "$(git branch --show-current)" = "$branch" ] || { echo "light-tree.sh: not on $branch" >&2; exit 2; }
    git checkout -q "$(cat .git/light-tree-from)"
    git branch -q -D "$branch"
    rm -f .git/light-tree-from
    bash "$here/resplit.sh"
    ;;
  *) echo "usage: bash results/h200/light-tree.sh on|off" >&2; exit 2 ;;
esac
