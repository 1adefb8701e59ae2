#!/usr/bin/env bash
# Throughput of a minimal axum app without and with RateLimitLayer, side by side in one
# run: the two apps live in one process (crates/sluicegate-bench/src/bin/loadtest_server.rs, one worker thread);
# wrk (one thread) alternates between them ROUNDS times, and the medians are compared.
# Besides requests/second, the server's CPU time per request (from /proc) is reported:
# on a shared machine it is steadier than throughput.
#   crates/sluicegate-middleware/benches/loadtest.sh [ROUNDS] [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-5}; SECS=${2:-5}; CONNS=${3:-32}
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 1; }
cargo build -q --release -p sluicegate-bench --bin loadtest_server
BIN=${CARGO_TARGET_DIR:-target}/release/loadtest_server
OUT=$(mktemp)
"$BIN" >"$OUT" & SERVER=$!
trap 'kill $SERVER; rm -f "$OUT"' EXIT
for _ in $(seq 50); do [ -s "$OUT" ] && break; sleep 0.1; done
BARE=$(sed -n 's/.*bare=\([^ ]*\).*/\1/p' "$OUT"); LIMITED=$(sed -n 's/.*limited=\([^ ]*\).*/\1/p' "$OUT")
curl -sf -o /dev/null "http://$BARE/api/items" || { echo "bare app does not answer 200" >&2; exit 1; }
curl -sf -H "X-Forwarded-For: 10.9.9.9" -D - -o /dev/null "http://$LIMITED/api/items" | grep -i "^ratelimit" >&2 || true
LUA=$PWD/crates/sluicegate-middleware/benches/xff.lua
TICK=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
# Prints "requests/s  CPU-µs/request" for one wrk run against $1.
run() {
  local before after out
  before=$(cpu)
  out=$(wrk -t1 -c"$CONNS" -d"${SECS}s" -s "$LUA" "http://$1/api/items")
  after=$(cpu)
  if grep -q "Non-2xx" <<<"$out"; then echo "non-2xx responses from $1" >&2; exit 1; fi
  awk -v b="$before" -v a="$after" -v t="$TICK" '
    /requests in/ {n = $1} /Requests\/sec/ {r = $2}
    END {printf "%.0f %.2f\n", r, (a - b) / t * 1e6 / n}' <<<"$out"
}
bare_rps=(); lim_rps=(); bare_cpu=(); lim_cpu=()
for r in $(seq "$ROUNDS"); do
  read -r br bc < <(run "$BARE"); read -r lr lc < <(run "$LIMITED")
  bare_rps+=("$br"); lim_rps+=("$lr"); bare_cpu+=("$bc"); lim_cpu+=("$lc")
  echo "round $r: bare $br req/s ($bc µs CPU/req), with layer $lr req/s ($lc µs CPU/req)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mb=$(median "${bare_rps[@]}"); ml=$(median "${lim_rps[@]}")
cb=$(median "${bare_cpu[@]}"); cl=$(median "${lim_cpu[@]}")
echo "median throughput: bare $mb req/s, with layer $ml req/s, ratio $(awk -v a="$ml" -v b="$mb" 'BEGIN {printf "%.3f", a/b}')"
echo "median CPU/request: bare $cb µs, with layer $cl µs, ratio $(awk -v a="$cl" -v b="$cb" 'BEGIN {printf "%.3f", a/b}')"
