#!/usr/bin/env bash
# Coverage-guided fuzzing with cargo-fuzz (libFuzzer; needs the nightly toolchain and
# `cargo install cargo-fuzz`): runs each target of fuzz/ for SECONDS (default 60), one after
# the other, starting from its corpus in fuzz/corpus/<target>/. New interesting inputs go to
# a scratch corpus, not into the repository; a crash stops the script and leaves the input in
# fuzz/artifacts/<target>/ (copy it into fuzz/corpus/<target>/ once fixed: the corpus replay
# test then keeps it). Prints each target's executions and time.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(config_toml envoy_yaml check_body client_ip path_route h1_head lane_chunked lane_head)
fi
# No sanitizer: the code is safe Rust, and ASan would triple the build and slow each run;
# libFuzzer's coverage guidance and Rust's own checks (debug assertions, overflow checks,
# bounds) stay on.
flags=(--sanitizer none --debug-assertions)
if ! cargo +nightly fuzz build "${flags[@]}"; then
  echo "fuzz targets do not build"
  exit 2
fi
bins=target/x86_64-unknown-linux-gnu/release
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target" "artifacts/$target"
  log="$scratch/$target.log"
  echo "== $target: ${seconds}s"
  # The built binary, not `cargo fuzz run`: that would build again (and a source edited in
  # the meantime would pass for a crash).
  if ! "$bins/$target" "$scratch/$target" "corpus/$target" \
      -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="artifacts/$target/" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "$target: FAILED (input in fuzz/artifacts/$target/)"
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" |
    sed "s/^/$target /"
  grep -E '^#[0-9]+[[:space:]]*DONE' "$log" | tail -n 1 | sed "s/^/$target /" || true
done
