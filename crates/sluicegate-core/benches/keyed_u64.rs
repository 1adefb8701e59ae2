//! `KeyedLimiter` gcra keyed by `u64` against governor's keyed GCRA with `u64` keys: like
//! for like (no formatting, 8 bytes hashed on both sides), interleaved the way `keyed.rs`
//! is (`common/interleave.rs`), lines tagged `ab_u64/…`.
//!
//! A binary of its own: with this subject beside the string-keyed ones in `keyed.rs`, the
//! string-keyed `KeyedLimiter` measured ~7 ns a check slower at 1k keys (42 against 35 CPU
//! ns, the same instruction count: where rustc placed the code), so each binary holds one
//! comparison (docs/benchmarks/core.md, "Keys other than strings").
//!
//! Run: `cargo bench -p sluicegate-core --bench keyed_u64` (`scripts/bench-core.sh` does).

mod common;

use common::{LIKE_FOR_LIKE, interleave};

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    interleave::report("ab_u64", &LIKE_FOR_LIKE, &[0]);
}
