//! `KeyedLimiter` keyed by other types than strings (`memory::Key`): integers and IP
//! addresses decide exactly as the same keys given as strings do, keys stay apart, and an
//! IPv4 client seen through an IPv6 socket is one client.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use proptest::prelude::*;
use sluicegate_core::algorithm::{Gcra, Quota, SlidingLog, TokenBucket};
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{AlgorithmKind, Policy};

const T0: u64 = 1_700_000_000_000_000;

fn policy(kind: AlgorithmKind) -> Policy {
    Policy::builder("p", kind, 3, Duration::from_secs(1))
        .build()
        .unwrap()
}

fn gcra(max_keys: usize) -> KeyedLimiter<Gcra> {
    let p = policy(AlgorithmKind::Gcra);
    KeyedLimiter::with_max_keys(Gcra::from(Quota::from(&p)), p, max_keys)
}

proptest! {
    /// The same requests, keyed once by `u64` and once by the id's decimal text, get the
    /// same decisions: the key's type changes only what is hashed. (Room for every key: under
    /// eviction, which key goes depends on which shard its hash picks, and so may differ;
    /// how many expired states the sweep has dropped, `len`, may too.)
    #[test]
    fn u64_keys_decide_as_string_keys(
        steps in proptest::collection::vec((0u64..12, 0u64..3, 0u64..400_000), 1..200),
    ) {
        let by_id = gcra(100_000);
        let by_text = gcra(100_000);
        let mut now = T0;
        for (id, cost, dt) in steps {
            now += dt;
            let a = by_id.check(&id, now, cost);
            let b = by_text.check(id.to_string().as_str(), now, cost);
            prop_assert_eq!(a, b);
        }
    }
}

#[test]
fn integer_keys_are_apart_and_share_within_a_key() {
    let l = gcra(1000);
    for id in 0u64..100 {
        assert!(
            l.check(&id, T0, 3).allowed,
            "{id}: a fresh key has its burst"
        );
    }
    assert_eq!(l.len(), 100);
    for id in 0u64..100 {
        assert!(!l.check(&id, T0, 1).allowed, "{id}: its burst is spent");
    }
    // Another integer width is another key type: 7u32 is not 7u64 (4 bytes, not 8).
    assert!(l.check(&7u32, T0, 3).allowed);
    assert_eq!(l.len(), 101);
    l.refund(&7u64, T0, 1);
    assert!(l.check(&7u64, T0, 1).allowed);
    assert!(l.remove(&7u64));
    assert_eq!(l.peek(&7u64, T0).remaining, 3);
}

#[test]
fn an_ipv4_client_is_one_client_whichever_socket_it_came_through() {
    let p = policy(AlgorithmKind::TokenBucket);
    let l = KeyedLimiter::with_max_keys(TokenBucket::from(Quota::from(&p)), p, 1000);
    let v4 = Ipv4Addr::new(198, 51, 100, 7);
    assert!(l.check(&IpAddr::V4(v4), T0, 2).allowed);
    // `::ffff:198.51.100.7` (a dual-stack listener's view of the same client).
    let mapped = IpAddr::V6(v4.to_ipv6_mapped());
    assert!(l.check(&mapped, T0, 1).allowed);
    assert!(
        !l.check(&mapped, T0, 1).allowed,
        "both ways draw on one budget"
    );
    assert!(
        !l.check(&v4, T0, 1).allowed,
        "Ipv4Addr is the same key as IpAddr::V4"
    );
    assert_eq!(l.len(), 1);
    // A real IPv6 client, and the IPv4-compatible form (`::198.51.100.7`, deprecated, not
    // what a socket reports for an IPv4 client), are other clients.
    assert!(l.check(&IpAddr::V6(Ipv6Addr::LOCALHOST), T0, 3).allowed);
    assert!(l.check(&IpAddr::V6(v4.to_ipv6_compatible()), T0, 3).allowed);
    assert_eq!(l.len(), 3);
}

#[test]
fn byte_string_keys_are_the_strings_bytes() {
    let p = policy(AlgorithmKind::SlidingLog);
    let l = KeyedLimiter::with_max_keys(SlidingLog::from(Quota::from(&p)), p, 1000);
    assert!(l.check("alice", T0, 3).allowed);
    assert!(!l.check(b"alice".as_slice(), T0, 1).allowed);
    assert!(!l.check(&String::from("alice"), T0, 1).allowed);
    assert!(l.check(b"alice\0".as_slice(), T0, 1).allowed, "another key");
    assert_eq!(l.len(), 2);
}
