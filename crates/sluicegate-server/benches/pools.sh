#!/usr/bin/env bash
# The cost of a pool ([[pools]]) per request, beside the same route without one
# (results: docs/benchmarks/throttling.md).
#
#   cargo build --release -p sluicegate-server --bin sluicegate -p sluicegate-bench --bin bench_peer --bin pool_cost
#   crates/sluicegate-server/benches/pools.sh [DURATION] [CONNECTIONS] [ROUNDS]
#
# 1. In-process, instructions per request (callgrind; repeatable under load): pool_cost
#    through the tower layer with an inner service answering at once, no pool vs a pool of
#    64 slots that is never full. Two runs of N each; the difference of the totals divided
#    by the difference of N cancels start-up.
# 2. Over HTTP, wrk against one gateway with a fast upstream: the same route without a
#    pool, in a pool that is never full (1024 slots), and in a saturated pool (4 slots for
#    CONNECTIONS clients: every request queues). Targets alternate within each round, so
#    background load hits them alike; the gateway's CPU time per request comes from /proc.
set -euo pipefail
DUR=${1:-5s}
CONN=${2:-32}
ROUNDS=${3:-5}
THREADS=${WRK_THREADS:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install -y wrk)" >&2; exit 1; }
bench_workdir

echo "machine: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

if [ "${SKIP_CALLGRIND:-0}" != 1 ] && command -v valgrind >/dev/null; then
  N1=${N1:-2000}; N2=${N2:-12000}
  instr() {
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" "$REL/pool_cost" "$1" "$2" >/dev/null 2>"$WORK/cg.err"
    awk '/^summary:|^totals:/ {print $2; exit}' "$WORK/cg.out"
  }
  echo "| in-process (callgrind) | instructions per request |"
  echo "|---|---|"
  for mode in nopool pool; do
    a=$(instr "$mode" "$N1"); b=$(instr "$mode" "$N2")
    per=$(( (b - a) / (N2 - N1) ))
    echo "| $mode | $per |"
    eval "INSTR_$mode=$per"
  done
  echo "| pool − no pool | $((INSTR_pool - INSTR_nopool)) |"
  echo
fi

P_API=$(free_port); P_UP=$(free_port); P_GW=$(free_port)
cat >"$WORK/bench.toml" <<TOML
[server]
listen = "127.0.0.1:$P_API"

[[policies]]
name = "bench"
algorithm = "token_bucket"
limit = 1_000_000_000
period = "1s"

[[routes]]
path = "/free"
policies = ["bench"]
key = "ip"
pool = "free"

[[routes]]
path = "/full"
policies = ["bench"]
key = "ip"
pool = "full"

[[routes]]
path = "/"
policies = ["bench"]
key = "ip"

[[pools]]
name = "free"
concurrency = 1024

[[pools]]
name = "full"
concurrency = 4
queue = 10000
max_wait = "60s"

[gateway]
listen = "127.0.0.1:$P_GW"
upstream = "http://127.0.0.1:$P_UP"
TOML
THREADS=1 "$REL/bench_peer" upstream "127.0.0.1:$P_UP" >/dev/null & PIDS+=($!)
RUST_LOG=warn "$REL/sluicegate" serve --config "$WORK/bench.toml" >/dev/null & PID_SG=$!; PIDS+=($PID_SG)
for p in $P_API $P_UP $P_GW; do wait_port "$p"; done

# measure PATH -> "rps p50 p99 non2xx cpu_us_per_request"
measure() { wrk_latency "$PID_SG" -- wrk -t"$THREADS" -c"$CONN" -d"$DUR" --latency "http://127.0.0.1:$P_GW$1"; }

echo "HTTP: wrk -t$THREADS -c$CONN -d$DUR, $ROUNDS rounds, targets alternating"
echo
echo "| round | route | requests/s | p50 | p99 | non-2xx | gateway CPU µs/request | load avg |"
echo "|---|---|---|---|---|---|---|---|"
declare -A RPS CPU
for r in $(seq "$ROUNDS"); do
  for target in "/api/items no-pool" "/free/items pool-never-full" "/full/items pool-saturated"; do
    read -r path name <<<"$target"
    read -r a b c d e <<<"$(measure "$path")"
    echo "| $r | $name | $a | $b | $c | $d | $e | $(cut -d' ' -f1 /proc/loadavg) |"
    RPS[$name]+="$a "; CPU[$name]+="$e "
  done
done
echo
echo "| route | median requests/s | median gateway CPU µs/request |"
echo "|---|---|---|"
for name in no-pool pool-never-full pool-saturated; do
  # shellcheck disable=SC2086
  echo "| $name | $(median ${RPS[$name]}) | $(median ${CPU[$name]}) |"
done
