//! `MemoryStore::check_borrowed`, whose verdict refers to the request's policies instead of
//! cloning their `Arc`s, decides exactly as `check_now` does, for every algorithm and mode,
//! one policy or several, and touches no reference count.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluicegate_core::{
    AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Mode, Policy, PolicyArc, StoreError,
    Verdict,
};

fn policies() -> Vec<Arc<Policy>> {
    let second = Duration::from_secs(1);
    let built = [
        Policy::builder("gcra", AlgorithmKind::Gcra, 3, second).build(),
        Policy::builder("bucket", AlgorithmKind::TokenBucket, 2, second)
            .mode(Mode::Delay)
            .max_delay(Duration::from_millis(700))
            .build(),
        Policy::builder("fixed", AlgorithmKind::FixedWindow, 2, second)
            .mode(Mode::Shadow)
            .build(),
        Policy::builder("sliding", AlgorithmKind::SlidingWindow, 3, second).build(),
        Policy::builder("log", AlgorithmKind::SlidingLog, 2, second)
            .penalty(Duration::from_secs(2))
            .build(),
        Policy::builder("leaky", AlgorithmKind::LeakyBucket, 2, second).build(),
        Policy::builder("slots", AlgorithmKind::Concurrency, 2, second)
            .lease(Duration::from_secs(5))
            .build(),
    ];
    built
        .into_iter()
        .map(|p| Arc::new(p.expect("valid policy")))
        .collect()
}

/// One step: advance the clock by `wait` ms, then check `key` under the policies at
/// `chosen` (distinct indices) with `cost`.
#[derive(Debug, Clone)]
struct Step {
    wait: u64,
    key: u8,
    chosen: Vec<usize>,
    cost: u64,
}

fn step(n: usize) -> impl Strategy<Value = Step> {
    (
        0u64..400,
        0u8..3,
        prop::sample::subsequence((0..n).collect::<Vec<_>>(), 1..=3),
        0u64..3,
    )
        .prop_map(|(wait, key, chosen, cost)| Step {
            wait,
            key,
            chosen,
            cost,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Two stores on one clock, fed the same requests: one through `check_now`, one through
    /// `check_borrowed`; every verdict (or error) is the same, and while a borrowed verdict
    /// lives its policies' reference counts are those of before the check.
    #[test]
    fn borrowed_verdicts_are_the_owned_ones(steps in prop::collection::vec(step(7), 1..60)) {
        let all = policies();
        let clock = ManualClock::new(1_700_000_000_000_000);
        let owned = MemoryStore::with_clock(1000, clock.clone());
        let borrowed = MemoryStore::with_clock(1000, clock.clone());
        for s in steps {
            clock.advance(Duration::from_millis(s.wait));
            let chosen: Vec<Arc<Policy>> = s.chosen.iter().map(|&i| Arc::clone(&all[i])).collect();
            let counts: Vec<usize> = chosen.iter().map(Arc::strong_count).collect();
            let key = format!("client-{}", s.key);
            let request = CheckRequest::new(&chosen, &key, s.cost);
            let got = borrowed.check_borrowed(request);
            if let Ok(verdict) = &got {
                for (d, count) in verdict.decisions.iter().zip(&counts) {
                    prop_assert!(matches!(d.policy, PolicyArc::Borrowed(_)));
                    prop_assert_eq!(Arc::strong_count(&d.policy), *count);
                }
            }
            let expected: Result<Verdict, StoreError> = owned.check_now(request);
            prop_assert_eq!(got.map(|v| v.into_owned()), expected);
        }
    }
}

#[test]
fn an_owned_copy_holds_its_policy_after_the_request_is_gone() {
    let store = MemoryStore::with_clock(10, ManualClock::new(1_000_000));
    let owned = {
        let policies = [Arc::new(
            Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(60))
                .build()
                .unwrap(),
        )];
        let verdict = store
            .check_borrowed(CheckRequest::new(&policies, "k", 1))
            .unwrap();
        assert_eq!(Arc::strong_count(&policies[0]), 1);
        verdict.into_owned()
    };
    assert!(owned.allowed);
    assert!(matches!(owned.decisions[0].policy, PolicyArc::Owned(_)));
    assert_eq!(Arc::strong_count(&owned.decisions[0].policy), 1);
    assert_eq!(owned.decisions[0].policy.name(), "p");
}
