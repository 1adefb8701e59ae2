#!/usr/bin/env bash
# The Redis store's side-by-side benchmarks, each printing a Markdown table (stdout) and its
# rounds (stderr), for scripts/bench.sh and docs/benchmarks/redis.md:
#   1. `throughput`: RedisStore::check and check_batch vs redis-benchmark EVALSHA of the
#      raw script (-P 16);
#   2. `sync`: store.sync (SyncedStore, local decisions, counts exchanged every 100 ms) vs
#      exact mode (RedisStore), decisions/s per instance and redis-server CPU per decision,
#      on 10,000 keys and on one hot key;
#   3. `exchange`: one exchange of 10,000 keys at a time, this process's and redis-server's
#      CPU per exchanged key (sync's fixed cost, apart from the decisions).
# On 2+ CPUs both run with --pin: redis-server on CPU 0, every client on CPU 1 (see
# crates/sluicegate-redis/benches/common/pin.rs).
# Usage: scripts/bench-redis.sh [SECONDS_PER_ROUND] [ROUNDS]   (defaults 5 and 9)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
rounds=${2:-9}
pin=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  pin=(--pin)
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "### Redis store vs redis-benchmark (raw script)"
cargo bench -q -p sluicegate-redis --bench throughput -- --seconds "$seconds" --rounds "$rounds" "${pin[@]}"
echo
echo "### store.sync vs exact mode, 10,000 keys"
cargo bench -q -p sluicegate-redis --bench sync -- --seconds "$seconds" --rounds "$rounds" "${pin[@]}" --keys 10000
echo
echo "### store.sync vs exact mode, one hot key"
cargo bench -q -p sluicegate-redis --bench sync -- --seconds "$seconds" --rounds "$rounds" "${pin[@]}" --keys 1
echo
echo "### store.sync: one exchange's CPU per key, 10,000 keys"
cargo bench -q -p sluicegate-redis --bench exchange -- --keys 10000 --rounds 40 "${pin[@]}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
