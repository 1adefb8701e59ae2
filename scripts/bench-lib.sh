# Helpers for the side-by-side load tests (sourced by scripts/bench-*.sh; not run alone).
#
# The rule every comparison keeps: peer and ours are measured in alternating rounds (peer,
# ours, peer, ours...) so background load hits both alike; medians are reported, and the
# server CPU time per request (from /proc, all threads and child processes), which hardly
# moves when neighbours load the machine while throughput swings by 2x.

# A free TCP port on loopback.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits (up to 20 s) until something listens on 127.0.0.1:$1.
wait_port() {
  local _
  for _ in $(seq 200); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "port $1 never opened" >&2
  return 1
}

# The processes "$@" and their children (nginx's workers), once, for cpu_ns.
with_children() {
  local p
  for p in "$@"; do echo "$p"; pgrep -P "$p" || true; done
}

# CPU nanoseconds (user + system) spent so far by every thread of the processes "$@"
# (/proc/PID/task/*/schedstat: nanosecond resolution, unlike the 10 ms ticks of stat).
cpu_ns() {
  local total=0 pid ns _
  for pid in "$@"; do
    for stat in /proc/"$pid"/task/*/schedstat; do
      [ -r "$stat" ] || continue
      read -r ns _ <"$stat" || continue
      total=$((total + ns))
    done
  done
  echo "$total"
}

# measure_wrk PIDS -- WRK_COMMAND...   prints "requests_per_s cpu_us_per_request non2xx"
# PIDS is a space-separated list of every server process whose CPU the request costs.
measure_wrk() {
  local pids=$1; shift
  [ "$1" = "--" ] && shift
  local before after out
  # shellcheck disable=SC2086
  before=$(cpu_ns $pids)
  out=$("$@")
  # shellcheck disable=SC2086
  after=$(cpu_ns $pids)
  awk -v b="$before" -v a="$after" '
    /requests in/ {n = $1}
    /Requests\/sec/ {r = $2}
    /Non-2xx/ {e = $5}
    END {
      if (n == 0) { print "0 0 0"; exit }
      printf "%.0f %.2f %d\n", r, (a - b) / 1000 / n, e
    }' <<<"$out"
}

# median N...   the median of the numbers.
median() {
  printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'
}

# ratio A B   A/B to 2 decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b == 0) print "n/a"; else printf "%.2f", a / b}'; }

# The header of the tables the bench-*.sh scripts print (docs/benchmarks/latest.md).
table_header() {
  echo "| comparison | peer | rounds | peer req/s | ours req/s | throughput ours/peer (median; range) | peer CPU µs/req | ours CPU µs/req | CPU ours/peer (median; range) |"
  echo "|---|---|---|---|---|---|---|---|---|"
}

# Side-by-side rounds of one comparison, then its table row.
#   side_by_side NAME PEER_NAME ROUNDS PEER_PIDS OURS_PIDS -- PEER_WRK_ARGS -- OURS_WRK_ARGS
# Rounds alternate: peer, ours, peer, ours... Per-round figures go to stderr.
side_by_side() {
  local name=$1 peer=$2 rounds=$3 peer_pids=$4 ours_pids=$5; shift 5
  [ "$1" = "--" ] && shift
  local peer_args=() ours_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do peer_args+=("$1"); shift; done
  shift
  ours_args=("$@")
  local pr=() or=() pc=() oc=() tr=() cr=() r p o
  for r in $(seq "$rounds"); do
    read -r -a p < <(measure_wrk "$peer_pids" -- "${peer_args[@]}")
    read -r -a o < <(measure_wrk "$ours_pids" -- "${ours_args[@]}")
    if [ "${p[2]}" != 0 ] || [ "${o[2]}" != 0 ]; then
      echo "$name round $r: non-2xx answers (peer ${p[2]}, ours ${o[2]}): the comparison is void" >&2
      return 1
    fi
    pr+=("${p[0]}"); or+=("${o[0]}"); pc+=("${p[1]}"); oc+=("${o[1]}")
    tr+=("$(ratio "${o[0]}" "${p[0]}")"); cr+=("$(ratio "${o[1]}" "${p[1]}")")
    echo "  $name round $r: $peer ${p[0]} req/s ${p[1]} µs CPU/req | ours ${o[0]} req/s ${o[1]} µs CPU/req" >&2
  done
  local range_t range_c
  range_t="$(printf '%s\n' "${tr[@]}" | sort -g | head -1)–$(printf '%s\n' "${tr[@]}" | sort -g | tail -1)"
  range_c="$(printf '%s\n' "${cr[@]}" | sort -g | head -1)–$(printf '%s\n' "${cr[@]}" | sort -g | tail -1)"
  echo "| $name | $peer | $rounds | $(median "${pr[@]}") | $(median "${or[@]}") | **$(median "${tr[@]}")×** ($range_t) | $(median "${pc[@]}") | $(median "${oc[@]}") | **$(median "${cr[@]}")×** ($range_c) |"
}

# A scratch directory in $WORK and a PIDS array whose processes are stopped on exit.
bench_workdir() {
  WORK=$(mktemp -d)
  PIDS=()
  trap 'stop_all; rm -rf "$WORK"' EXIT
}

# Stops every process in PIDS: SIGINT first (Pingora drains for minutes on SIGTERM), then
# SIGTERM (a script's background children that install no handler ignore SIGINT), then
# SIGKILL, so the script never waits forever on one.
stop_all() {
  local p signal
  for signal in INT TERM KILL; do
    for p in "${PIDS[@]}"; do kill -"$signal" "$p" 2>/dev/null || true; done
    for _ in $(seq 20); do
      kill -0 "${PIDS[@]}" 2>/dev/null || break
      sleep 0.1
    done
  done
  wait 2>/dev/null || true
}

# wrk_latency PIDS -- WRK_COMMAND...   prints "requests_per_s p50 p99 non2xx cpu_us_per_request"
# (WRK_COMMAND must pass --latency). PIDS as for measure_wrk.
wrk_latency() {
  local pids=$1; shift
  [ "$1" = "--" ] && shift
  local before after out
  # shellcheck disable=SC2086
  before=$(cpu_ns $(with_children $pids))
  out=$("$@")
  # shellcheck disable=SC2086
  after=$(cpu_ns $(with_children $pids))
  awk -v b="$before" -v a="$after" '
    /requests in/ {n = $1}
    /Requests\/sec/ {r = $2}
    $1 == "50%" {p50 = $2}
    $1 == "99%" {p99 = $2}
    /Non-2xx/ {e = $5}
    END {
      if (n == 0) { print "0 - - 0 0"; exit }
      printf "%.0f %s %s %d %.2f\n", r, p50, p99, e, (a - b) / 1000 / n
    }' <<<"$out"
}

# nginx_proxy_conf UPSTREAM_PORT KEEPALIVE LISTEN_LINES [EXTRA_HTTP_LINES]
# Writes $WORK/nginx.conf: nginx in the foreground with its temp files in $WORK, proxying
# everything to 127.0.0.1:UPSTREAM_PORT (HTTP/1.1, KEEPALIVE idle upstream connections)
# behind `limit_req` keyed by client address with a rate no request reaches, so the whole
# limit_req path runs and every request is admitted. LISTEN_LINES: the `listen ...;` lines.
nginx_proxy_conf() {
  mkdir -p "$WORK/tmp"
  cat >"$WORK/nginx.conf" <<NGX
worker_processes ${NGINX_WORKERS:-2};
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
    upstream up { server 127.0.0.1:$1; keepalive $2; }
    ${4:-}
    server {
        $3
        location / {
            limit_req zone=bench burst=100000000 nodelay;
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # Sluicegate's gateway adds it too: the same work on both sides.
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        }
    }
}
NGX
}
