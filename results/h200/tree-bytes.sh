# Sourced by resplit.sh and hold-plan.sh, from the repo root: the bytes of the tree a `run` call sends with
# whatever it carries (tracked files and untracked ones git does not ignore), within 64 MiB in all.
tree_bytes() {
  { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'
}
