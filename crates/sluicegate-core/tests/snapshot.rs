//! `store.snapshot` (issue 14, item 7): the memory store written and read back keeps every
//! key's usage, running penalties and overrides, drops what expired meanwhile, and refuses
//! a foreign, truncated or corrupt file whole.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::memory::SnapshotError;
use sluicegate_core::{AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Override, Policy};

const T0: u64 = 1_764_000_000_000_000;

fn policies() -> Vec<Arc<Policy>> {
    let mut out: Vec<Arc<Policy>> = AlgorithmKind::ALL
        .into_iter()
        .map(|kind| {
            Arc::new(
                Policy::builder(kind.name(), kind, 100, Duration::from_secs(86_400))
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    out.push(Arc::new(
        Policy::builder(
            "cc",
            AlgorithmKind::Concurrency,
            100,
            Duration::from_secs(3600),
        )
        .lease(Duration::from_secs(3600))
        .build()
        .unwrap(),
    ));
    out.push(Arc::new(
        Policy::builder(
            "strict",
            AlgorithmKind::TokenBucket,
            1,
            Duration::from_secs(60),
        )
        .penalty(Duration::from_secs(3600))
        .build()
        .unwrap(),
    ));
    out.push(Arc::new(
        Policy::builder(
            "short",
            AlgorithmKind::FixedWindow,
            5,
            Duration::from_secs(1),
        )
        .build()
        .unwrap(),
    ));
    out
}

fn remaining(store: &MemoryStore<ManualClock>, p: &Arc<Policy>, key: &str) -> (bool, u64, u64) {
    let policies = [Arc::clone(p)];
    let d = store
        .check_now(CheckRequest::new(&policies, key, 0))
        .unwrap()
        .decisions[0]
        .decision;
    (d.allowed, d.limit, d.remaining)
}

fn used_store(clock: &ManualClock) -> MemoryStore<ManualClock> {
    let store = MemoryStore::with_clock(100_000, clock.clone());
    for p in policies() {
        let list = [Arc::clone(&p)];
        for i in 0..50 {
            let cost = if p.name() == "strict" { 1 } else { 1 + i % 3 };
            let _ = store.check_now(CheckRequest::new(&list, &format!("key-{i}"), cost));
        }
    }
    // key-0 of "strict" is now in its penalty: a second request was denied.
    let strict = [policies()[7].clone()];
    assert!(
        !store
            .check_now(CheckRequest::new(&strict, "key-0", 1))
            .unwrap()
            .allowed
    );
    let vip = Override {
        limit: 1000,
        burst: None,
        period: None,
    };
    store
        .set_override_now(&policies()[0], "key-1", Some(vip))
        .unwrap();
    store
}

#[test]
fn a_snapshot_keeps_usage_penalties_and_overrides() {
    let clock = ManualClock::new(T0);
    let before = used_store(&clock);
    let mut file = Vec::new();
    let written = before.write_snapshot(&mut file).unwrap();
    assert_eq!(written.states, before.len() as u64);
    assert_eq!(written.bytes, file.len() as u64);

    clock.advance(Duration::from_secs(2));
    let mut after = MemoryStore::with_clock(100_000, clock.clone());
    let restored = after.restore(&file).unwrap();
    after.retain_policies(&policies());
    // The one-second windows expired meanwhile: not restored.
    assert_eq!(restored.states, written.states - 50);
    for p in policies() {
        for i in 0..50 {
            let key = format!("key-{i}");
            assert_eq!(
                remaining(&after, &p, &key),
                remaining(&before, &p, &key),
                "{} {key}",
                p.name()
            );
        }
    }
    let (allowed, _, _) = remaining(&after, &policies()[7], "key-0");
    assert!(!allowed, "the penalty runs on");
    assert_eq!(remaining(&after, &policies()[0], "key-1").1, 1000);
}

#[test]
fn a_changed_limit_after_a_restart_keeps_usage() {
    let clock = ManualClock::new(T0);
    let before = used_store(&clock);
    let mut file = Vec::new();
    before.write_snapshot(&mut file).unwrap();
    let mut after = MemoryStore::with_clock(100_000, clock.clone());
    after.restore(&file).unwrap();
    let raised = Arc::new(
        Policy::builder(
            "gcra",
            AlgorithmKind::Gcra,
            1000,
            Duration::from_secs(86_400),
        )
        .build()
        .unwrap(),
    );
    after.retain_policies(std::slice::from_ref(&raised));
    let old = remaining(&before, &policies()[5], "key-2").2;
    assert_eq!(remaining(&after, &raised, "key-2").2, old + 900);
}

#[test]
fn foreign_truncated_and_corrupt_files_are_refused_whole() {
    let clock = ManualClock::new(T0);
    let mut file = Vec::new();
    used_store(&clock).write_snapshot(&mut file).unwrap();
    let fresh = || MemoryStore::with_clock(1000, clock.clone());
    assert_eq!(
        fresh().restore(b"{\"json\": true}"),
        Err(SnapshotError::Foreign)
    );
    assert_eq!(fresh().restore(b""), Err(SnapshotError::Foreign));
    for cut in [20, file.len() / 2, file.len() - 1] {
        assert!(
            matches!(
                fresh().restore(&file[..cut]),
                Err(SnapshotError::Corrupt(_))
            ),
            "cut at {cut}"
        );
    }
    let mut flipped = file.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    let mut store = fresh();
    assert!(matches!(
        store.restore(&flipped),
        Err(SnapshotError::Corrupt(_))
    ));
    assert!(store.is_empty(), "nothing applied from a corrupt file");
    let mut later = file.clone();
    later[16] = 9;
    assert!(fresh().restore(&later).is_err());
}
