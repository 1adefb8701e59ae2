//! Every key the scripts write has a TTL, on allowed and denied paths, for every algorithm
//! and mode; and the keys vanish once their state is idle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, KeyedCheck, Mode, Store};
use sluicegate_testkit::redis::keys;
use sluicegate_testkit::{RedisServer, policy_with, redis, shared_policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_has_a_ttl_and_vanishes_when_idle() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = redis::store(&server.url(), "ttl").await;
    let period = Duration::from_millis(200);
    let mut policies = Vec::new();
    for kind in AlgorithmKind::ALL {
        let name = kind.name();
        policies.push(shared_policy(&format!("{name}-reject"), kind, 3, period));
        policies.push(Arc::new(policy_with(
            &format!("{name}-shadow"),
            kind,
            2,
            period,
            |b| b.burst(2).mode(Mode::Shadow).max_delay(period),
        )));
        if kind.supports_delay() {
            policies.push(Arc::new(policy_with(
                &format!("{name}-delay"),
                kind,
                3,
                period,
                |b| b.burst(2).mode(Mode::Delay).max_delay(period / 4),
            )));
        }
    }
    let strict = shared_policy("strict", AlgorithmKind::FixedWindow, 1, period);
    for round in 0..3 {
        for client in 0..8 {
            let key = format!("client-{client}");
            for p in &policies {
                for cost in [1, 1, 2, 1, 0, 1] {
                    let ps = [Arc::clone(p)];
                    store
                        .check(CheckRequest::new(&ps, &key, cost.min(p.capacity())))
                        .await
                        .unwrap();
                }
                // Multi-policy denials: `strict` denies, nothing may be written without TTL.
                let both = [Arc::clone(p), Arc::clone(&strict)];
                store
                    .check(CheckRequest::new(&both, &key, 1))
                    .await
                    .unwrap();
            }
            // Refunds and keyed checks write too.
            let ps = [Arc::clone(&policies[0])];
            store.refund(&ps, &key, 1).await.unwrap();
            let items = [
                KeyedCheck::new(&policies[1], &key, 1),
                KeyedCheck::new(&policies[2], "other", 1),
            ];
            store.check_keyed(&items).await.unwrap();
        }
        let found = keys(server.port, "ttl:*");
        assert!(found.len() > 10, "round {round}: only {} keys", found.len());
        for key in &found {
            let pttl: i64 = server.cli(&["pttl", key]).trim().parse().unwrap();
            // 0: under a millisecond left; -2: expired between SCAN and PTTL. Only -1, a key
            // without TTL, is wrong.
            assert!(pttl >= 0 || pttl == -2, "{key} has PTTL {pttl}");
            assert!(
                pttl <= 2 * period.as_millis() as i64 + 1,
                "{key} lives too long: {pttl} ms"
            );
        }
    }
    // Idle after at most two periods (sliding window); poll instead of one long sleep.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = keys(server.port, "ttl:*");
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "keys never expired: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
