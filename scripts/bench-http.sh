#!/usr/bin/env bash
# The HTTP rows of issue 15, each side by side with its peer in alternating wrk rounds
# (method: docs/benchmarks/server.md and middleware.md). Prints markdown table rows on
# stdout (with the table's header), per-round figures on stderr.
#
#   scripts/bench-http.sh [--quick] [api] [layer] [forward-auth] [routes]
#
#   api           POST /v1/check (memory store) vs a bare axum handler answering the same JSON
#   layer         an axum app behind RateLimitLayer vs the same app without it
#   forward-auth  nginx auth_request -> sluicegate /v1/forward-auth vs nginx limit_req alone,
#                 both proxying to the same upstream
#   routes        /v1/forward-auth with 5,000 routes vs 1 route, the request falling to the
#                 catch-all
#
# No subset: all four. --quick: 3 rounds of 2 s (default 5 rounds of 5 s; ROUNDS, DUR,
# CONN override). Builds the release binaries it needs first (unless BIN_DIR is set).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

ROUNDS_DEFAULT=5 DUR_DEFAULT=5s WANT=()
for arg in "$@"; do
  case $arg in
    --quick) ROUNDS_DEFAULT=3 DUR_DEFAULT=2s ;;
    api | layer | forward-auth | routes) WANT+=("$arg") ;;
    *) echo "unknown argument $arg (api, layer, forward-auth, routes, --quick)" >&2; exit 2 ;;
  esac
done
[ ${#WANT[@]} -gt 0 ] || WANT=(api layer forward-auth routes)
ROUNDS=${ROUNDS:-$ROUNDS_DEFAULT}
DUR=${DUR:-$DUR_DEFAULT}
CONN=${CONN:-32}
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install -y wrk)" >&2; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
wants() { [[ " ${WANT[*]} " == *" $1 "* ]]; }

# BIN_DIR=dir: binaries built already (e.g. a copy of an older build to compare with).
if [ -z "${BIN_DIR:-}" ]; then
  cargo build -q --release -p sluicegate-server --bin sluicegate \
    -p sluicegate-bench --bin bench_peer --bin loadtest_server --bin bench_config
fi
REL=${BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
LUA=crates/sluicegate-server/benches
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# sluicegate serve with ROUTES routes (bench_config writes the TOML) on a free port; sets
# SG_PORT and SG_PID.
start_sluicegate() {
  SG_PORT=$(free_port)
  "$REL/bench_config" "127.0.0.1:$SG_PORT" "$1" >"$WORK/sg-$1.toml"
  RUST_LOG=warn "$REL/sluicegate" serve --config "$WORK/sg-$1.toml" >"$WORK/sg-$1.log" 2>&1 &
  SG_PID=$!
  PIDS+=("$SG_PID")
  wait_port "$SG_PORT"
}

WRK=(wrk -t2 -c"$CONN" -d"$DUR")
table_header
echo "bench-http: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds of $DUR, $CONN connections" >&2

if wants api || wants forward-auth || wants routes; then
  start_sluicegate 1
  SG1_PORT=$SG_PORT SG1_PID=$SG_PID
fi

if wants api; then
  P_BARE=$(free_port)
  "$REL/bench_peer" bare "127.0.0.1:$P_BARE" >/dev/null & PID_BARE=$!; PIDS+=("$PID_BARE")
  wait_port "$P_BARE"
  side_by_side "POST /v1/check, memory store" "bare axum handler, same JSON" "$ROUNDS" "$PID_BARE" "$SG1_PID" \
    -- "${WRK[@]}" -s "$LUA/check.lua" "http://127.0.0.1:$P_BARE/v1/check" \
    -- "${WRK[@]}" -s "$LUA/check.lua" "http://127.0.0.1:$SG1_PORT/v1/check"
fi

if wants layer; then
  "$REL/loadtest_server" >"$WORK/layer.addr" & PID_LAYER=$!; PIDS+=("$PID_LAYER")
  for _ in $(seq 100); do [ -s "$WORK/layer.addr" ] && break; sleep 0.1; done
  BARE=$(sed -n 's/.*bare=\([^ ]*\).*/\1/p' "$WORK/layer.addr")
  LIMITED=$(sed -n 's/.*limited=\([^ ]*\).*/\1/p' "$WORK/layer.addr")
  XFF=crates/sluicegate-middleware/benches/xff.lua
  # One server thread, one wrk thread: the layer's cost, not the scheduler's.
  side_by_side "tower layer (memory store, 10k client IPs)" "the same axum app without it" "$ROUNDS" "$PID_LAYER" "$PID_LAYER" \
    -- wrk -t1 -c"$CONN" -d"$DUR" -s "$XFF" "http://$BARE/api/items" \
    -- wrk -t1 -c"$CONN" -d"$DUR" -s "$XFF" "http://$LIMITED/api/items"
  # Context, not a goal: what a minimal limiter (governor keyed GCRA, no headers) costs there.
  GOVERNOR=$(sed -n 's/.*governor=\([^ ]*\).*/\1/p' "$WORK/layer.addr")
  if [ -n "$GOVERNOR" ]; then
    side_by_side "governor middleware, no headers (context)" "the same axum app without it" "$ROUNDS" "$PID_LAYER" "$PID_LAYER" \
      -- wrk -t1 -c"$CONN" -d"$DUR" -s "$XFF" "http://$BARE/api/items" \
      -- wrk -t1 -c"$CONN" -d"$DUR" -s "$XFF" "http://$GOVERNOR/api/items"
  fi
fi

if wants forward-auth; then
  P_UP=$(free_port) P_LIMIT=$(free_port) P_AUTH=$(free_port)
  THREADS=1 "$REL/bench_peer" upstream "127.0.0.1:$P_UP" >/dev/null & PID_UP=$!; PIDS+=("$PID_UP")
  mkdir -p "$WORK/nginx"
  sed -e "s|@WORK@|$WORK/nginx|g" -e "s|@UP@|$P_UP|g" -e "s|@SG@|$SG1_PORT|g" \
    -e "s|@LIMIT@|$P_LIMIT|g" -e "s|@AUTH@|$P_AUTH|g" "$LUA/forward_auth.nginx.conf" >"$WORK/nginx/nginx.conf"
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" & PID_NGX=$!; PIDS+=("$PID_NGX")
  for p in "$P_UP" "$P_LIMIT" "$P_AUTH"; do wait_port "$p"; done
  NGX_PIDS=$(with_children "$PID_NGX" | tr '\n' ' ')
  side_by_side "forward-auth: nginx auth_request -> sluicegate" "nginx limit_req alone (2 workers)" "$ROUNDS" \
    "$NGX_PIDS $PID_UP" "$NGX_PIDS $PID_UP $SG1_PID" \
    -- "${WRK[@]}" "http://127.0.0.1:$P_LIMIT/api/items" \
    -- "${WRK[@]}" "http://127.0.0.1:$P_AUTH/api/items"
fi

if wants routes; then
  start_sluicegate 5000
  side_by_side "/v1/forward-auth, 5,000 routes, catch-all request" "the same with 1 route" "$ROUNDS" "$SG1_PID" "$SG_PID" \
    -- "${WRK[@]}" -s "$LUA/forward_auth.lua" "http://127.0.0.1:$SG1_PORT/v1/forward-auth" \
    -- "${WRK[@]}" -s "$LUA/forward_auth.lua" "http://127.0.0.1:$SG_PORT/v1/forward-auth"
fi
