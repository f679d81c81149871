# Sourced by campaign.sh and studies.sh on the H200 machine, from the repo root, once the vLLM 0.26 + Ray
# bundle is unpacked in $HOME/moeperf-stash/site (README.md here). Results and logs go to $C.
C=${CAMPAIGN_DIR:-$HOME/campaign}
mkdir -p "$C/runs" /tmp/ep/moeperf-0.1.0.dist-info
# The bundle has no pip-installed moeperf: give vLLM the plugin's entry point through a dist-info.
printf 'Metadata-Version: 2.1\nName: moeperf\nVersion: 0.1.0\n' >/tmp/ep/moeperf-0.1.0.dist-info/METADATA
printf '[vllm.general_plugins]\nmoeperf = moe_opt.plugin:register\n' >/tmp/ep/moeperf-0.1.0.dist-info/entry_points.txt
export PYTHONPATH=$PWD:/tmp/ep:$HOME/moeperf-stash/site PYTHONUNBUFFERED=1
# Where a carried FlashInfer module's CUDA libraries are, if the loader needs telling (flashinfer-fp8-install.sh).
[ ! -f "$HOME/fi-ld.env" ] || . "$HOME/fi-ld.env"
nvidia-smi >"$C/nvsmi.txt" 2>&1
step() { echo "$(date -u +%FT%TZ) $*" >>"$C/progress"; }
study() {
  step "start $1"
  # MOEPERF_ARGS: more options for every study, e.g. "--first_round 2" for a hold that continues the rounds.
  python3 -m cluster.cli run "experiments/$1.yaml" --output_dir "$C/runs" ${MOEPERF_ARGS:-} >"$C/$1.log" 2>&1
  step "end $1 rc=$?"
  if [ -n "${MOEPERF_DASHBOARDS_CHECK:-}" ]; then  # launch.sh --prometheus: every dashboard query on this run's data
    for run in $(ls -d "$C"/runs/"$1"-* 2>/dev/null); do
      python3 -m dashboards.cli check "$run" --prometheus "$MOEPERF_DASHBOARDS_CHECK" --out "$run/dashboards-check.json" \
        >"$run/dashboards-check.txt" 2>&1
    done
  fi
}
# A fresh machine's first engine start is slow even with a seeded JIT cache (hold 4: 228 s against 82 s for the
# next engine), and the engines' logged phases (startup_phases_s) do not cover imports and the CUDA context.
# Before the first study, time what every engine pays outside them, twice: the first time on a fresh machine,
# the second once the files are in the page cache and bytecode is compiled. The difference is what the first
# engine no longer pays.
# The import alone took 28.4 and 30.7 s on hold 4 (2026-12-03), against 9-10 s on a 2-core development machine
# (vLLM 0.32 CPU): the second import was no faster, so either no bytecode is written there (the bundle's .pyc are
# the build machine's Python 3.11) or the sandbox's file system costs that much. Each import's -X importtime goes to
# $C/importtime-N.txt, with whether bytecode may be written and how many 3.12 .pyc files the bundle holds before it.
prewarm() {
  local i t0 site=$HOME/moeperf-stash/site
  for i in 1 2; do
    step "prewarm $i: $(python3 -c 'import sys; print("python", sys.version.split()[0], "dont_write_bytecode", sys.flags.dont_write_bytecode, "pycache_prefix", sys.pycache_prefix)') cpython-312 .pyc in the bundle: $(find "$site" -name '*.cpython-312.pyc' 2>/dev/null | wc -l)"
    t0=$(date +%s.%N)
    python3 -X importtime -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>"$C/importtime-$i.txt"
    step "prewarm $i: import vllm.entrypoints.openai.api_server $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
    t0=$(date +%s.%N)
    python3 -c 'import torch; torch.zeros(1, device="cuda").sum().item()' >/dev/null 2>&1
    step "prewarm $i: torch CUDA context $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  done
}
gpu_test() {
  step "start gpu-test-$1"
  python3 -m pytest -p no:cacheprovider -q "tests/gpu/test_gpu_engine_plugin.py" -k "$1" >"$C/gpu-test-$1.log" 2>&1
  step "end gpu-test-$1 rc=$?"
}
