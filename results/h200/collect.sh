#!/usr/bin/env bash
# Wait (at most $1 seconds) for the campaign to finish, then pack what it has so far into $OUT: one tarball
# of every run folder (records/ included: since result format 3 the records live there as Parquet; the
# run-scoped JIT cache left out) and the logs.
C=${CAMPAIGN_DIR:-$HOME/campaign}
# A machine without the campaign is a fresh one: the last call came more than 30 s after the one before and the
# hold is gone. Waiting would only spend device time (2026-12-03: 530 s that way), so say so and stop.
if [ ! -f "$C/topology.txt" ] && [ ! -f "$C/progress" ]; then
  echo "collect.sh: no campaign in $C: this is a fresh machine, the hold was lost; nothing to wait for" >&2
  exit 3
fi
end=$((SECONDS + ${1:-540}))
while [ ! -f "$C/done" ] && [ $SECONDS -lt $end ]; do sleep 5; done
cat "$C/progress" 2>/dev/null
# Routing as the engines count it (launch.sh --prometheus): experts that got tokens per layer, and the hottest
# expert's share, per engine. A dummy model without a router bias shows k experts each at 1/k (collapsed).
curl -s --max-time 5 'http://127.0.0.1:9090/api/v1/query' --data-urlencode \
  'query=count by (arm, instance) (max by (arm, instance, expert) (last_over_time(moeperf_expert_tokens_total{layer="0"}[30m])) > 0)' 2>/dev/null |
  python3 -c 'import json,sys; [print("routing: arm", r["metric"].get("arm"), r["metric"].get("instance"), "experts used in layer 0:", r["value"][1]) for r in json.load(sys.stdin)["data"]["result"]]' 2>/dev/null
# Each engine's steps, host side and GPU (moe_opt/plugin/host.py, gpu_steps.py) over its life: what the engines
# of one setting got from the CPUs and the GPU, to set beside their A/A gap.
python3 results/h200/engine_gap.py http://127.0.0.1:9090 2>/dev/null
# What used the CPUs just now (the A/A gap's host-side suspects: a client, Prometheus, Ray, a leftover process).
ps -eo pid,psr,pcpu,rss,etimes,args --sort=-pcpu 2>/dev/null | head -12 | cut -c1-160
tail -3 "$C"/*.log 2>/dev/null | cut -c1-300
# Once the campaign is done, its JIT cache comes back too (jit-seed.sh pack: 2-4 MB), in this same call: a call
# after this one must start within 30 s, and hold 6 (2026-12-03) lost its seed to a late one. Here:
# `bash results/h200/jit-seed.sh keep DIR` with the folder the call's files came back to.
if [ -f "$C/done" ] && find "$C/runs" -mindepth 2 -maxdepth 2 -name jit-cache -type d 2>/dev/null | grep -q .; then
  bash "$(dirname "$0")/jit-seed.sh" pack || echo "collect.sh: the JIT cache was not packed" >&2
fi
tar -czf "$OUT/campaign.tgz" -C "$C" --exclude='*/jit-cache' . && ls -la "$OUT"
