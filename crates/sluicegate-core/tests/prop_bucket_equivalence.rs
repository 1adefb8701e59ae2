//! In reject mode, token_bucket, leaky_bucket and gcra are one limiter written three ways:
//! where `period / limit` is a whole number of µs, their decisions are identical, field by
//! field (allowed, remaining, reset_after, retry_after).

use proptest::prelude::*;
use sluicegate_core::algorithm::{Gcra, LeakyBucket, TokenBucket};
use sluicegate_testkit::prop::{run, scenario};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn identical_decisions((limit, interval, burst, events) in scenario(true, 80)) {
        // A whole number of µs per request, and a period no longer than the generated one
        // (limit × a week would leave the range a policy may have).
        let period = limit * (interval / limit).max(1);
        let (token, _) = run(&TokenBucket::new(limit, period, burst), &events, None);
        let (leaky, _) = run(&LeakyBucket::new(limit, period, burst), &events, None);
        let (gcra, _) = run(&Gcra::new(limit, period, burst), &events, None);
        for (i, e) in events.iter().enumerate() {
            prop_assert_eq!(token[i], leaky[i], "token vs leaky at {} cost {}", e.at, e.cost);
            prop_assert_eq!(token[i], gcra[i], "token vs gcra at {} cost {}", e.at, e.cost);
        }
    }
}
