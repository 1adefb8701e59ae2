#!/usr/bin/env bash
# Instructions per hash of core's one-shot SipHash-1-3 and of the siphasher crate's, side by
# side (crates/sluicegate-bench/src/bin/siphash_probe.rs), for keys of several lengths.
# Callgrind counts instructions, which do not depend on the machine's load.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluicegate-bench --bin siphash_probe
n=200000
for len in 12 16 24 40 64; do
  for step in probe_core probe_siphasher; do
    out=$(mktemp)
    KEY_LEN=$len valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
      --toggle-collect="*${step}*" target/release/siphash_probe 2>"$out" >/dev/null
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out")
    rm -f "$out"
    printf 'key %2d bytes  %-16s %6.1f instructions/hash\n' "$len" "$step" "$(echo "$ir / $n" | bc -l)"
  done
done
