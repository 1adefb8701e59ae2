#!/usr/bin/env bash
# Instructions per iteration of each hot-path step of the callgrind probe
# (crates/sluicegate-bench/src/bin/callgrind_probe.rs), counted by valgrind's callgrind:
# unlike wall-clock time, the count does not depend on what else the machine is doing.
# Usage: scripts/callgrind-probe.sh [PROBE_BINARY]   (default: builds and runs the release one)
#   STEPS="probe_api_bare probe_api_check"  only these steps (default: all)
#   KEEP=DIR   keep each step's callgrind.out.<step> in DIR, for callgrind_annotate --inclusive=yes
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p sluicegate-bench --bin callgrind_probe
  bin=target/release/callgrind_probe
fi
n=20000 # the probe's iterations per step (N in callgrind_probe.rs)
all="probe_store_check probe_limiter_check probe_write_headers probe_rejection
  probe_route_find_small probe_route_find_large probe_route_scan_small probe_route_scan_large
  probe_api_bare probe_api_check probe_api_lean probe_layer_bare probe_layer_limited probe_layer_outer
  probe_layer_identity probe_layer_governor
  probe_forward_auth_1 probe_forward_auth_5000"
for step in ${STEPS:-$all}; do
  out=$(mktemp)
  file=/dev/null
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && file=$KEEP/callgrind.out.$step
  # PROBE runs the HTTP steps one at a time (each builds its own app; valgrind is slow).
  PROBE=$step valgrind --tool=callgrind --callgrind-out-file="$file" --collect-atstart=no \
    --toggle-collect="*${step}*" "$bin" 2>"$out" >/dev/null
  ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out")
  rm -f "$out"
  printf '%-24s %8d instructions/iteration\n' "$step" $((ir / n))
done
