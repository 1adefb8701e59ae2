//! A big store (650,000 keys under a bound of a million) written to a snapshot and restored:
//! decisions, the snapshot and its restore, and dropping a policy's states are exact, and
//! the restore takes linear time (it was quadratic in a table's size before tables
//! reserved room for a snapshot's entries: 1.4 s for a million states in 256 shards in
//! release, 43 s for 200,000 in 8 shards unoptimised; see docs/benchmarks/core.md).

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Policy};

const T0: u64 = 1_764_000_000_000_000;
const KEYS: usize = 650_000;

fn policy(name: &str) -> Arc<Policy> {
    Arc::new(
        Policy::builder(name, AlgorithmKind::Gcra, 100, Duration::from_secs(86_400))
            .build()
            .unwrap(),
    )
}

/// (allowed, remaining) of a zero-cost check: reads the state without changing it.
fn peek(store: &MemoryStore<ManualClock>, p: &Arc<Policy>, key: &str) -> (bool, u64) {
    let list = [Arc::clone(p)];
    let v = store.check_now(CheckRequest::new(&list, key, 0)).unwrap();
    (v.allowed, v.decisions[0].decision.remaining)
}

#[test]
fn big_tables_decide_snapshot_restore_and_drop_exactly() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(1_000_000, clock.clone());
    let p = policy("big");
    let list = [Arc::clone(&p)];
    for i in 0..KEYS {
        let cost = 1 + (i % 3) as u64;
        let v = store.check_now(CheckRequest::new(&list, &format!("k{i}"), cost));
        assert!(v.unwrap().allowed);
    }
    assert_eq!(store.len(), KEYS);
    // Every key kept exactly what it used (none evicted: the bound is far).
    for i in (0..KEYS).step_by(101) {
        assert_eq!(
            peek(&store, &p, &format!("k{i}")),
            (true, 99 - (i % 3) as u64)
        );
    }

    let mut file = Vec::new();
    let written = store.write_snapshot(&mut file).unwrap();
    assert_eq!(written.states, KEYS as u64);
    let mut after = MemoryStore::with_clock(1_000_000, clock.clone());
    assert_eq!(after.restore(&file).unwrap().states, KEYS as u64);
    after.retain_policies(std::slice::from_ref(&p));
    assert_eq!(after.len(), KEYS);
    for i in (0..KEYS).step_by(97) {
        let key = format!("k{i}");
        assert_eq!(peek(&after, &p, &key), peek(&store, &p, &key), "{key}");
    }
    // Restored tables are sized for what they hold up front (a load of about 7/9), within
    // the bounds of a grown one (7/12 to 7/8): 16-byte gcra cells.
    let per_key = after.bytes() as f64 / KEYS as f64;
    assert!(
        (16.0 * 8.0 / 7.0..=16.0 * 12.0 / 7.0).contains(&per_key),
        "{per_key}"
    );

    // Dropping the policy frees its tables; the store goes on deciding from scratch.
    after.retain_policies(&[]);
    assert_eq!(after.len(), 0);
    let other = policy("other");
    assert_eq!(peek(&after, &other, "k1"), (true, 100));
    drop(store);
}
