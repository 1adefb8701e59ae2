#!/usr/bin/env bash
# The in-process comparison of issue 15: Sluicegate's keyed limiter (`KeyedLimiter`, gcra) and
# its whole in-memory store path (`MemoryStore::check_now`, one gcra policy: what the server
# calls) side by side with governor 0.10's keyed limiter (u64 and String keys), at 1k, 100k
# and 1M keys, on 1 and 2 threads, in interleaved rounds timed by thread CPU time
# (crates/sluicegate-core/benches/keyed.rs), plus callgrind instructions per decision
# (benches/keyed_probe.rs). The store path twice: `check_now` (its verdict owns the policy: what
# the server holds) and `check_borrowed` (the verdict refers to the caller's policy, no
# reference count touched). Method and figures: docs/benchmarks/core.md.
#
# Prints markdown rows in the columns of BENCHMARKS.md's headline table
# (| what | peer, side by side | result | target | met? |), then the per-size detail.
#
# Usage: scripts/bench-core.sh [--no-callgrind]
# Env: CARGO_TARGET_DIR (default ./target). Takes ~2 minutes, ~5 with callgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
callgrind=1
[ "${1:-}" = "--no-callgrind" ] && callgrind=0

log=$(mktemp)
trap 'rm -f "$log"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
cargo bench -q -p sluicegate-core --bench keyed -- ab_interleaved >"$log" 2>&1 || {
  cat "$log" >&2
  exit 1
}
# The like-for-like pair (u64 keys on both sides), in its own binary (why: keyed_u64.rs).
cargo bench -q -p sluicegate-core --bench keyed_u64 >>"$log" 2>&1 || {
  cat "$log" >&2
  exit 1
}
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ab/<keys>/<threads>thread/<subject>: median <ns> CPU ns a check[; throughput vs
# governor_string <r>x, vs governor_u64 <r>x]
# (the like-for-like binary's lines are tagged ab_u64/: its governor_u64 is its own run)
tag() { [ "$1" = sluicegate_gcra_u64 ] && echo ab_u64 || echo ab; }
ns() { sed -n "s|^$(tag "$3")/$1/$2thread/$3: median \([0-9.]*\) CPU ns.*|\1|p" "$log"; }
ratio() { sed -n "s|^$(tag "$3")/$1/$2thread/$3: .*vs $4 \([0-9.]*\)x.*|\1|p" "$log"; }
ns_u64_peer() { sed -n "s|^ab_u64/$1/$2thread/governor_u64: median \([0-9.]*\) CPU ns.*|\1|p" "$log"; }

declare -A ir
if [ "$callgrind" = 1 ]; then
  command -v valgrind >/dev/null || {
    echo "valgrind is missing (scripts/install-test-deps.sh), or pass --no-callgrind" >&2
    exit 1
  }
  bin=$(cargo bench -p sluicegate-core --bench keyed_probe --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*keyed_probe-[^)]*\)).*/\1/p' | tail -1)
  checks=100000 # CHECKS in keyed_probe.rs
  for keys in 1000 1000000; do
    for subject in sluicegate_gcra sluicegate_gcra_u64 sluicegate_store_gcra sluicegate_store_borrowed_gcra \
      sluicegate_store_gcra_8_bytes sluicegate_store_token_bucket harness_only governor_u64 governor_string; do
      out=$(mktemp)
      valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
        --toggle-collect='*probe_run*' "$bin" "$subject" "$keys" 2>"$out" >/dev/null
      total=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out")
      rm -f "$out"
      ir[$subject/$keys]=$((total / checks))
    done
  done
fi

met() { awk -v r="$1" -v t="$2" 'BEGIN { print (r + 0 >= t + 0) ? "yes" : "no" }'; }
k() { case $1 in 1000) echo 1k ;; 100000) echo 100k ;; 1000000) echo 1M ;; esac; }

echo "<!-- scripts/bench-core.sh, $(date -u +%Y-%m-%dT%H:%MZ), load average $load_before -> $load_after -->"
echo "| what | peer, side by side | result | target | met? |"
echo "|---|---|---|---|---|"
for subject in sluicegate_store_gcra sluicegate_store_borrowed_gcra sluicegate_gcra sluicegate_gcra_u64; do
  case $subject in
    sluicegate_store_gcra) what="MemoryStore path (\`check_now\`, one gcra policy: what the server calls)" ;;
    sluicegate_store_borrowed_gcra) what="MemoryStore path, verdict borrowing its policy (\`check_borrowed\`)" ;;
    sluicegate_gcra) what="KeyedLimiter gcra, string keys (formatted, 23 bytes hashed)" ;;
    sluicegate_gcra_u64) what="KeyedLimiter gcra, \`u64\` keys (like for like)" ;;
  esac
  for keys in 1000 1000000; do
    target=$([ "$keys" = 1000 ] && echo 1.0 || echo 1.5)
    r1=$(ratio "$keys" 1 "$subject" governor_u64)
    r2=$(ratio "$keys" 2 "$subject" governor_u64)
    peer_ns=$(ns "$keys" 1 governor_u64)
    [ "$subject" = sluicegate_gcra_u64 ] && peer_ns=$(ns_u64_peer "$keys" 1)
    result="${r1}× (1 thread), ${r2}× (2 threads) governor's throughput; CPU ns a check $(ns "$keys" 1 "$subject") vs $peer_ns"
    if [ "$callgrind" = 1 ]; then
      result="$result; ${ir[$subject/$keys]} vs ${ir[governor_u64/$keys]} instructions"
    fi
    both=$(awk -v a="$r1" -v b="$r2" 'BEGIN { print (a < b) ? a : b }')
    echo "| $what, $(k "$keys") keys | governor keyed, u64 keys | $result | ≥ ${target}× | $(met "$both" "$target") |"
  done
done

echo
echo "CPU ns a check (median of the interleaved rounds) and throughput ratio to governor (median of per-round ratios):"
echo
echo "| keys | threads | store gcra | store gcra, borrowed | KeyedLimiter gcra | KeyedLimiter gcra, u64 keys | KeyedLimiter token_bucket | governor u64 | governor String | harness only | store vs u64 | borrowed vs u64 | gcra vs u64 | gcra u64 vs u64 | store vs String | gcra vs String |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for keys in 1000 100000 1000000; do
  for threads in 1 2; do
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s× | %s× | %s× | %s× | %s× | %s× |\n' "$(k "$keys")" "$threads" \
      "$(ns "$keys" "$threads" sluicegate_store_gcra)" "$(ns "$keys" "$threads" sluicegate_store_borrowed_gcra)" \
      "$(ns "$keys" "$threads" sluicegate_gcra)" "$(ns "$keys" "$threads" sluicegate_gcra_u64)" \
      "$(ns "$keys" "$threads" sluicegate_token_bucket)" "$(ns "$keys" "$threads" governor_u64)" \
      "$(ns "$keys" "$threads" governor_string)" "$(ns "$keys" "$threads" harness_only)" \
      "$(ratio "$keys" "$threads" sluicegate_store_gcra governor_u64)" \
      "$(ratio "$keys" "$threads" sluicegate_store_borrowed_gcra governor_u64)" \
      "$(ratio "$keys" "$threads" sluicegate_gcra governor_u64)" \
      "$(ratio "$keys" "$threads" sluicegate_gcra_u64 governor_u64)" \
      "$(ratio "$keys" "$threads" sluicegate_store_gcra governor_string)" \
      "$(ratio "$keys" "$threads" sluicegate_gcra governor_string)"
  done
done
if [ "$callgrind" = 1 ]; then
  echo
  echo "Instructions per decision (callgrind, $checks checks after filling):"
  echo
  echo "(store, 8 bytes: the store keyed by 8 bytes of the id, no formatting, probe only: the"
  echo "floor of the store path; store, token bucket: the contract's default algorithm, probe"
  echo "only; harness only: formatting the key and reading the clock)"
  echo
  echo "| keys | store gcra | store gcra, borrowed | store gcra, 8 bytes | store token bucket | KeyedLimiter gcra | KeyedLimiter gcra, u64 keys | governor u64 | governor String | harness only |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for keys in 1000 1000000; do
    echo "| $(k "$keys") | ${ir[sluicegate_store_gcra/$keys]} | ${ir[sluicegate_store_borrowed_gcra/$keys]} | ${ir[sluicegate_store_gcra_8_bytes/$keys]} | ${ir[sluicegate_store_token_bucket/$keys]} | ${ir[sluicegate_gcra/$keys]} | ${ir[sluicegate_gcra_u64/$keys]} | ${ir[governor_u64/$keys]} | ${ir[governor_string/$keys]} | ${ir[harness_only/$keys]} |"
  done
fi
