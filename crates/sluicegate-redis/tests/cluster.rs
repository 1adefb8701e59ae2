//! A 3-master Redis Cluster started by the test: exactness, multi-policy all-or-nothing,
//! batches across slots, and hostile client keys that must stay within their hash slot.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, KeyedCheck, Store};
use sluicegate_redis::{RedisConfig, RedisStore};
use sluicegate_testkit::{RedisCluster, redis, shared_policy, storm};

const DAY: Duration = Duration::from_secs(86_400);

async fn cluster_store(cluster: &RedisCluster) -> Arc<RedisStore> {
    let mut config = RedisConfig::cluster(cluster.seeds());
    config.key_prefix = "cl".into();
    config.timeout = Duration::from_millis(500);
    Arc::new(RedisStore::connect(config).await.unwrap())
}

fn hostile_keys() -> Vec<String> {
    vec![
        "plain".into(),
        "{".into(),
        "}".into(),
        "{}".into(),
        "a}{b".into(),
        "{user}:x".into(),
        "line\nbreak\r\n".into(),
        "nul\u{0}byte".into(),
        "colon:sep:arated".into(),
        "%7B".into(),
        "ünïcødé".into(),
        "x".repeat(1024),
        "{".repeat(1024),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_is_exact_atomic_and_keeps_keys_in_their_slot() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(cluster_store(&cluster).await);
    }
    assert_eq!(stores[0].kind(), "redis-cluster");
    stores[0].ping().await.unwrap();

    // Exactness: 4 instances × 64 tasks admit exactly the limit.
    let p = [shared_policy("p", AlgorithmKind::Gcra, 100, DAY)];
    assert_eq!(storm(&stores, &p, "hot", 64, 3).await, 100);

    // Multi-policy, all-or-nothing, in one slot.
    let multi = [
        shared_policy("burst", AlgorithmKind::TokenBucket, 80, DAY),
        shared_policy("window", AlgorithmKind::FixedWindow, 50, DAY),
    ];
    assert_eq!(storm(&stores, &multi, "hot-multi", 64, 2).await, 50);
    let read = stores[0]
        .check(CheckRequest::new(&multi[..1], "hot-multi", 0))
        .await
        .unwrap();
    assert_eq!(
        read.decisions[0].decision.remaining, 30,
        "denials consumed nothing"
    );

    // Hostile keys: every policy key of one client in one slot (or the multi-policy
    // script would fail with CROSSSLOT), distinct clients independent.
    let strict = [
        shared_policy("a", AlgorithmKind::FixedWindow, 1, DAY),
        shared_policy("b", AlgorithmKind::SlidingLog, 1, DAY),
    ];
    let mut seen = HashSet::new();
    for key in hostile_keys() {
        let first = stores[0]
            .check(CheckRequest::new(&strict, &key, 1))
            .await
            .unwrap();
        assert!(first.allowed, "{key:?} collided with another client");
        let second = stores[1]
            .check(CheckRequest::new(&strict, &key, 1))
            .await
            .unwrap();
        assert!(!second.allowed, "{key:?}");
        let slots: HashSet<String> = strict
            .iter()
            .map(|p| {
                let redis_key = stores[0].state_key(p, &key);
                assert!(seen.insert(redis_key.clone()));
                redis::cli(cluster.nodes[0].port, &["cluster", "keyslot", &redis_key])
            })
            .collect();
        assert_eq!(slots.len(), 1, "{key:?} spans slots {slots:?}");
    }

    // A batch spanning many slots is split per slot and still answered in order.
    let batch_keys: Vec<String> = (0..300).map(|i| format!("batch-{i}")).collect();
    let one = [shared_policy("one", AlgorithmKind::FixedWindow, 1, DAY)];
    let requests: Vec<CheckRequest<'_>> = batch_keys
        .iter()
        .chain(batch_keys.iter().take(10))
        .map(|k| CheckRequest::new(&one, k, 1))
        .collect();
    let verdicts = stores[2].check_batch(&requests).await;
    assert_eq!(verdicts.len(), 310);
    for (i, v) in verdicts.iter().enumerate() {
        assert_eq!(v.as_ref().unwrap().allowed, i < 300, "request {i}");
    }

    // Keyed checks across slots cannot be atomic on a cluster: refused, not half-done.
    let items = [
        KeyedCheck::new(&one[0], "batch-1", 1),
        KeyedCheck::new(&p[0], "batch-2", 1),
    ];
    assert!(stores[0].check_keyed(&items).await.is_err());
}
