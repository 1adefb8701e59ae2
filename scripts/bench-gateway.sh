#!/usr/bin/env bash
# The gateway side by side with the proxies it is measured against (issue 15; results and
# method in docs/benchmarks/server.md), all in one run, in interleaved rounds:
#
#   nginx            proxy_pass + limit_req keyed by client address, 2 workers, upstream keepalive
#   bare hyper proxy bench_peer proxy: hyper's server + hyper_util's pooled client, nothing else
#   pingora          bench/pingora-peer: Pingora 0.9 + pingora-limits, the same five headers
#                    (only when built: it is outside the workspace, see its Cargo.toml)
#   sluicegate       the gateway, a rate-limited catch-all route (token bucket, memory store,
#                    draft-6 + ietf headers), every request admitted so the full path runs
#
# All proxy to the same tiny upstream (bench_peer upstream) over loopback, loaded by wrk.
# For each run the script reads the proxy's CPU time (user + system, all threads and worker
# processes) from /proc: **CPU µs per request** is the headline, because throughput on a
# shared machine swings 2x with other people's work while CPU per request hardly moves.
#
#   cargo build --release -p sluicegate-server --bin sluicegate -p sluicegate-bench --bin bench_peer
#   (optional) (cd bench/pingora-peer && CARGO_TARGET_DIR=../../target cargo build --release)
#   scripts/bench-gateway.sh [DURATION] [CONNECTIONS] [ROUNDS]     # defaults: 5s 32 3
#
# Output: the machine line, one markdown row per run, then the summary rows (medians of the
# rounds, ratios to nginx: CPU ratio = nginx CPU per request / this one, > 1 is cheaper).
# QUICK=1 (or --quick) runs 2 s x 1 round: a smoke test (connection set-up weighs on so few
# requests), not a result. BASELINE=BINARY adds an older sluicegate.
# Not run by CI.
set -euo pipefail
# scripts/bench.sh asks for a quick run with --quick.
if [ "${1:-}" = --quick ]; then QUICK=1; shift; fi
DUR=${1:-5s}
CONN=${2:-32}
ROUNDS=${3:-3}
if [ "${QUICK:-}" = 1 ]; then DUR=2s; ROUNDS=1; fi
THREADS=${WRK_THREADS:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install -y wrk)" >&2; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "nginx is missing (scripts/install-test-deps.sh)" >&2; exit 1; }
for bin in sluicegate bench_peer; do
  [ -x "$REL/$bin" ] || { echo "$REL/$bin is missing: build it first (see the top of $0)" >&2; exit 1; }
done
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
bench_workdir
# measure URL PID -> "rps p50 p99 non2xx cpu_us_per_request"
measure() { wrk_latency "$2" -- wrk -t"$THREADS" -c"$CONN" -d"$DUR" --latency "$1"; }

P_UP=$(free_port); P_GW=$(free_port); P_API=$(free_port); P_NGX=$(free_port); P_HYP=$(free_port); P_PGR=$(free_port)
cat >"$WORK/bench.toml" <<TOML
[server]
listen = "127.0.0.1:$P_API"

[[policies]]
name = "bench"
algorithm = "token_bucket"
limit = 1_000_000_000
period = "1s"

[[routes]]
path = "/"
policies = ["bench"]
key = "ip"

[gateway]
listen = "127.0.0.1:$P_GW"
upstream = "http://127.0.0.1:$P_UP"
TOML
nginx_proxy_conf "$P_UP" 64 "listen 127.0.0.1:$P_NGX;"

"$REL/bench_peer" upstream "127.0.0.1:$P_UP" >/dev/null & PIDS+=($!)
"$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/error.log" & PID_NGX=$!; PIDS+=($PID_NGX)
"$REL/bench_peer" proxy "127.0.0.1:$P_HYP" "127.0.0.1:$P_UP" >/dev/null & PID_HYP=$!; PIDS+=($PID_HYP)
RUST_LOG=warn "$REL/sluicegate" serve --config "$WORK/bench.toml" >/dev/null & PID_SG=$!; PIDS+=($PID_SG)
TARGETS=(nginx hyper)
PORTS=("$P_NGX" "$P_HYP")
PROCS=("$PID_NGX" "$PID_HYP")
NAMES=("nginx limit_req proxy" "bare hyper proxy")
if [ -x "$REL/pingora-peer" ]; then
  "$REL/pingora-peer" "127.0.0.1:$P_PGR" "127.0.0.1:$P_UP" 2 >/dev/null 2>&1 & PID_PGR=$!; PIDS+=($PID_PGR)
  TARGETS+=(pingora); PORTS+=("$P_PGR"); PROCS+=("$PID_PGR"); NAMES+=("pingora + pingora-limits")
fi
# BASELINE=path/to/an/older/sluicegate adds it as one more target (before/after a change).
if [ -n "${BASELINE:-}" ]; then
  P_GW0=$(free_port); P_API0=$(free_port)
  sed -e "s/:$P_GW\"/:$P_GW0\"/" -e "s/:$P_API\"/:$P_API0\"/" "$WORK/bench.toml" >"$WORK/baseline.toml"
  RUST_LOG=warn "$BASELINE" serve --config "$WORK/baseline.toml" >/dev/null & PID_SG0=$!; PIDS+=($PID_SG0)
  TARGETS+=(baseline); PORTS+=("$P_GW0"); PROCS+=("$PID_SG0"); NAMES+=("sluicegate gateway (BASELINE)")
fi
TARGETS+=(sluicegate); PORTS+=("$P_GW"); PROCS+=("$PID_SG"); NAMES+=("sluicegate gateway")
for p in $P_UP "${PORTS[@]}"; do wait_port "$p"; done
# One request each first: connections and pools warm, every answer checked.
for i in "${!TARGETS[@]}"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${PORTS[$i]}/api/items")
  [ "$code" = 200 ] || { echo "${NAMES[$i]} answered $code" >&2; exit 1; }
done

echo "machine: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t$THREADS -c$CONN -d$DUR GET /api/items, $ROUNDS interleaved rounds"
echo
echo "| round | proxy | requests/s | p50 | p99 | non-2xx | proxy CPU µs/request |"
echo "|---|---|---|---|---|---|---|"
declare -A RPS CPU
for r in $(seq "$ROUNDS"); do
  for i in "${!TARGETS[@]}"; do
    read -r rps p50 p99 err cpu <<<"$(measure "http://127.0.0.1:${PORTS[$i]}/api/items" "${PROCS[$i]}")"
    echo "| $r | ${NAMES[$i]} | $rps | $p50 | $p99 | $err | $cpu |"
    RPS[${TARGETS[$i]}]+="$rps "
    CPU[${TARGETS[$i]}]+="$cpu "
  done
done
echo
echo "| proxy | requests/s (median) | vs nginx | CPU µs/request (median) | vs nginx (nginx CPU / this) |"
echo "|---|---|---|---|---|"
# shellcheck disable=SC2086
nrps=$(median ${RPS[nginx]}); ncpu=$(median ${CPU[nginx]})
for i in "${!TARGETS[@]}"; do
  t=${TARGETS[$i]}
  # shellcheck disable=SC2086
  rps=$(median ${RPS[$t]}); cpu=$(median ${CPU[$t]})
  awk -v n="${NAMES[$i]}" -v r="$rps" -v nr="$nrps" -v c="$cpu" -v nc="$ncpu" \
    'BEGIN {printf "| %s | %.0f | %.2f× | %.1f | %.2f× |\n", n, r, r / nr, c, nc / c}'
done
