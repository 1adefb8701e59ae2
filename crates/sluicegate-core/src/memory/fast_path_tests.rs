//! The store's one-policy fast path ([`StoreShard::check_gcra`], falling back to
//! [`StoreShard::decide_declined`]: [`StoreShard::check_one`] for any algorithm, then
//! [`StoreShard::decide_general`] when that declines) against the general steps it stands
//! for (evaluate, commit if admitted, sweep), on two shards fed the same random requests:
//! every decision and every count of tracked states must be the same, for every algorithm
//! and mode, with keys evicted (more keys than the shard's bound) and states expiring.

use std::time::Duration;

use proptest::prelude::*;

use super::fingerprint::KeyHasher;
use super::registry::PolicyRef;
use super::shard::{StoreShard, Target};
use crate::clock::Micros;
use crate::{AlgorithmKind, Mode, Policy};

/// States a shard may hold: fewer than the keys below, so new keys evict.
const CAP: usize = 5;
/// Distinct keys a sequence uses.
const KEYS: u8 = 9;

fn policy(which: usize) -> Policy {
    let second = Duration::from_secs(1);
    let delay = Duration::from_millis(700);
    let built = match which {
        0 => Policy::builder("gcra", AlgorithmKind::Gcra, 3, second).build(),
        1 => Policy::builder("gcra", AlgorithmKind::Gcra, 3, second)
            .mode(Mode::Delay)
            .max_delay(delay)
            .build(),
        2 => Policy::builder("bucket", AlgorithmKind::TokenBucket, 2, second)
            .mode(Mode::Shadow)
            .build(),
        3 => Policy::builder("fixed", AlgorithmKind::FixedWindow, 2, second).build(),
        4 => Policy::builder("sliding", AlgorithmKind::SlidingWindow, 3, second).build(),
        5 => Policy::builder("log", AlgorithmKind::SlidingLog, 2, second).build(),
        6 => Policy::builder("leaky", AlgorithmKind::LeakyBucket, 2, second)
            .mode(Mode::Delay)
            .max_delay(delay)
            .build(),
        7 => Policy::builder("slots", AlgorithmKind::Concurrency, 2, second)
            .lease(Duration::from_secs(2))
            .build(),
        // A penalty always takes the general steps: both sides must still agree.
        _ => Policy::builder("penalised", AlgorithmKind::Gcra, 2, second)
            .penalty(Duration::from_secs(1))
            .build(),
    };
    built.expect("valid policy")
}

/// The general steps of one policy's decision, as `decide_general` takes them when the
/// one-pass check declines.
fn general_steps(shard: &mut StoreShard, t: Target<'_>, now: Micros, cost: u64) -> crate::Decision {
    let decision = shard.evaluate(t, now, cost);
    if decision.allowed {
        shard.commit(t, now, cost, &decision, &|_, _| false);
    }
    shard.sweep(t.r.index, now);
    decision
}

proptest! {
    #[test]
    fn the_fast_path_decides_as_the_general_steps(
        which in 0usize..9,
        steps in prop::collection::vec((0u64..600, 0..KEYS, 0u64..3), 1..150),
    ) {
        let policy = policy(which);
        let hasher = KeyHasher::new();
        let r = PolicyRef { index: 0, id: 1, lineage: 1 };
        let (mut fast, mut general) = (StoreShard::new(CAP, usize::MAX), StoreShard::new(CAP, usize::MAX));
        let mut now: Micros = 1_700_000_000_000_000;
        for (i, (wait_ms, key, cost)) in steps.into_iter().enumerate() {
            now += wait_ms * 1000;
            let fp = hasher.fingerprint(&format!("client-{key}"));
            let t = Target { r, policy: &policy, fp, numbers: None };
            // The store's chain: gcra inline, else any algorithm's one pass, else general.
            // Dropping the `Unswept` takes the sweep steps (at the end of the `if let`).
            let by_fast = if let Some((decision, _)) = fast.check_gcra(&t, now, cost) {
                decision
            } else {
                fast.decide_declined(t, now, cost)
            };
            let by_general = general_steps(&mut general, t, now, cost);
            prop_assert_eq!(by_fast, by_general, "step {}", i);
            prop_assert_eq!(fast.count(), general.count(), "step {}", i);
            prop_assert!(fast.count() <= CAP);
        }
    }
}
