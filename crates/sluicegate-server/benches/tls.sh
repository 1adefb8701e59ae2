#!/usr/bin/env bash
# The gateway over TLS and HTTP/2 beside its plain path and beside nginx doing the same,
# side by side in one run (results: docs/benchmarks/server.md, "TLS and HTTP/2").
#
#   cargo build --release -p sluicegate-server --bin sluicegate -p sluicegate-bench --bin bench_peer
#   crates/sluicegate-server/benches/tls.sh [DURATION] [CONNECTIONS] [ROUNDS] [STREAMS]
#
# Targets, each on sluicegate's gateway and on nginx (limit_req, proxy_pass, keepalive
# upstream), all proxying to the same tiny upstream with a rate-limited catch-all route:
#   plain   HTTP/1.1 in clear text (wrk)            — the plain path, the reference
#   tls     HTTP/1.1 over TLS (wrk https)            — what TLS costs
#   h2      HTTP/2 over TLS by ALPN (h2load, STREAMS concurrent streams a connection)
#   h2c     HTTP/2 in clear text, prior knowledge (h2load)
# The same ECDSA P-256 certificate on both (openssl, made for this run). Rounds are
# interleaved target by target, so background load hits both servers alike; the server's
# own CPU time per request (user + system, from /proc) is reported beside throughput.
set -euo pipefail
DUR=${1:-5s}
CONN=${2:-32}
ROUNDS=${3:-3}
STREAMS=${4:-10}
THREADS=${WRK_THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
for tool in wrk h2load openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install -y wrk nghttp2-client openssl)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
bench_workdir
# wrk URL PID... -> "rps p50 p99 failed cpu_us_per_request"
wrk_run() { local url=$1; shift; wrk_latency "$*" -- wrk -t"$THREADS" -c"$CONN" -d"$DUR" --latency "$url"; }
# h2load URL PID... -> "rps p50 p99 failed cpu_us_per_request" (p50/p99: request times
# are not given by percentile; the mean and the max stand in their columns)
h2_run() {
  local url=$1; shift
  local before after out
  before=$(cpu_ns $(with_children "$@"))
  out=$(h2load -t"$THREADS" -c"$CONN" -m"$STREAMS" -D"${DUR%s}" "$url" 2>&1)
  after=$(cpu_ns $(with_children "$@"))
  local rps done failed mean max
  rps=$(awk '/^finished in/ {print $4}' <<<"$out")
  done=$(awk '/^requests:/ {print $6}' <<<"$out")
  failed=$(awk '/^status codes:/ {print $5 + $7 + $9}' <<<"$out")
  mean=$(awk '/^time for request:/ {print $6}' <<<"$out")
  max=$(awk '/^time for request:/ {print $5}' <<<"$out")
  if [ -z "$done" ] || [ "$done" = 0 ]; then echo "h2load failed: $out" >&2; echo "0 - - - -"; return; fi
  echo "$rps mean=$mean max=$max ${failed:-0} $(awk -v t=$((after - before)) -v n="$done" 'BEGIN {printf "%.2f", t / 1000 / n}')"
}

P_UP=$(free_port); P_API1=$(free_port); P_API2=$(free_port); P_GW=$(free_port); P_GWS=$(free_port)
P_NGX=$(free_port); P_NGXS=$(free_port); P_NGX2C=$(free_port)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -keyout "$WORK/gw.key" -out "$WORK/gw.crt" -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1,DNS:localhost 2>/dev/null
policy() {
  cat <<TOML
[server]
listen = "127.0.0.1:$1"

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
listen = "127.0.0.1:$2"
upstream = "http://127.0.0.1:$P_UP"
TOML
}
policy "$P_API1" "$P_GW" >"$WORK/plain.toml"
{ policy "$P_API2" "$P_GWS"; printf 'tls_cert = "gw.crt"\ntls_key = "gw.key"\n'; } >"$WORK/tls.toml"
# h2 runs CONN x STREAMS requests at once: keep that many upstream connections idle (nginx
# otherwise opens and closes the excess for every request). nginx closes a connection after
# 1000 requests by default (h2load does not reconnect, and wrk's reconnects would cost
# nginx a TLS handshake each): keep connections, as sluicegate does.
NGINX_WORKERS=auto nginx_proxy_conf "$P_UP" 1024 "listen 127.0.0.1:$P_NGX;
        listen 127.0.0.1:$P_NGXS ssl http2;
        listen 127.0.0.1:$P_NGX2C http2;" "ssl_certificate $WORK/gw.crt;
    ssl_certificate_key $WORK/gw.key;
    http2_max_concurrent_streams 200;
    keepalive_requests 100000000;"

"$REL/bench_peer" upstream "127.0.0.1:$P_UP" >/dev/null & PIDS+=($!)
RUST_LOG=warn "$REL/sluicegate" serve --config "$WORK/plain.toml" >/dev/null 2>"$WORK/plain.log" & PID_SG=$!; PIDS+=($PID_SG)
RUST_LOG=warn "$REL/sluicegate" serve --config "$WORK/tls.toml" >/dev/null 2>"$WORK/tls.log" & PID_SGS=$!; PIDS+=($PID_SGS)
"$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/error.log" & PID_NGX=$!; PIDS+=($PID_NGX)
for p in $P_UP $P_GW $P_GWS $P_NGX $P_NGXS $P_NGX2C; do wait_port "$p"; done

echo "machine: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg); $("$NGINX" -v 2>&1); $(h2load --version | head -1)"
echo "wrk -t$THREADS -c$CONN -d$DUR; h2load -t$THREADS -c$CONN -m$STREAMS -D${DUR%s}; $ROUNDS rounds each"
echo
echo "| round | target | requests/s | p50 | p99 | failed | server CPU µs/request |"
echo "|---|---|---|---|---|---|---|"
row() { read -r a b c d e <<<"$2"; echo "| $1 | $3 | $a | $b | $c | $d | $e |"; }
for r in $(seq "$ROUNDS"); do
  row "$r" "$(wrk_run "http://127.0.0.1:$P_NGX/api/items" "$PID_NGX")" "nginx plain HTTP/1.1"
  row "$r" "$(wrk_run "http://127.0.0.1:$P_GW/api/items" "$PID_SG")" "sluicegate plain HTTP/1.1"
  row "$r" "$(wrk_run "https://127.0.0.1:$P_NGXS/api/items" "$PID_NGX")" "nginx TLS HTTP/1.1"
  row "$r" "$(wrk_run "https://127.0.0.1:$P_GWS/api/items" "$PID_SGS")" "sluicegate TLS HTTP/1.1"
  row "$r" "$(h2_run "https://127.0.0.1:$P_NGXS/api/items" "$PID_NGX")" "nginx h2 (TLS)"
  row "$r" "$(h2_run "https://127.0.0.1:$P_GWS/api/items" "$PID_SGS")" "sluicegate h2 (TLS)"
  row "$r" "$(h2_run "http://127.0.0.1:$P_NGX2C/api/items" "$PID_NGX")" "nginx h2c"
  row "$r" "$(h2_run "http://127.0.0.1:$P_GW/api/items" "$PID_SG")" "sluicegate h2c"
done
