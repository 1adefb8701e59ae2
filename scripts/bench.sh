#!/usr/bin/env bash
# Every side-by-side comparison of issue 15 in one run, written to docs/benchmarks/latest.md
# (BENCHMARKS.md quotes it). Not run by CI: it loads the machine for minutes.
#
#   scripts/bench.sh [--quick] [GROUP...]
#
# Groups (default: all), each a script printing markdown table rows (the convention of
# scripts/bench-lib.sh: every comparison in alternating rounds, peer then ours, medians,
# CPU time per request):
#   http      scripts/bench-http.sh: POST /v1/check vs bare axum, the tower layer vs no layer,
#             forward-auth behind nginx vs nginx limit_req, 5,000 routes vs 1
#             (also one of its parts alone: api, layer, forward-auth, routes)
#   core      scripts/bench-core.sh: the memory store and KeyedLimiter vs governor
#   gateway   scripts/bench-gateway.sh: the gateway vs nginx proxy_pass + limit_req
#   redis     scripts/bench-redis.sh: store.sync vs exact mode, the Redis batch API vs
#             redis-benchmark
# --quick: fewer and shorter rounds (each script's own quick mode; for core, no callgrind),
# for a first look.
# OUT=path writes elsewhere than docs/benchmarks/latest.md.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=() CHOSEN=() HTTP_PARTS=()
for arg in "$@"; do
  case $arg in
    --quick) QUICK=(--quick) ;;
    http | core | gateway | redis) CHOSEN+=("$arg") ;;
    sync) CHOSEN+=(redis) ;;
    api | layer | forward-auth | routes) HTTP_PARTS+=("$arg") ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown group $arg (http, api, layer, forward-auth, routes, core, gateway, redis, --quick)" >&2; exit 2 ;;
  esac
done
if [ ${#HTTP_PARTS[@]} -gt 0 ] && [[ " ${CHOSEN[*]} " != *" http "* ]]; then CHOSEN+=(http); fi
[ ${#CHOSEN[@]} -gt 0 ] || CHOSEN=(http core gateway redis)
OUT=${OUT:-docs/benchmarks/latest.md}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

declare -A SCRIPT=([http]=scripts/bench-http.sh [core]=scripts/bench-core.sh
  [gateway]=scripts/bench-gateway.sh [redis]=scripts/bench-redis.sh)
declare -A TITLE=([http]="HTTP paths" [core]="In-memory limiter"
  [gateway]="Gateway" [redis]="Redis")
declare -A OWNER=([http]=perfhttp [core]=perfcore [gateway]=gwperf [redis]=sync)

# What the comparisons run that is missing: wrk and valgrind (which the test suite does not
# install), nginx and redis-server/redis-benchmark (which it does, later).
bash scripts/install-bench-deps.sh
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
for group in "${CHOSEN[@]}"; do
  script=${SCRIPT[$group]}
  if [ ! -x "$script" ]; then
    echo "_not run: \`$script\` is missing (owner: ${OWNER[$group]})._" >"$TMP/$group.md"
    continue
  fi
  echo "== $group: $script ${QUICK[*]} ${HTTP_PARTS[*]}" >&2
  # Each script's own way to be quick: bench-core.sh skips callgrind, bench-redis.sh takes
  # seconds per round and rounds, bench-gateway.sh duration, connections and rounds.
  args=()
  if [ ${#QUICK[@]} -gt 0 ]; then
    case $group in
      core) args=(--no-callgrind) ;;
      redis) args=(1 3) ;;
      gateway) args=(2s 32 2) ;;
      *) args=(--quick) ;;
    esac
  fi
  # bench-gateway.sh runs the release binaries as they are: build them first.
  if [ "$group" = gateway ]; then
    cargo build -q --release -p sluicegate-server --bin sluicegate -p sluicegate-bench --bin bench_peer
  fi
  [ "$group" = http ] && args+=("${HTTP_PARTS[@]}")
  # A failing comparison is reported in the table, not hidden, and the others still run.
  if ! "$script" "${args[@]}" >"$TMP/$group.md" 2> >(tee "$TMP/$group.log" >&2); then
    echo "_failed: \`$script\` exited with an error; see its log below._" >>"$TMP/$group.md"
  fi
done

# Uncommitted changes apart from the output itself (which may lie outside the repository).
case $(realpath -m "$OUT") in
  "$PWD"/*) dirty() { ! git diff --quiet -- . ":(exclude)$OUT"; } ;;
  *) dirty() { ! git diff --quiet; } ;;
esac

{
  echo "# Latest benchmark run"
  echo
  echo "Written by \`scripts/bench.sh ${*}\` on $started at commit \`$(git rev-parse --short HEAD)\`$(dirty && echo ' (with uncommitted changes)')."
  echo "Machine: $(nproc) vCPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(uname -sr);"
  echo "load average $load_before at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  echo
  echo "Method: each comparison runs peer and ours in alternating rounds (peer, ours, peer,"
  echo "ours…) with the same load generator and inputs; the tables give medians. **CPU µs per"
  echo "request** (the servers' user + system time from \`/proc\`, every thread and worker"
  echo "process, divided by the requests served) is the headline: throughput on this shared"
  echo "machine swings by 2× with other people's builds, CPU per request hardly moves."
  echo "\"ours/peer\" is the median of the per-round ratios, with their range; a CPU ratio"
  echo "below 1 means ours spends less. Detail and history: docs/benchmarks/*.md."
  for group in "${CHOSEN[@]}"; do
    echo
    echo "## ${TITLE[$group]} (\`${SCRIPT[$group]}\`)"
    echo
    cat "$TMP/$group.md"
    if [ -s "$TMP/$group.log" ]; then
      echo
      echo "<details><summary>rounds</summary>"
      echo
      echo '```'
      cat "$TMP/$group.log"
      echo '```'
      echo "</details>"
    fi
  done
} >"$OUT"
echo "wrote $OUT" >&2
