#!/usr/bin/env bash
# Wait (at most $1 seconds) for the campaign to finish, then pack what it has so far into $OUT: one tarball
# of every run folder (records/ included: since result format 3 the records live there as Parquet; the
# run-scoped JIT cache left out) and the logs.
C=${CAMPAIGN_DIR:-$HOME/campaign}
end=$((SECONDS + ${1:-540}))
while [ ! -f "$C/done" ] && [ $SECONDS -lt $end ]; do sleep 5; done
cat "$C/progress" 2>/dev/null
tail -3 "$C"/*.log 2>/dev/null | cut -c1-300
tar -czf "$OUT/campaign.tgz" -C "$C" --exclude='*/jit-cache' . && ls -la "$OUT"
