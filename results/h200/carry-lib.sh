# Sourced by the scripts that make or check what a GPU hold carries (carry-kit.sh, resplit.sh, hold-plan.sh,
# flashinfer-fp8.sh), from anywhere inside the repo.

# The bytes of the tree a `run` call sends with whatever it carries (tracked files and untracked ones git does
# not ignore), within 64 MiB in all.
tree_bytes() {
  { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

# The vLLM bundle's part files under ROOT (.gpuK/part_NN), in the order they join: their file names hold it
# (part_00, part_01, ...), their folders' names do not (.gpu10 sorts before .gpu2).
bundle_parts() {
  ls "$1"/.gpu[0-9]*/part_* | awk -F/ '{print $NF "\t" $0}' | sort | cut -f2
}

# Whether ROOT holds the whole bundle: as many .gpuK folders as .gpu1/parts says were made.
bundle_is_whole() {
  [ -f "$1/.gpu1/parts" ] && [ "$(ls -d "$1"/.gpu[0-9]* | wc -l)" -eq "$(cat "$1/.gpu1/parts")" ]
}
