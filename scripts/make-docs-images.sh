#!/usr/bin/env bash
# Regenerates the simulated charts of docs/choosing-an-algorithm.md, docs/simulate.md,
# docs/concurrency.md and docs/llm-tokens.md with the release binary: docs/img/*.svg, and
# each run's summary table as docs/img/*.txt. The simulator is deterministic (Poisson
# arrivals, durations and costs are seeded), so unchanged algorithms give byte-identical
# files. Usage: scripts/make-docs-images.sh
# SLUICEGATE_BIN=path/to/sluicegate uses that binary instead of building the release one
# (the output does not depend on the build profile).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${SLUICEGATE_BIN:-}" ]]; then
  bin=$SLUICEGATE_BIN
else
  cargo build --release --quiet --bin sluicegate
  bin="${CARGO_TARGET_DIR:-target}/release/sluicegate"
fi
out=docs/img

run() {
  local name=$1
  shift
  echo "== $name: sluicegate simulate $*"
  "$bin" simulate "$@" --out "$out/$name.svg" | sed '/^wrote /d' | tee "$out/$name.txt"
}

# A fixed window lets 2 × limit through across a window boundary; the sliding ones do not.
run boundary-burst \
  --algorithm fixed_window,sliding_window,sliding_log \
  --limit 10 --period 1m --pattern boundary --duration 3m

# A bursty API client: clumps of 40 requests every 5 s (8/s on average) against
# 10 requests a second with bursts of 20, every algorithm rejecting.
run bursty-client \
  --algorithm all --limit 10 --period 1s --burst 20 \
  --pattern burst --size 40 --rate 8 --duration 30s

# The same client throttled instead: the buckets in delay mode, waiting up to 2 s.
run bursty-client-delay \
  --algorithm token_bucket,leaky_bucket,gcra --limit 10 --period 1s --burst 20 \
  --mode delay --max-delay 2s --pattern burst --size 40 --rate 8 --duration 30s

# Poisson arrivals at 1.5 × the limit for an hour: long-run admission and state size.
run poisson-hour \
  --algorithm all --limit 100 --period 1s \
  --pattern poisson --rate 150 --duration 1h --seed 1

# The same client at 0.9 × the limit: the windows reject some of its natural bursts.
run poisson-under-limit \
  --algorithm all --limit 100 --period 1s \
  --pattern poisson --rate 90 --duration 1h --seed 1

# sliding_window's worst case: the previous window's requests all in its last millisecond,
# then steady requests; the estimate spreads them over the whole window and admits almost
# 2 × limit within one period. The trace is written here, so the script stays the source.
trace=$(mktemp --suffix=.csv)
trap 'rm -f "$trace"' EXIT
{
  echo timestamp_ms
  for _ in $(seq 10); do echo 59999; done
  for i in $(seq 0 19); do echo $((60000 + i * 3000)); done
} > "$trace"
run sliding-window-worst \
  --algorithm fixed_window,sliding_window,sliding_log \
  --limit 10 --period 1m --pattern "trace:$trace" --duration 3m
sed -i "s|trace:$trace|trace:requests.csv|" "$out/sliding-window-worst.txt" "$out/sliding-window-worst.svg"

# Protecting a slow endpoint (docs/concurrency.md): reports take 8 s on average
# (exponential), one a second arrives, at most 5 may run: the leases hold 5 slots and the
# rest is refused at once; every lease is released when its report ends.
run slow-endpoint \
  --algorithm concurrency --limit 5 --lease 2m \
  --request-duration exp:8s --pattern poisson --rate 1 --duration 10m --seed 1

# A lease shorter than the slowest requests: leases expire while their request still runs,
# the slot goes to the next one, and the upstream sees more than the limit at once.
run lease-too-short \
  --algorithm concurrency --limit 5 --lease 5s \
  --request-duration uniform:2s..20s --pattern poisson --rate 0.5 --duration 10m --seed 1

# Limiting an LLM API by tokens (docs/llm-tokens.md): 90,000 tokens a minute, completions
# arriving at random, each charged an estimate on arrival and settled with its real
# usage when it ends, against keeping the estimate. Overestimated (1000 for a mean of
# 600): settling admits what the budget really allows. Underestimated (300, five a
# second): without settling, twice the budget goes through.
run llm-tokens-overestimate \
  --algorithm token_bucket --limit 90000 --period 1m \
  --pattern poisson --rate 3 --duration 30m --seed 1 \
  --request-duration exp:20s --cost-estimate 1000 --cost-real exp:600 --settle both
run llm-tokens-underestimate \
  --algorithm token_bucket --limit 90000 --period 1m \
  --pattern poisson --rate 5 --duration 30m --seed 1 \
  --request-duration exp:20s --cost-estimate 300 --cost-real exp:600 --settle both
