#!/usr/bin/env bash
# POST /v1/check on two builds of sluicegate and the bare axum handler, in one run: each
# round measures the three in turn (the order rotating from round to round), so background
# load hits them alike. Method and the figures: docs/benchmarks/server.md.
#
#   OLD=dir NEW=dir [ROUNDS=7 DUR=5s CONN=32] scripts/bench-api-ab.sh
#
# OLD and NEW hold release builds of `sluicegate`; NEW also `bench_peer` and `bench_config`.
# Prints per-round figures, then the medians of CPU µs a request and throughput, and the
# ratios (per round, then their median and range).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
: "${OLD:?OLD=dir of the old build}" "${NEW:?NEW=dir of the new build}"
ROUNDS=${ROUNDS:-7} DUR=${DUR:-5s} CONN=${CONN:-32}
LUA=crates/sluicegate-server/benches/check.lua
bench_workdir

declare -A PID PORT
start() { # name binary-dir
  PORT[$1]=$(free_port)
  "$NEW/bench_config" "127.0.0.1:${PORT[$1]}" 1 >"$WORK/$1.toml"
  RUST_LOG=warn "$2/sluicegate" serve --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 &
  PID[$1]=$!
  PIDS+=("${PID[$1]}")
  wait_port "${PORT[$1]}"
}
start old "$OLD"
start new "$NEW"
PORT[bare]=$(free_port)
"$NEW/bench_peer" bare "127.0.0.1:${PORT[bare]}" >/dev/null &
PID[bare]=$!
PIDS+=("${PID[bare]}")
wait_port "${PORT[bare]}"

echo "bench-api-ab: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds of $DUR, $CONN connections" >&2
declare -A CPU RPS
order=(bare old new)
for r in $(seq "$ROUNDS"); do
  for name in "${order[@]}"; do
    read -r -a m < <(measure_wrk "${PID[$name]}" -- wrk -t2 -c"$CONN" -d"$DUR" -s "$LUA" "http://127.0.0.1:${PORT[$name]}/v1/check")
    [ "${m[2]}" = 0 ] || { echo "$name round $r: ${m[2]} non-2xx answers: void" >&2; exit 1; }
    RPS[$name,$r]=${m[0]} CPU[$name,$r]=${m[1]}
  done
  echo "  round $r (${order[*]}; load $(cut -d' ' -f1 /proc/loadavg)): bare ${RPS[bare,$r]} req/s ${CPU[bare,$r]} µs | old ${RPS[old,$r]} req/s ${CPU[old,$r]} µs | new ${RPS[new,$r]} req/s ${CPU[new,$r]} µs" >&2
  order=("${order[@]:1}" "${order[0]}")
done
# col NAME ARRAY: the rounds' figures of NAME; rat A B ARRAY: A/B round by round.
col() { local -n arr=$2; local r out=(); for r in $(seq "$ROUNDS"); do out+=("${arr[$1,$r]}"); done; echo "${out[@]}"; }
rat() { local -n arr=$3; local r out=(); for r in $(seq "$ROUNDS"); do out+=("$(ratio "${arr[$1,$r]}" "${arr[$2,$r]}")"); done; echo "${out[@]}"; }
summary() { # label values...
  local label=$1; shift
  echo "$label: median $(median "$@") (range $(printf '%s\n' "$@" | sort -g | head -1)–$(printf '%s\n' "$@" | sort -g | tail -1))"
}
for n in bare old new; do
  summary "$n CPU µs/request" $(col $n CPU)
  summary "$n requests/s" $(col $n RPS)
done
summary "CPU old/bare" $(rat old bare CPU)
summary "CPU new/bare" $(rat new bare CPU)
summary "CPU new/old" $(rat new old CPU)
summary "throughput new/bare" $(rat new bare RPS)
summary "throughput new/old" $(rat new old RPS)
