//! `MemoryStore::check_now`'s verdict owns its policy without touching the caller's `Arc`:
//! it refers to the process's immortal copy of the policy, equal to the caller's, and past
//! the bound on such copies clones the `Arc` as before. One test (one process of its own):
//! the bound is the process's, so the steps must not run beside other tests that fill it.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Policy, PolicyArc};

fn policy(name: &str, limit: u64) -> Arc<Policy> {
    Arc::new(
        Policy::builder(name, AlgorithmKind::Gcra, limit, Duration::from_secs(60))
            .build()
            .unwrap(),
    )
}

#[test]
fn an_owned_verdict_refers_to_an_immortal_equal_copy_within_a_bound() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryStore::with_clock(10, clock.clone());

    // The caller's count is untouched while the verdict lives and after it.
    let policies = [policy("p", 2)];
    let verdict = store
        .check_now(CheckRequest::new(&policies, "k", 1))
        .unwrap();
    assert_eq!(Arc::strong_count(&policies[0]), 1);
    assert!(matches!(
        verdict.decisions[0].policy,
        PolicyArc::Borrowed(_)
    ));
    // Equal, not the same allocation: the caller may drop its own.
    assert_eq!(*verdict.decisions[0].policy, policies[0]);
    let again = store
        .check_now(CheckRequest::new(&policies, "k", 1))
        .unwrap();
    assert!(Arc::ptr_eq(
        &verdict.decisions[0].policy,
        &again.decisions[0].policy
    ));
    // The decisions are those of the policy: a limit of 2, the third is denied.
    assert!(verdict.allowed && again.allowed);
    let third = store
        .check_now(CheckRequest::new(&policies, "k", 1))
        .unwrap();
    assert!(!third.allowed);
    assert_eq!(third.decisions[0].decision.limit, 2);

    // An equal policy in another `Arc` (a configuration reloaded unchanged) shares the copy
    // and the state.
    let reloaded = [policy("p", 2)];
    let fourth = store
        .check_now(CheckRequest::new(&reloaded, "k", 1))
        .unwrap();
    assert!(!fourth.allowed);
    assert!(Arc::ptr_eq(
        &fourth.decisions[0].policy,
        &verdict.decisions[0].policy
    ));

    // The verdict outlives the request's policies and the store.
    drop((policies, reloaded, store));
    assert_eq!(verdict.decisions[0].policy.name(), "p");
    assert_eq!(verdict.decisions[0].policy.limit(), 2);

    // Ever new policies: copies stop at the bound (a few hundred KB), and verdicts past it
    // clone the caller's `Arc` as before, deciding the same.
    let store = MemoryStore::with_clock(10, clock);
    let mut pinned = 0;
    let mut last_owned = None;
    for i in 0..1_500 {
        let policies = [policy(&format!("p{i}"), 1)];
        let verdict = store
            .check_now(CheckRequest::new(&policies, "k", 1))
            .unwrap();
        assert!(verdict.allowed);
        assert_eq!(*verdict.decisions[0].policy, policies[0]);
        match verdict.decisions[0].policy {
            PolicyArc::Borrowed(_) => {
                assert_eq!(Arc::strong_count(&policies[0]), 1);
                pinned += 1;
            }
            PolicyArc::Owned(_) => {
                assert_eq!(Arc::strong_count(&policies[0]), 2);
                last_owned = Some(i);
            }
        }
        assert!(
            !store
                .check_now(CheckRequest::new(&policies, "k", 1))
                .unwrap()
                .allowed
        );
        store.retain_policies(&[]);
    }
    // The first policy above took one copy: 1,024 in all.
    assert_eq!(pinned, 1_023);
    assert_eq!(last_owned, Some(1_499));
}
