//! The concurrency policy on Redis (`concurrency.lua`, leases in a sorted set):
//! - differential: random acquires, releases (own, repeated, stale), refunds, resets and
//!   reads at test-driven times get identical verdicts (lease expiries included) from Redis
//!   and from the core's in-memory store, alone and mixed with rate policies in one request;
//! - two stores sharing one Redis (and a 3-master cluster) hammered at once never have more
//!   than `limit` leases out, and a lease taken through one is freed through the other;
//! - every key written has a TTL.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::{
    AlgorithmKind, CheckRequest, Clock, Lease, ManualClock, MemoryStore, Mode, Policy, Store,
};
use sluicegate_redis::{RedisConfig, RedisStore};
use sluicegate_testkit::{RedisCluster, RedisServer, redis};

const START: u64 = 1_764_000_000_123_457;

fn concurrency(name: &str, limit: u64, lease: Duration, mode: Mode) -> Arc<Policy> {
    Arc::new(
        Policy::builder(name, AlgorithmKind::Concurrency, limit, lease)
            .mode(mode)
            .build()
            .unwrap(),
    )
}

async fn differential(redis: &RedisStore, seed: u64, policies: Vec<Arc<Policy>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = ManualClock::new(START + rng.random_range(0..86_400_000_000));
    let memory = MemoryStore::with_clock(1_000, clock.clone());
    let keys = [format!("c-{seed}"), format!("d-{seed}")];
    let lease = policies[0].period();
    let capacity = policies.iter().map(|p| p.capacity()).min().unwrap();
    let mut held: Vec<Lease> = Vec::new();
    let mut released: Vec<Lease> = Vec::new();
    for step in 0..200 {
        let advance = match rng.random_range(0..6) {
            0..=2 => 0,
            3 | 4 => rng.random_range(1..=lease / 4 + 1),
            _ => rng.random_range(lease / 2..=lease * 2),
        };
        clock.advance(Duration::from_micros(advance));
        let now = clock.now();
        let key = &keys[usize::from(rng.random_bool(0.2))];
        let cost = match rng.random_range(0..8) {
            0 => 0,
            1 => capacity,
            2 => rng.random_range(0..=capacity),
            _ => 1,
        };
        let n = rng.random_range(1..=policies.len());
        let chosen = &policies[..n];
        let context = format!("seed {seed} step {step} now {now} key {key} cost {cost}");
        match rng.random_range(0..20) {
            0 => {
                memory.reset(&chosen[0], key).await.unwrap();
                redis.reset(&chosen[0], key).await.unwrap();
            }
            1 => {
                memory.refund(chosen, key, cost).await.unwrap();
                redis.refund_at(chosen, key, cost, now).await.unwrap();
            }
            2..=6 if !held.is_empty() => {
                let lease = held.remove(rng.random_range(0..held.len()));
                memory.release(std::slice::from_ref(&lease)).await.unwrap();
                redis.release(std::slice::from_ref(&lease)).await.unwrap();
                released.push(lease);
            }
            7 if !released.is_empty() => {
                // A stale or repeated release: must free nothing, in both.
                let lease = released[rng.random_range(0..released.len())].clone();
                memory.release(std::slice::from_ref(&lease)).await.unwrap();
                redis.release(std::slice::from_ref(&lease)).await.unwrap();
            }
            _ => {
                let request = CheckRequest::new(chosen, key, cost);
                let expected = memory.check(request).await.unwrap();
                let got = redis.check_at(request, now).await.unwrap();
                assert_eq!(got, expected, "{context}");
                held.extend(got.leases(key, cost));
            }
        }
    }
}

#[tokio::test]
async fn leases_decide_like_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "lease-diff").await;
    for seed in 0..16u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let lease = match seed % 3 {
            0 => Duration::from_micros(rng.random_range(1..=5_000)),
            1 => Duration::from_millis(rng.random_range(1..=2_000)),
            _ => Duration::from_secs(60),
        };
        let mode = if seed % 5 == 4 {
            Mode::Shadow
        } else {
            Mode::Reject
        };
        let mut policies = vec![concurrency("c", rng.random_range(1..=6), lease, mode)];
        if seed % 2 == 1 {
            // Decided atomically with rate policies in the same script call.
            policies.push(Arc::new(sluicegate_testkit::policy(
                "w",
                AlgorithmKind::SlidingLog,
                rng.random_range(2..=8),
                lease * 2,
            )));
            policies.push(Arc::new(sluicegate_testkit::policy(
                "t",
                AlgorithmKind::TokenBucket,
                rng.random_range(2..=8),
                lease,
            )));
        }
        differential(&redis, seed, policies).await;
    }
    // Every key written has a TTL.
    for key in redis::keys(server.port, "lease-diff:*") {
        let ttl: i64 = server.cli(&["PTTL", &key]).trim().parse().unwrap();
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}

/// Two stores on one deployment (two gateways): `THREADS` tasks each acquire, hold for a
/// moment and release, through alternating stores; the number of holders at any instant,
/// counted on our side, never exceeds the limit.
async fn no_over_admission(a: RedisStore, b: RedisStore) {
    const LIMIT: u64 = 4;
    let policies = [concurrency(
        "c",
        LIMIT,
        Duration::from_secs(60),
        Mode::Reject,
    )];
    let stores = [Arc::new(a), Arc::new(b)];
    let in_flight = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..12usize {
        let (store, other) = (Arc::clone(&stores[t % 2]), Arc::clone(&stores[(t + 1) % 2]));
        let (policies, in_flight, peak, admitted) = (
            policies.clone(),
            Arc::clone(&in_flight),
            Arc::clone(&peak),
            Arc::clone(&admitted),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..60 {
                let v = store
                    .check(CheckRequest::new(&policies, "shared", 1))
                    .await
                    .unwrap();
                if v.allowed {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    admitted.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    // Freed through the other instance.
                    other.release(&v.leases("shared", 1)).await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= LIMIT, "over-admitted");
    assert!(
        admitted.load(Ordering::SeqCst) > LIMIT,
        "releases freed nothing"
    );
    let read = stores[0]
        .check(CheckRequest::new(&policies, "shared", 0))
        .await
        .unwrap();
    assert_eq!(
        read.decisions[0].decision.remaining, LIMIT,
        "a lease leaked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = redis::store(&server.url(), "lease-two").await;
    let b = redis::store(&server.url(), "lease-two").await;
    no_over_admission(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_a_cluster() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let connect = || async {
        let mut config = RedisConfig::cluster(cluster.seeds());
        config.key_prefix = "lease-cluster".to_owned();
        config.timeout = Duration::from_secs(2);
        RedisStore::connect(config).await.unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    no_over_admission(a, b).await;
}
