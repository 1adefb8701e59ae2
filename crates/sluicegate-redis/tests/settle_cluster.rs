//! Reserve then settle, and leases, on a 3-master Redis Cluster with two stores (two
//! gateways) on it:
//! - reservations taken through one store and settled through the other, for client keys
//!   in many hash slots (hash tags and braces included), decide exactly as the core's
//!   in-memory store does; a replay through either store is refused (`Replayed`: the
//!   one-time marker lives in the key's slot, shared by both), an expired one too;
//! - the same on the production path (the Redis server's clock);
//! - leases of many keys in different slots, taken through one store and released through
//!   the other, together with a rate policy in the same request: never more than `limit`
//!   holders of a key at once, and none leaked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluicegate_core::{
    AlgorithmKind, CheckRequest, Clock, ManualClock, MemoryStore, Policy, Settled, Settlement,
    Store, Verdict,
};
use sluicegate_redis::{RedisConfig, RedisStore};
use sluicegate_testkit::RedisCluster;

const START: u64 = 1_764_000_000_123_457;

/// Client keys that land in different hash slots, some with braces (hash tags).
const KEYS: [&str; 8] = [
    "alice",
    "bob",
    "{user}:x",
    "{",
    "a}{b",
    "ünïcødé",
    "tenant:42",
    "{}",
];

async fn store(cluster: &RedisCluster, prefix: &str) -> RedisStore {
    let mut config = RedisConfig::cluster(cluster.seeds());
    config.key_prefix = prefix.to_owned();
    config.timeout = Duration::from_secs(2);
    RedisStore::connect(config).await.unwrap()
}

fn policy(name: &str, kind: AlgorithmKind, limit: u64, period: Duration) -> Arc<Policy> {
    Arc::new(Policy::builder(name, kind, limit, period).build().unwrap())
}

/// What a reservation carries: the policies the verdict consumed from and their
/// `remaining`, the estimate and the admission time.
fn consumed(verdict: &Verdict) -> (Vec<Arc<Policy>>, Vec<u64>) {
    verdict
        .decisions
        .iter()
        .enumerate()
        .filter(|(i, d)| verdict.consumes(*i) && d.policy.algorithm() != AlgorithmKind::Concurrency)
        .map(|(_, d)| (Arc::clone(&d.policy), d.decision.remaining))
        .unzip()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_settle_on_the_other_instance_across_slots_like_the_core() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let (a, b) = (
        store(&cluster, "settle-cl").await,
        store(&cluster, "settle-cl").await,
    );
    let minute = Duration::from_secs(60);
    let sets = [
        vec![
            policy("tb", AlgorithmKind::TokenBucket, 10, minute),
            policy("fw", AlgorithmKind::FixedWindow, 20, minute),
        ],
        vec![policy("gcra", AlgorithmKind::Gcra, 6, minute)],
        vec![
            policy("sl", AlgorithmKind::SlidingLog, 8, minute),
            policy("sw", AlgorithmKind::SlidingWindow, 12, minute),
            policy("lb", AlgorithmKind::LeakyBucket, 9, minute),
        ],
    ];
    let clock = ManualClock::new(START);
    let memory = MemoryStore::with_clock(10_000, clock.clone());
    let mut settled = 0;
    for (k, key) in KEYS.iter().enumerate() {
        for (s, policies) in sets.iter().enumerate() {
            for step in 0..12u64 {
                clock.advance(Duration::from_millis(700 + 300 * step));
                let now = clock.now();
                let context = format!("key {key:?} set {s} step {step}");
                let estimate = 1 + (step % 3);
                let request = CheckRequest::new(policies, key, estimate);
                let expected = memory.check(request).await.unwrap();
                let verdict = a.check_at(request, now).await.unwrap();
                assert_eq!(verdict, expected, "{context}");
                let (taken, remaining) = consumed(&verdict);
                if taken.is_empty() {
                    continue;
                }
                // The real cost: less, more, or nothing at all.
                let real = [0, estimate + 4, 1, estimate][(step as usize + k) % 4];
                clock.advance(Duration::from_millis(250));
                let later = clock.now();
                let id = format!("r-{k}-{s}-{step}");
                let reservation = Settlement {
                    policies: &taken,
                    remaining: &remaining,
                    key,
                    estimate,
                    real,
                    admitted_at: verdict.at,
                    expires_at: later + 60_000_000,
                    id: &id,
                };
                // Settled through the other instance; replayed through either, refused.
                assert_eq!(
                    memory.settle(reservation).await,
                    Ok(Settled::Done),
                    "{context}"
                );
                assert_eq!(
                    b.settle_at(reservation, later).await,
                    Ok(Settled::Done),
                    "{context}"
                );
                for store in [&a, &b] {
                    let again = store.settle_at(reservation, later).await;
                    assert_eq!(again, Ok(Settled::Replayed), "{context}");
                }
                settled += 1;
                // Both stores now hold the settled state: a read agrees.
                let read = CheckRequest::new(policies, key, 0);
                let expected = memory.check(read).await.unwrap();
                assert_eq!(
                    a.check_at(read, later).await.unwrap(),
                    expected,
                    "{context}"
                );
            }
        }
    }
    assert!(settled > 100, "only {settled} settles");

    // A reservation past its expiry is refused by both instances, and changes nothing.
    let policies = &sets[0];
    let now = clock.now();
    let verdict = a
        .check_at(CheckRequest::new(policies, "late", 1), now)
        .await
        .unwrap();
    let (taken, remaining) = consumed(&verdict);
    let expired = Settlement {
        policies: &taken,
        remaining: &remaining,
        key: "late",
        estimate: 1,
        real: 0,
        admitted_at: verdict.at,
        expires_at: now + 1_000,
        id: "late-1",
    };
    for store in [&a, &b] {
        assert_eq!(
            store.settle_at(expired, now + 1_001).await,
            Ok(Settled::Expired)
        );
    }
    let read = a
        .check_at(CheckRequest::new(policies, "late", 0), now + 1_001)
        .await
        .unwrap();
    assert_eq!(
        read.decisions[0].decision.remaining, 9,
        "the expired settle refunded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_settles_once_across_instances_on_the_servers_clock() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let (a, b) = (
        store(&cluster, "settle-prod").await,
        store(&cluster, "settle-prod").await,
    );
    let hour = Duration::from_secs(3_600);
    let policies = vec![
        policy("tokens", AlgorithmKind::TokenBucket, 1_000, hour),
        policy("daily", AlgorithmKind::FixedWindow, 5_000, hour * 24),
    ];
    for key in KEYS {
        let v = a
            .check(CheckRequest::new(&policies, key, 400))
            .await
            .unwrap();
        assert!(v.allowed && v.at != 0, "{key}");
        let remaining: Vec<u64> = v.decisions.iter().map(|d| d.decision.remaining).collect();
        assert_eq!(remaining, [600, 4_600], "{key}");
        let id = format!("prod-{key}");
        let reservation = Settlement {
            policies: &policies,
            remaining: &remaining,
            key,
            estimate: 400,
            real: 150,
            admitted_at: v.at,
            expires_at: v.at + 600_000_000,
            id: &id,
        };
        assert_eq!(b.settle(reservation).await, Ok(Settled::Done), "{key}");
        assert_eq!(a.settle(reservation).await, Ok(Settled::Replayed), "{key}");
        // 250 came back in both policies, whichever instance reads.
        let read = b.check(CheckRequest::new(&policies, key, 0)).await.unwrap();
        let now: Vec<u64> = read
            .decisions
            .iter()
            .map(|d| d.decision.remaining)
            .collect();
        assert!(now[0] >= 850, "{key}: {now:?}");
        assert_eq!(now[1], 4_850, "{key}: {now:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_many_slots_never_over_admit_across_instances() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    const LIMIT: u64 = 3;
    let stores = [
        Arc::new(store(&cluster, "lease-slots").await),
        Arc::new(store(&cluster, "lease-slots").await),
    ];
    // A concurrency policy and a generous rate policy, decided in one script per request.
    let policies = vec![
        policy(
            "c",
            AlgorithmKind::Concurrency,
            LIMIT,
            Duration::from_secs(60),
        ),
        policy(
            "rate",
            AlgorithmKind::TokenBucket,
            1_000_000,
            Duration::from_secs(1),
        ),
    ];
    let counters: Arc<Vec<(AtomicU64, AtomicU64)>> = Arc::new(
        KEYS.iter()
            .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
            .collect(),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (store, other) = (Arc::clone(&stores[t % 2]), Arc::clone(&stores[(t + 1) % 2]));
        let (policies, counters, admitted) = (
            policies.clone(),
            Arc::clone(&counters),
            Arc::clone(&admitted),
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..40usize {
                let k = (t + i) % KEYS.len();
                let key = KEYS[k];
                let v = store
                    .check(CheckRequest::new(&policies, key, 1))
                    .await
                    .unwrap();
                if !v.allowed {
                    continue;
                }
                let (in_flight, peak) = &counters[k];
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                admitted.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                let leases = v.leases(key, 1);
                assert_eq!(leases.len(), 1, "one lease: the concurrency policy's");
                other.release(&leases).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for (k, key) in KEYS.iter().enumerate() {
        let peak = counters[k].1.load(Ordering::SeqCst);
        assert!(peak <= LIMIT, "{key}: {peak} held at once, over {LIMIT}");
        let read = stores[k % 2]
            .check(CheckRequest::new(&policies, key, 0))
            .await
            .unwrap();
        assert_eq!(
            read.decisions[0].decision.remaining, LIMIT,
            "{key}: a lease leaked"
        );
    }
    assert!(
        admitted.load(Ordering::SeqCst) > LIMIT * KEYS.len() as u64,
        "releases freed nothing"
    );
}
