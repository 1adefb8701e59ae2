//! Every key the scripts write has a TTL, on allowed and denied paths, for every algorithm
//! and mode: never shorter than the time until the state is back to full (the decision's
//! `reset_after`: a shorter one would forget a client early and over-admit), never longer
//! than two periods; and the keys vanish once their state is idle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, KeyedCheck, Mode, Policy, Store};
use sluicegate_redis::state_key;
use sluicegate_testkit::redis::keys;
use sluicegate_testkit::{RedisServer, eventually, policy_with, redis, shared_policy};

/// Every algorithm in reject and shadow mode, and in delay mode where it has one.
fn policies(period: Duration) -> Vec<Arc<Policy>> {
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
    policies
}

/// The PTTL of `key` in milliseconds (-1: no TTL, -2: no key).
fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cli(&["pttl", key]).trim().parse().unwrap()
}

/// The Redis server's clock (`TIME`), in milliseconds: the scripts' clock.
fn redis_ms(server: &RedisServer) -> i64 {
    let time = server.cli(&["time"]);
    let mut parts = time.split_whitespace().map(|p| p.parse::<i64>().unwrap());
    let (secs, micros) = (parts.next().unwrap(), parts.next().unwrap());
    secs * 1000 + micros / 1000
}

/// One check, then the TTL of the state it wrote is at least the decision's `reset_after`
/// (less the time since the check started, measured, so no scheduling luck is involved).
async fn check_and_assert_ttl(
    server: &RedisServer,
    store: &impl Store,
    policy: &Arc<Policy>,
    client: &str,
    cost: u64,
) {
    let started = Instant::now();
    let ps = [Arc::clone(policy)];
    let verdict = store
        .check(CheckRequest::new(&ps, client, cost))
        .await
        .unwrap();
    let key = state_key("ttl-low", client, policy);
    // A key already gone has no time left: it passes only if it was due by now (a fixed
    // window that ended between the check and this read).
    let left = match pttl(server, &key) {
        -2 => 0,
        left => left,
    };
    let elapsed = started.elapsed().as_millis() as i64;
    let reset_ms = (verdict.decisions[0].decision.reset_after / 1000) as i64;
    let period_ms = policy.period_duration().as_millis() as i64;
    assert!(
        left >= reset_ms - elapsed - 1,
        "{key}: PTTL {left} ms, but the state is needed for {reset_ms} ms ({elapsed} ms ago)"
    );
    assert!(left <= 2 * period_ms + 1, "{key} lives too long: {left} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_never_ends_before_the_state_is_back_to_full() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = redis::store(&server.url(), "ttl-low").await;
    // A long period: whatever the machine's load, nothing expires during the test.
    for policy in policies(Duration::from_secs(60)) {
        for (client, costs) in [("one-by-one", &[1, 1, 1, 1][..]), ("burst", &[2, 1, 3])] {
            for &cost in costs {
                let cost = cost.min(policy.capacity());
                check_and_assert_ttl(&server, &store, &policy, client, cost).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_path_sets_a_ttl_of_at_most_two_periods() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = redis::store(&server.url(), "ttl").await;
    let period = Duration::from_secs(60);
    let policies = policies(period);
    let strict = shared_policy("strict", AlgorithmKind::FixedWindow, 1, period);
    let started_ms = redis_ms(&server);
    for client in 0..4 {
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
    // Every policy under every client, plus `strict` and the keyed "other".
    assert!(
        found.len() > 4 * policies.len(),
        "only {} keys: {found:?}",
        found.len()
    );
    let ttls: Vec<(&String, i64)> = found.iter().map(|k| (k, pttl(&server, k))).collect();
    // A fixed window's state lives until its window ends, on a multiple of the period of the
    // Redis clock: if one ended during the test, its keys are rightly gone by now.
    let window_ended = started_ms / period_ms(period) != redis_ms(&server) / period_ms(period);
    for (key, left) in ttls {
        if left == -2 && window_ended && key.ends_with(":fw") {
            continue;
        }
        assert!(left > 0, "{key} has PTTL {left}");
        assert!(
            left <= 2 * period_ms(period) + 1,
            "{key} lives too long: {left} ms"
        );
    }
}

fn period_ms(period: Duration) -> i64 {
    period.as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_vanish_once_idle() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = redis::store(&server.url(), "ttl-idle").await;
    let policies = policies(Duration::from_millis(200));
    for p in &policies {
        let ps = [Arc::clone(p)];
        for cost in [1, 2, 1] {
            let request = CheckRequest::new(&ps, "idle", cost.min(p.capacity()));
            store.check(request).await.unwrap();
        }
    }
    // Idle after at most two periods (sliding window): poll, never one long sleep.
    eventually("every key expired", || async {
        keys(server.port, "ttl-idle:*").is_empty()
    })
    .await;
}
