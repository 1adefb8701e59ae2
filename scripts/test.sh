#!/usr/bin/env bash
# The test suite, as the README's quick start and CI run it: installs the real servers the
# tests talk to when they are missing (redis-server, nginx, Envoy, Chromium), then runs
# every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
# The test kit (crates/sluicegate-testkit) fails, never skips, a test whose program is
# missing when CI=true; this script installs them all, so it runs the tests that way.
export CI=true
cargo test --workspace "$@"
# Not yet run here: scripts/schemathesis.sh (the API against its own OpenAPI document) still
# finds one ST204 (an undeclared method answered otherwise than 405); see docs/security.md.
