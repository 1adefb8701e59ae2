#!/usr/bin/env bash
# schemathesis (PyPI) against the running server's own /openapi.json, with every check:
# a request valid by the spec must not be refused as invalid, no answer may be a 5xx, and
# every answer must match its documented status, headers and schema. Bounded examples and
# a fixed seed keep it well under two minutes. Usage: scripts/schemathesis.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/sluicegate}
if [ ! -x "$bin" ]; then
  cargo build -q -p sluicegate-server --bin sluicegate
fi
command -v schemathesis >/dev/null || python3 -m pip install --quiet schemathesis
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$dir/sluicegate.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
admin_token = "schemathesis-admin"

[[policies]]
name = "auth"
algorithm = "token_bucket"
limit = 1000000
period = "1s"

[[policies]]
name = "daily"
algorithm = "sliding_window"
limit = 1000000
period = "1d"

[[routes]]
path = "/"
policies = ["auth"]
TOML
"$bin" serve --config "$dir/sluicegate.toml" >"$dir/log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 100); do
  grep -q '^ready' "$dir/log" && break
  sleep 0.1
done
grep -q '^ready' "$dir/log" || { cat "$dir/log"; exit 1; }
# Path parameters name a configured policy, so that /v1/limits reaches the decisions instead
# of answering 404 for a random name every time (keys and bodies stay generated).
# A reservation or lease is an opaque signed token: any string is valid by the schema, and
# the contract answers 400 for one that is not genuine (CONTRACT.md, "Reserve then settle").
# An override's `period` is a duration ("90s", "1h 30m") whose rules depend on the policy
# (none for calendar or concurrency policies; within the store's exact range), which a
# schema cannot state. For those three operations only, 400 counts as an expected answer to
# schema-valid data; every other check (no 5xx, documented statuses and bodies) still runs.
cat > "$dir/schemathesis.toml" <<'TOML'
[parameters]
"path.policy" = "auth"

[[operations]]
include-path = "/v1/settle"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]

[[operations]]
include-path-regex = "^/v1/overrides/"
include-method = "PUT"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]

[[operations]]
include-path = "/v1/release"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]
TOML
schemathesis --config-file "$dir/schemathesis.toml" run "http://127.0.0.1:$port/openapi.json" \
  --checks all \
  --max-examples "${SCHEMATHESIS_EXAMPLES:-100}" \
  --seed 1 \
  --header "Authorization: Bearer schemathesis-admin" \
  --request-timeout 10 \
  --no-color
