#!/usr/bin/env bash
# Soak test (not in CI): SECONDS (default 600) of mixed traffic on the memory store, then the
# same on Redis with redis-server killed and restarted every minute: exact clients at full
# speed through forward-auth (a token_bucket that fails closed), a flood of unique keys,
# 100 slowloris connections at all times. Reports decisions, errors, the server's RSS over
# time and over-admissions (must be 0: the stores are exact), as JSON per phase; exits
# non-zero on an over-admission or an unexpected status. docs/soak.md has the figures.
# Usage: scripts/soak.sh [SECONDS] [BINARY]   (the binary defaults to the debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
bin=${2:-target/debug/sluicegate}
[ -x "$bin" ] || cargo build -q -p sluicegate-server --bin sluicegate
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${redis_port:-}" ] && redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

config() {
  cat <<TOML
[server]
listen = "127.0.0.1:$1"
trusted_proxies = ["127.0.0.1/32"]
header_read_timeout = "2s"

[store]
$2

[[policies]]
name = "exact"
algorithm = "token_bucket"
limit = 50
period = "1s"
on_store_error = "deny"

[[policies]]
name = "flood"
algorithm = "token_bucket"
limit = 10
period = "1m"

[[routes]]
path = "/exact"
policies = ["exact"]

[[routes]]
path = "/flood"
policies = ["flood"]
key = "header:x-api-key"
TOML
}

phase() {
  local name=$1 store=$2
  shift 2
  local port
  port=$(free_port)
  config "$port" "$store" > "$dir/$name.toml"
  "$bin" serve --config "$dir/$name.toml" > "$dir/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do grep -q '^ready' "$dir/$name.log" && break; sleep 0.1; done
  grep -q '^ready' "$dir/$name.log" || { cat "$dir/$name.log"; exit 1; }
  echo "== $name: ${seconds}s, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  local rc=0
  python3 scripts/soak.py "127.0.0.1:$port" "$pid" "$seconds" "$@" || rc=$?
  echo "== $name: load after: $(cut -d' ' -f1-3 /proc/loadavg); server log lines: $(wc -l < "$dir/$name.log")"
  kill "$pid"
  return $rc
}

status=0
phase memory 'backend = "memory"
max_keys = 100000' || status=1
redis_port=$(free_port)
redis_cmd=(redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir")
"${redis_cmd[@]}" > /dev/null 2>&1 &
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
phase redis "backend = \"redis\"
url = \"redis://127.0.0.1:$redis_port/0\"
timeout = \"100ms\"" "$redis_port" "${redis_cmd[@]}" || status=1
exit $status
