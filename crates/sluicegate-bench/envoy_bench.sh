#!/usr/bin/env bash
# ShouldRateLimit through the real `sluicegate serve` on three stores: memory, a standalone
# redis-server and a 3-master Redis Cluster (docs/benchmarks/envoy.md).
#
# Starts the three servers once, then runs `grpc_load` against each in turn, ROUNDS times
# (interleaved, so the machine's changing load falls on every store alike), writing one line
# per run with the load average beside it, and prints the medians per store.
#
#   crates/sluicegate-bench/envoy_bench.sh            # ROUNDS=5 SECS=5 CONC=16 CONNS=4
#   ROUNDS=7 CONC=64 crates/sluicegate-bench/envoy_bench.sh
set -euo pipefail
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-5}
CONC=${CONC:-16}
CONNS=${CONNS:-4}
root=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --manifest-path "$root/Cargo.toml" -p sluicegate-server -p sluicegate-bench \
  --bin sluicegate --bin grpc_load
bin=${CARGO_TARGET_DIR:-$root/target}/release
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# A port whose cluster bus port (+10000) is free too.
free_cluster_port() {
  python3 -c '
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    if p < 55000:
        b = socket.socket()
        try:
            b.bind(("127.0.0.1", p + 10000)); print(p); break
        except OSError:
            pass'
}
wait_pong() {
  for _ in $(seq 200); do redis-cli -p "$1" ping 2>/dev/null | grep -q PONG && return; sleep 0.05; done
  echo "redis on $1 did not start" >&2; exit 1
}
redis() { # PORT EXTRA... ; prints the pid
  mkdir -p "$work/r$1"
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/r$1" \
    "${@:2}" >/dev/null 2>&1 &
  pids+=($!)
  wait_pong "$1"
}

# The stores.
standalone=$(free_port); redis "$standalone"; standalone_pid=${pids[-1]}
cluster_ports=(); cluster_pids=()
for _ in 1 2 3; do
  p=$(free_cluster_port)
  redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 5000
  cluster_ports+=("$p"); cluster_pids+=("${pids[-1]}")
done
redis-cli --cluster create "${cluster_ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >/dev/null
for p in "${cluster_ports[@]}"; do
  until redis-cli -p "$p" cluster info | grep -q cluster_state:ok; do sleep 0.1; done
done

cat >"$work/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
EOF
seeds=$(printf '"redis://127.0.0.1:%s",' "${cluster_ports[@]}")
declare -A store_toml=(
  [memory]='backend = "memory"'
  [redis]="backend = \"redis\"
url = \"redis://127.0.0.1:$standalone/0\"
timeout = \"2s\""
  [cluster]="backend = \"redis\"
cluster = [${seeds%,}]
timeout = \"2s\""
)
declare -A grpc server_pid store_pids=([memory]="" [redis]="$standalone_pid" [cluster]=$(IFS=,; echo "${cluster_pids[*]}"))
for store in memory redis cluster; do
  printf '[store]\n%s\n\n[envoy]\nconfig = "bench.yaml"\n' "${store_toml[$store]}" >"$work/$store.toml"
  grpc[$store]="127.0.0.1:$(free_port)"
  "$bin/sluicegate" serve --config "$work/$store.toml" --listen 127.0.0.1:0 \
    --envoy-listen "${grpc[$store]}" >"$work/$store.log" 2>&1 &
  pids+=($!); server_pid[$store]=$!
  for _ in $(seq 600); do
    grep -qs '^ready' "$work/$store.log" && break
    kill -0 "${server_pid[$store]}" 2>/dev/null || { cat "$work/$store.log" >&2; exit 1; }
    sleep 0.1
  done
done

echo "# $(date -u +%FT%TZ) $(nproc) cores; ROUNDS=$ROUNDS SECS=$SECS CONC=$CONC CONNS=$CONNS"
results="$work/results"
for round in $(seq "$ROUNDS"); do
  for store in memory redis cluster; do
    extra=()
    [ -n "${store_pids[$store]}" ] && extra=(--store-pids "${store_pids[$store]}")
    line=$("$bin/grpc_load" --target "${grpc[$store]}" --concurrency "$CONC" --connections "$CONNS" \
      --seconds "$SECS" --warmup 1 --pid "${server_pid[$store]}" --label "$store" "${extra[@]}")
    echo "round=$round load1=$(cut -d' ' -f1 /proc/loadavg) $line" | tee -a "$results"
  done
done

python3 - "$results" <<'EOF'
import statistics, sys
rows = [dict(f.split("=", 1) for f in line.split()) for line in open(sys.argv[1])]
fields = ["calls_per_sec", "p50_us", "p99_us", "cpu_us_per_call", "store_cpu_us_per_call", "load1"]
med = {}
print("\n| store | calls/s | p50 µs | p99 µs | server CPU µs/call | redis CPU µs/call | load1 | errors |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for store in ["memory", "redis", "cluster"]:
    runs = [r for r in rows if r["label"] == store]
    m = {}
    for f in fields:
        values = [float(r[f]) for r in runs if r.get(f, "-") != "-"]
        m[f] = statistics.median(values) if values else None
    med[store] = m
    show = lambda v, d=0: "-" if v is None else f"{v:,.{d}f}"
    errors = sum(int(r["errors"]) for r in runs)
    print(f"| {store} | {show(m['calls_per_sec'])} | {show(m['p50_us'])} | {show(m['p99_us'])} | "
          f"{show(m['cpu_us_per_call'], 1)} | {show(m['store_cpu_us_per_call'], 1)} | {show(m['load1'], 2)} | {errors} |")
c, r = med["cluster"], med["redis"]
print(f"\ncluster / standalone: calls/s {c['calls_per_sec'] / r['calls_per_sec']:.2f}x, "
      f"p50 {c['p50_us'] / r['p50_us']:.2f}x, server CPU/call {c['cpu_us_per_call'] / r['cpu_us_per_call']:.2f}x")
EOF
