//! The observer counts each thread's decisions in a shard of its own; the page's figures
//! are every shard's, merged. Decisions observed from many threads at once must all show.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{
    AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Policy, VerdictObserver,
};
use sluicegate_dashboard::DashboardObserver;

#[test]
fn decisions_from_many_threads_are_all_counted() {
    let clock = ManualClock::new(1_796_000_000_000_000);
    let observer = DashboardObserver::with_clock(Default::default(), Arc::new(clock.clone()));
    let store = MemoryStore::with_clock(1_000, clock);
    let policies = [Arc::new(
        Policy::builder(
            "strict",
            AlgorithmKind::FixedWindow,
            1,
            Duration::from_secs(3600),
        )
        .build()
        .expect("a policy"),
    )];
    let check = |key| {
        store
            .check_now(CheckRequest::new(&policies, key, 1))
            .expect("decided")
    };
    let allowed = check("k");
    let denied = check("k");
    assert!(allowed.allowed && !denied.allowed);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (observer, allowed, denied) = (&observer, &allowed, &denied);
            s.spawn(move || {
                for i in 0..1_000 {
                    if i % 4 == 0 {
                        observer.observe("k", denied);
                    } else {
                        observer.observe(&format!("t{t}"), allowed);
                    }
                }
            });
        }
    });
    let snapshot = observer.snapshot();
    assert_eq!(snapshot.policies.len(), 1);
    let counts = &snapshot.policies[0].last_window;
    assert_eq!((counts.allowed, counts.denied), (6_000, 2_000));
    assert_eq!(
        snapshot.policies[0].series.denied.iter().sum::<u64>(),
        2_000
    );
    let top = &snapshot.top_keys[0];
    assert_eq!((top.key.as_str(), top.limited, top.error), ("k", 2_000, 0));
}
