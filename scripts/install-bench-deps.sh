#!/usr/bin/env bash
# Installs what the benchmark scripts need and the tests do not, when it is missing: wrk
# (the HTTP load generator of bench-http.sh, bench-gateway.sh and bench-api-ab.sh) and
# valgrind (callgrind instruction counts: bench-core.sh, callgrind-probe.sh); and the peers
# the tests install too (nginx, redis-server, redis-benchmark), so that benchmarks need not
# wait for the test suite's installer. scripts/bench.sh runs this first, so a fresh machine
# can run every comparison.
set -euo pipefail
need_apt=()
command -v wrk >/dev/null || need_apt+=(wrk)
command -v valgrind >/dev/null || need_apt+=(valgrind)
command -v nginx >/dev/null || need_apt+=(nginx-light)
command -v redis-benchmark >/dev/null || need_apt+=(redis-tools)
command -v redis-server >/dev/null || need_apt+=(redis-server)
if [ ${#need_apt[@]} -gt 0 ]; then
  # Other jobs on the machine may install at the same time.
  flock /tmp/sg-apt.lock apt-get update -qq
  flock /tmp/sg-apt.lock apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
