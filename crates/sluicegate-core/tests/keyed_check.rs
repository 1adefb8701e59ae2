//! `Store::check_keyed`: several policies, each under its own key and cost, all-or-nothing.

use std::time::Duration;

use sluicegate_core::{
    AlgorithmKind, BoxFuture, KeyedCheck, ManualClock, MemoryStore, Store, StoreError,
};
use sluicegate_testkit::{Later, shared_policy};

#[test]
fn a_denial_under_one_key_consumes_nothing_under_the_others() {
    let store = MemoryStore::with_clock(1000, ManualClock::new(120_000_000));
    let per_ip = shared_policy(
        "per_ip",
        AlgorithmKind::FixedWindow,
        5,
        Duration::from_secs(60),
    );
    let per_path = shared_policy(
        "per_path",
        AlgorithmKind::FixedWindow,
        1,
        Duration::from_secs(60),
    );
    let both = [
        KeyedCheck::new(&per_ip, "10.0.0.1", 1),
        KeyedCheck::new(&per_path, "/login", 1),
    ];
    assert!(store.check_keyed_now(&both).unwrap().allowed);
    let denied = store.check_keyed_now(&both).unwrap();
    assert!(!denied.allowed);
    assert!(denied.decisions[0].decision.allowed);
    assert!(!denied.decisions[1].decision.allowed);
    // per_ip took one request only: 4 remain under 10.0.0.1, 5 under another key.
    let peek = store
        .check_keyed_now(&[KeyedCheck::new(&per_ip, "10.0.0.1", 0)])
        .unwrap();
    assert_eq!(peek.decisions[0].decision.remaining, 4);
    let other = store
        .check_keyed_now(&[KeyedCheck::new(&per_ip, "10.0.0.2", 0)])
        .unwrap();
    assert_eq!(other.decisions[0].decision.remaining, 5);
}

#[test]
fn costs_are_per_item_and_validated() {
    let store = MemoryStore::with_clock(1000, ManualClock::new(120_000_000));
    let a = shared_policy("a", AlgorithmKind::FixedWindow, 10, Duration::from_secs(60));
    let b = shared_policy("b", AlgorithmKind::FixedWindow, 3, Duration::from_secs(60));
    let v = store
        .check_keyed_now(&[KeyedCheck::new(&a, "k", 7), KeyedCheck::new(&b, "k", 2)])
        .unwrap();
    assert_eq!(v.decisions[0].decision.remaining, 3);
    assert_eq!(v.decisions[1].decision.remaining, 1);
    assert!(matches!(
        store.check_keyed_now(&[KeyedCheck::new(&b, "k", 4)]),
        Err(StoreError::CostOverCapacity { .. })
    ));
    assert!(matches!(
        store.check_keyed_now(&[KeyedCheck::new(&a, "x", 1), KeyedCheck::new(&a, "x", 1)]),
        Err(StoreError::DuplicatePolicy(_))
    ));
}

#[test]
fn one_policy_under_two_keys_is_all_or_nothing() {
    let store = MemoryStore::with_clock(1000, ManualClock::new(120_000_000));
    let per_value = shared_policy(
        "per_value",
        AlgorithmKind::FixedWindow,
        2,
        Duration::from_secs(60),
    );
    let full = [KeyedCheck::new(&per_value, "b", 2)];
    assert!(store.check_keyed_now(&full).unwrap().allowed);
    let both = [
        KeyedCheck::new(&per_value, "a", 1),
        KeyedCheck::new(&per_value, "b", 1),
    ];
    let denied = store.check_keyed_now(&both).unwrap();
    assert!(!denied.allowed);
    assert!(denied.decisions[0].decision.allowed);
    let peek = store
        .check_keyed_now(&[KeyedCheck::new(&per_value, "a", 0)])
        .unwrap();
    assert_eq!(
        peek.decisions[0].decision.remaining, 2,
        "nothing taken under a"
    );
}

#[test]
fn the_default_check_keyed_refuses_mixed_keys() {
    // A store that only implements `check`: the default `check_keyed` serves shared keys
    // and refuses mixed ones rather than checking them non-atomically.
    let store = Later(MemoryStore::with_clock(1000, ManualClock::new(0)));
    let a = shared_policy("a", AlgorithmKind::FixedWindow, 10, Duration::from_secs(60));
    let b = shared_policy("b", AlgorithmKind::FixedWindow, 10, Duration::from_secs(60));
    let same = [KeyedCheck::new(&a, "k", 1), KeyedCheck::new(&b, "k", 1)];
    let mixed = [KeyedCheck::new(&a, "k", 1), KeyedCheck::new(&b, "j", 1)];
    let run = |items| futures_lite_block_on(store.check_keyed(items));
    assert!(run(&same).unwrap().allowed);
    assert!(matches!(run(&mixed), Err(StoreError::Unsupported(_))));
}

/// The stores' futures here are ready at once; poll once without a runtime.
fn futures_lite_block_on<T>(future: BoxFuture<'_, T>) -> T {
    use std::task::{Context, Poll, Waker};
    let mut future = future;
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("the in-memory store's future is always ready"),
    }
}
