//! `store.sync` (the local-first [`SyncedStore`]) on a real redis-server: one instance
//! decides like the in-memory store; N instances racing on one key admit at least the limit
//! and at most the documented bound, `limit + Σ what the others admitted between one's last
//! read of Redis and its last admission`; a Redis outage keeps decisions going, each
//! instance within the limit by itself, and what was admitted meanwhile reaches Redis when
//! it is back; a 3-master cluster. Exchanges are driven by `sync_now` (the interval is an
//! hour), so every count is exact.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluicegate_core::{
    AlgorithmKind, CheckRequest, Clock, ManualClock, MemoryStore, Micros, Policy, Store, StoreError,
};
use sluicegate_redis::{RedisConfig, SyncOptions, SyncedStore};
use sluicegate_testkit::{RedisCluster, RedisServer, eventually, shared_policy};

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);
/// 2023-11-14 22:13:20 UTC: mid-hour, so no test straddles a window boundary.
const START: Micros = 1_700_000_000_000_000;

/// The instances' shared clock, fixed at [`START`].
fn fixed() -> Arc<dyn Clock> {
    Arc::new(ManualClock::new(START))
}

async fn synced(config: RedisConfig, clock: Arc<dyn Clock>) -> SyncedStore {
    let options = SyncOptions {
        interval: HOUR,
        max_keys: 10_000,
        clock,
    };
    SyncedStore::connect(config, options).await.unwrap()
}

fn config(server: &RedisServer, prefix: &str) -> RedisConfig {
    let mut config = RedisConfig::standalone(server.url());
    config.key_prefix = prefix.into();
    config.timeout = Duration::from_millis(500);
    config
}

/// Admits up to `n` requests of cost 1; returns how many were admitted.
async fn admit(store: &SyncedStore, policies: &[Arc<Policy>], key: &str, n: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..n {
        let verdict = store
            .check(CheckRequest::new(policies, key, 1))
            .await
            .expect("a synced store decides");
        admitted += u64::from(verdict.allowed);
    }
    admitted
}

/// The fleet's count of `key`'s current window in Redis.
fn redis_count(server: &RedisServer, store: &SyncedStore, policy: &Policy, key: &str) -> u64 {
    let window = START / policy.period();
    let name = format!(
        "{}:sync:{}:{window}",
        store.redis().state_key(policy, key),
        policy.period()
    );
    server.cli(&["GET", &name]).trim().parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_instances_stay_within_the_documented_bound() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    for kind in [AlgorithmKind::FixedWindow, AlgorithmKind::SlidingWindow] {
        let prefix = format!("bound-{}", kind.name());
        let mut stores = Vec::new();
        for _ in 0..3 {
            stores.push(synced(config(&server, &prefix), fixed()).await);
        }
        let limit = 100;
        let p = [shared_policy("p", kind, limit, HOUR)];

        // Worst case: no instance hears from the others before it is full. The bound is
        // reached exactly: limit + (N − 1) × limit = N × limit.
        let mut total = 0;
        for store in &stores {
            total += admit(store, &p, "burst", 2 * limit).await;
        }
        assert_eq!(total, 3 * limit);
        for store in &stores {
            store.sync_now().await.unwrap();
        }
        assert_eq!(redis_count(&server, &stores[0], &p[0], "burst"), 3 * limit);
        for store in &stores {
            store.sync_now().await.unwrap();
            assert_eq!(admit(store, &p, "burst", 1).await, 0, "merged: full");
        }

        // Rounds: each instance admits up to k, then all exchange in turn. What one
        // instance misses is what the two others admitted in one round: at most 2k.
        let k = 7;
        let mut total = 0;
        for _ in 0..40 {
            for store in &stores {
                total += admit(store, &p, "rounds", k).await;
            }
            for store in &stores {
                store.sync_now().await.unwrap();
            }
        }
        assert!(total >= limit, "never under the limit: {total}");
        assert!(total <= limit + 2 * k, "bound limit + (N-1)k: {total}");
        assert_eq!(redis_count(&server, &stores[0], &p[0], "rounds"), total);
        for store in &stores {
            let read = store
                .check(CheckRequest::new(&p, "rounds", 0))
                .await
                .unwrap();
            assert_eq!(read.decisions[0].decision.remaining, 0, "merged view");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_on_one_instance_never_exceed_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = Arc::new(synced(config(&server, "tasks"), fixed()).await);
    let p = [shared_policy("p", AlgorithmKind::FixedWindow, 500, HOUR)];
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, p) = (Arc::clone(&store), p.clone());
            tokio::spawn(async move { admit(&store, &p, "hot", 100).await })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 500, "one instance alone is exact");
    store.sync_now().await.unwrap();
    assert_eq!(redis_count(&server, &store, &p[0], "hot"), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_keeps_deciding_within_the_limit_then_merges() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let a = synced(config(&server, "outage"), fixed()).await;
    let b = synced(config(&server, "outage"), fixed()).await;
    let limit = 50;
    let p = [shared_policy("p", AlgorithmKind::FixedWindow, limit, HOUR)];
    assert_eq!(admit(&a, &p, "k", 10).await, 10);
    assert_eq!(admit(&b, &p, "k", 10).await, 10);
    a.sync_now().await.unwrap();
    b.sync_now().await.unwrap();
    // b's admissions reach a by its next exchange.
    a.check(CheckRequest::new(&p, "k", 0)).await.unwrap();
    a.sync_now().await.unwrap();

    server.kill();
    // Each instance goes on from what it knows (a: 20, b: 10 + its own 10) and stays
    // within the limit by itself: N × limit at most fleet-wide.
    let during_a = admit(&a, &p, "k", 100).await;
    let during_b = admit(&b, &p, "k", 100).await;
    assert_eq!(during_a, limit - 20);
    assert_eq!(during_b, limit - 20);
    // A key first seen during the outage starts from zero, still within the limit.
    assert_eq!(admit(&a, &p, "new", 100).await, limit);
    assert!(matches!(
        a.sync_now().await,
        Err(StoreError::Unavailable(_) | StoreError::Timeout)
    ));
    assert!(a.ping().await.is_err(), "/readyz reports the outage");

    // Redis comes back empty: what was admitted during the outage is added to it.
    server.restart();
    eventually("both instances exchange again", || async {
        a.sync_now().await.is_ok() && b.sync_now().await.is_ok()
    })
    .await;
    assert_eq!(
        redis_count(&server, &a, &p[0], "k"),
        during_a + during_b,
        "the outage's admissions merged"
    );
    assert_eq!(redis_count(&server, &a, &p[0], "new"), limit);
}

/// `MGET` commands redis-server has run since it started.
fn mget_calls(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_mget:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

// One thread: every request below queues its read before the dispatcher runs, so the
// count of `MGET`s is deterministic.
#[tokio::test]
async fn cold_keys_are_read_together_and_exchanged_in_one_call() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = synced(config(&server, "cold"), fixed()).await;
    let b = synced(config(&server, "cold"), fixed()).await;
    let limit = 1000;
    let p = [shared_policy("p", AlgorithmKind::FixedWindow, limit, HOUR)];
    let keys: Vec<String> = (0..300).map(|i| format!("cold-{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(admit(&a, &p, key, i as u64 % 7).await, i as u64 % 7);
    }
    a.sync_now().await.unwrap();

    // b has never seen these keys: each is read from Redis before it decides, the reads
    // of the 300 concurrent requests sharing one MGET, each answered with its own count.
    let before = mget_calls(&server);
    let checks = keys
        .iter()
        .map(|key| b.check(CheckRequest::new(&p, key, 1)));
    let verdicts = futures_util::future::join_all(checks).await;
    let mgets = mget_calls(&server) - before;
    assert!(
        mgets * 10 <= keys.len() as u64,
        "{mgets} MGETs for 300 cold keys"
    );
    for (i, verdict) in verdicts.into_iter().enumerate() {
        let remaining = verdict.unwrap().decisions[0].decision.remaining;
        assert_eq!(remaining, limit - i as u64 % 7 - 1, "{}", keys[i]);
    }

    // One exchange adds b's admission on every key and reads back the rest: Redis and
    // both instances agree on each count.
    for key in &keys[..100] {
        assert_eq!(admit(&b, &p, key, 1).await, 1);
    }
    b.sync_now().await.unwrap();
    a.sync_now().await.unwrap();
    for (i, key) in keys.iter().enumerate() {
        let expected = i as u64 % 7 + 1 + u64::from(i < 100);
        assert_eq!(redis_count(&server, &a, &p[0], key), expected, "{key}");
        for store in [&a, &b] {
            let read = store.check(CheckRequest::new(&p, key, 0)).await.unwrap();
            assert_eq!(
                read.decisions[0].decision.remaining,
                limit - expected,
                "{key}"
            );
        }
    }
}

/// The TTL in ms of `key`'s count of the current window in Redis (-2: no such key, -1: no
/// TTL).
fn redis_ttl(server: &RedisServer, store: &SyncedStore, policy: &Policy, key: &str) -> i64 {
    let name = format!(
        "{}:sync:{}:{}",
        store.redis().state_key(policy, key),
        policy.period(),
        START / policy.period()
    );
    server.cli(&["PTTL", &name]).trim().parse().unwrap()
}

// Two policies of different periods (so different TTLs, which one exchange call shares)
// on more windows than one call carries (200 keys × 3 windows > 512): every count reaches
// Redis with the TTL of its period, set when the count is created and kept by later
// additions, and set again on a count created anew after a reset. Every tenth key is
// checked (each check is a redis-cli process).
#[tokio::test]
async fn counts_of_several_periods_and_calls_carry_their_ttl() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = synced(config(&server, "ttl"), fixed()).await;
    let minute = shared_policy("m", AlgorithmKind::FixedWindow, 1000, MINUTE);
    let hour = shared_policy("h", AlgorithmKind::SlidingWindow, 1000, HOUR);
    let both = [Arc::clone(&minute), Arc::clone(&hour)];
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for round in 1..=2 {
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(
                admit(&a, &both, key, 1 + i as u64 % 3).await,
                1 + i as u64 % 3
            );
        }
        a.sync_now().await.unwrap();
        for (i, key) in keys.iter().enumerate().step_by(10) {
            let expected = round * (1 + i as u64 % 3);
            for (policy, period_ms) in [(&minute, 60_000), (&hour, 3_600_000)] {
                assert_eq!(redis_count(&server, &a, policy, key), expected, "{key}");
                let ttl = redis_ttl(&server, &a, policy, key);
                assert!(
                    ttl > 0 && ttl <= 2 * period_ms + 1000,
                    "{key}: TTL {ttl} ms under a period of {period_ms} ms"
                );
            }
        }
    }
    a.reset(&minute, "k0").await.unwrap();
    assert_eq!(redis_ttl(&server, &a, &minute, "k0"), -2);
    assert_eq!(admit(&a, &[Arc::clone(&minute)], "k0", 1).await, 1);
    a.sync_now().await.unwrap();
    assert_eq!(redis_count(&server, &a, &minute, "k0"), 1);
    let ttl = redis_ttl(&server, &a, &minute, "k0");
    assert!(ttl > 0 && ttl <= 121_000, "TTL {ttl} ms after a reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_master_cluster() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..3 {
        let mut config = RedisConfig::cluster(cluster.seeds());
        config.key_prefix = "sync".into();
        config.timeout = Duration::from_millis(500);
        stores.push(synced(config, fixed()).await);
    }
    assert_eq!(stores[0].kind(), "redis-cluster-sync");
    let p = [shared_policy("p", AlgorithmKind::SlidingWindow, 10, HOUR)];
    let keys: Vec<String> = (0..40).map(|i| format!("client-{i}")).collect();
    for key in &keys {
        assert_eq!(admit(&stores[0], &p, key, 3).await, 3);
        assert_eq!(admit(&stores[1], &p, key, 4).await, 4);
    }
    stores[0].sync_now().await.unwrap();
    stores[1].sync_now().await.unwrap();
    // A third instance reads every key's merged count from its slot.
    for key in &keys {
        let read = stores[2]
            .check(CheckRequest::new(&p, key, 0))
            .await
            .unwrap();
        assert_eq!(read.decisions[0].decision.remaining, 3, "{key}");
        assert_eq!(admit(&stores[2], &p, key, 5).await, 3, "{key}");
    }
}

#[tokio::test]
async fn refuses_what_it_cannot_count() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = synced(config(&server, "refuse"), fixed()).await;
    for kind in [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::SlidingLog,
    ] {
        let p = [shared_policy("p", kind, 10, MINUTE)];
        let error = store
            .check(CheckRequest::new(&p, "k", 1))
            .await
            .unwrap_err();
        assert!(
            matches!(error, StoreError::Unsupported(_)),
            "{kind}: {error}"
        );
    }
}

/// One instance with exchanges at arbitrary points decides exactly like the in-memory
/// store on the same clock.
fn steps() -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
    // (µs to advance, cost 0..=3, exchange before deciding)
    prop::collection::vec((0u64..40_000_000, 0u64..=3, any::<bool>()), 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn one_instance_decides_like_memory(steps in steps(), sliding in any::<bool>()) {
        let Some(server) = RedisServer::start() else {
            return Ok(());
        };
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(compare(&server, &steps, sliding));
    }
}

async fn compare(server: &RedisServer, steps: &[(u64, u64, bool)], sliding: bool) {
    let start = START;
    let clock = ManualClock::new(start);
    let store = synced(config(server, "diff"), Arc::new(clock.clone())).await;
    let memory = MemoryStore::with_clock(1000, clock.clone());
    let kind = if sliding {
        AlgorithmKind::SlidingWindow
    } else {
        AlgorithmKind::FixedWindow
    };
    // A minute's windows: the Redis keys' TTL (real time) outlives the test.
    let p = [shared_policy("p", kind, 5, MINUTE)];
    for &(advance, cost, exchange) in steps {
        clock.advance(Duration::from_micros(advance));
        if exchange {
            store.sync_now().await.unwrap();
        }
        let synced = store.check(CheckRequest::new(&p, "k", cost)).await.unwrap();
        let exact = memory
            .check(CheckRequest::new(&p, "k", cost))
            .await
            .unwrap();
        assert_eq!(synced.allowed, exact.allowed, "at {}", clock.now() - start);
        assert_eq!(synced.decisions[0].decision, exact.decisions[0].decision);
    }
}
