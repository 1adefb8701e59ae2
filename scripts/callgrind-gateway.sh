#!/usr/bin/env bash
# Instructions per proxied request of the gateway (user space: the gateway's own code,
# hyper, Tokio, malloc; not the kernel), counted by valgrind's callgrind, so the figure
# does not depend on what else the shared machine is doing (docs/benchmarks/server.md).
#
#   scripts/callgrind-gateway.sh [SLUICEGATE_BINARY...]   (default: target/release/sluicegate)
#
# For each binary: starts it under callgrind with a gateway in front of bench_peer's
# upstream, warms one keep-alive connection, zeroes the counters, sends N requests over
# that connection with curl, dumps, and prints the total divided by N. With
# `BARE=1` it also counts `bench_peer proxy` (bare hyper) the same way; with `NGINX=1`,
# nginx (`proxy_pass` + `limit_req`, upstream keepalive, as scripts/bench-gateway.sh runs it)
# with one worker in the foreground (`master_process off`), so the figures share a run.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2000}
REL=${CARGO_TARGET_DIR:-target}/release
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$REL/sluicegate")
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 600); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
P_UP=$(port)
"$REL/bench_peer" upstream "127.0.0.1:$P_UP" >/dev/null & PIDS+=($!)
wait_port "$P_UP"
urls() { for _ in $(seq "$1"); do printf 'http://127.0.0.1:%s/api/items ' "$2"; done; }
# count NAME PORT PID: zero, N requests on one connection, dump, instructions / N.
count() {
  local name=$1 p=$2 pid=$3
  wait_port "$p"
  # shellcheck disable=SC2046
  curl -s $(urls 50 "$p") >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  # shellcheck disable=SC2046
  curl -s $(urls "$N" "$p") >/dev/null
  callgrind_control -d "$pid" >/dev/null 2>&1
  local total
  total=$(for f in "$WORK"/cg."$pid"*; do sed -n 's/^summary: *\([0-9]*\).*/\1/p;s/^totals: *\([0-9]*\).*/\1/p' "$f" | head -1; done | awk '{s += $1} END {print s}')
  printf '| %s | %d |\n' "$name" $((total / N))
  kill "$pid" 2>/dev/null || true
}
echo "| proxy | instructions a request (callgrind, $N requests on one keep-alive connection) |"
echo "|---|---|"
for bin in "${bins[@]}"; do
  P_GW=$(port); P_API=$(port)
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
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" \
    "$bin" serve --config "$WORK/bench.toml" >/dev/null 2>&1 & pid=$!; PIDS+=($pid)
  count "$bin" "$P_GW" "$pid"
done
if [ "${BARE:-}" = 1 ]; then
  P_HYP=$(port)
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" \
    "$REL/bench_peer" proxy "127.0.0.1:$P_HYP" "127.0.0.1:$P_UP" >/dev/null 2>&1 & pid=$!; PIDS+=($pid)
  count "bare hyper proxy" "$P_HYP" "$pid"
fi
if [ "${NGINX:-}" = 1 ]; then
  P_NGX=$(port)
  mkdir -p "$WORK/tmp"
  cat >"$WORK/nginx.conf" <<NGX
master_process off;
daemon off;
worker_processes 1;
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
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        }
    }
}
NGX
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" \
    "$(command -v nginx || echo /usr/sbin/nginx)" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/error.log" >/dev/null 2>&1 & pid=$!; PIDS+=($pid)
  count "nginx limit_req proxy (1 worker)" "$P_NGX" "$pid"
fi
