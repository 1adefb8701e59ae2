#!/usr/bin/env bash
# Server load tests, side by side in one run (results: docs/benchmarks/server.md).
#
#   cargo build --release -p sluicegate-server --bin sluicegate -p sluicegate-bench --bin bench_peer
#   crates/sluicegate-server/benches/loadtest.sh [DURATION] [CONNECTIONS] [ROUNDS]
#
# 1. POST /v1/check on the in-memory store vs a bare axum handler answering the same JSON.
# 2. The gateway vs nginx (limit_req), both proxying to the same tiny upstream.
# Each pair is measured alternately, ROUNDS times, so background load hits both alike.
set -euo pipefail
DUR=${1:-5s}
CONN=${2:-32}
ROUNDS=${3:-2}
THREADS=${WRK_THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install -y wrk)" >&2; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
# CPU ticks (user + system) of a process and its children threads/workers.
ticks() {
  local total=0 pid
  for pid in "$@" $(for p in "$@"; do pgrep -P "$p" || true; done); do
    [ -r "/proc/$pid/stat" ] || continue
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}
# measure URL SCRIPT PID... -> "rps p50 p99 non2xx cpu_us_per_request"
# CPU time per request is what the server itself spent (ticks of 1/CLK_TCK s): unlike
# throughput it hardly moves when other processes load the machine.
measure() {
  local url=$1 script=$2; shift 2
  local before after out
  before=$(ticks "$@")
  if [ -n "$script" ]; then out=$(wrk -t"$THREADS" -c"$CONN" -d"$DUR" --latency -s "$script" "$url"); else out=$(wrk -t"$THREADS" -c"$CONN" -d"$DUR" --latency "$url"); fi
  after=$(ticks "$@")
  local rps p50 p99 errors requests
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errors=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  local cpu
  cpu=$(awk -v t=$((after - before)) -v n="$requests" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
  echo "$rps $p50 $p99 ${errors:-0} $cpu"
}

P_BARE=$(port); P_API=$(port); P_UP=$(port); P_GW=$(port); P_NGX=$(port)
cat >"$WORK/bench.toml" <<TOML
[server]
listen = "127.0.0.1:$P_API"
trusted_proxies = ["127.0.0.1/32"]

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
mkdir -p "$WORK/tmp"
cat >"$WORK/nginx.conf" <<NGX
worker_processes auto;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $WORK/tmp/body;
    proxy_temp_path $WORK/tmp/proxy;
    fastcgi_temp_path $WORK/tmp/fastcgi;
    uwsgi_temp_path $WORK/tmp/uwsgi;
    scgi_temp_path $WORK/tmp/scgi;
    limit_req_zone \$binary_remote_addr zone=bench:10m rate=100000000r/s;
    upstream up { server 127.0.0.1:$P_UP; keepalive 64; }
    server {
        listen 127.0.0.1:$P_NGX;
        location / {
            limit_req zone=bench burst=100000000 nodelay;
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
NGX

"$REL/bench_peer" bare "127.0.0.1:$P_BARE" >/dev/null & PID_BARE=$!; PIDS+=($PID_BARE)
"$REL/bench_peer" upstream "127.0.0.1:$P_UP" >/dev/null & PIDS+=($!)
RUST_LOG=warn "$REL/sluicegate" serve --config "$WORK/bench.toml" >/dev/null & PID_SG=$!; PIDS+=($PID_SG)
"$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/error.log" & PID_NGX=$!; PIDS+=($PID_NGX)
for p in $P_BARE $P_API $P_UP $P_GW $P_NGX; do wait_port "$p"; done

echo "machine: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t$THREADS -c$CONN -d$DUR, $ROUNDS rounds each"
echo
echo "| round | target | requests/s | p50 | p99 | non-2xx | server CPU µs/request |"
echo "|---|---|---|---|---|---|---|"
row() { read -r a b c d e <<<"$2"; echo "| $1 | $3 | $a | $b | $c | $d | $e |"; }
for r in $(seq "$ROUNDS"); do
  row "$r" "$(measure "http://127.0.0.1:$P_BARE/v1/check" "$HERE/check.lua" "$PID_BARE")" "bare axum POST /v1/check"
  row "$r" "$(measure "http://127.0.0.1:$P_API/v1/check" "$HERE/check.lua" "$PID_SG")" "sluicegate POST /v1/check"
done
for r in $(seq "$ROUNDS"); do
  row "$r" "$(measure "http://127.0.0.1:$P_NGX/api/items" "" "$PID_NGX")" "nginx limit_req proxy"
  row "$r" "$(measure "http://127.0.0.1:$P_GW/api/items" "" "$PID_SG")" "sluicegate gateway"
done
