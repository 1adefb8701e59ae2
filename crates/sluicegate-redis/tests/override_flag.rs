//! The override flag (`<prefix>!overrides`, src/overrides.rs): a standalone store skips
//! reading per-key overrides while the flag says none exists, so the flag must never say so
//! while one does: an override set through any instance after the flag was settled, and one
//! written before (by an earlier version, which knew no flag), both apply, to single
//! decisions and to batches (the script's fast path).

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, Override, Policy, Store};
use sluicegate_redis::RedisStore;
use sluicegate_testkit::{RedisServer, redis, shared_policy};

fn policy() -> Arc<Policy> {
    shared_policy("p", AlgorithmKind::TokenBucket, 5, Duration::from_secs(60))
}

/// The flag's value once the store has settled it (polls; the store does it in the
/// background after connecting).
async fn settled_flag(server: &RedisServer, prefix: &str) -> String {
    let key = format!("{prefix}!overrides");
    for _ in 0..1500 {
        let value = server.cli(&["GET", &key]).trim().to_owned();
        if !value.is_empty() {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the store never settled {key}");
}

/// The limit `store` applies to `key`, by a single check and within a batch of other keys.
async fn limits(store: &RedisStore, p: &[Arc<Policy>], key: &str) -> (u64, u64) {
    let single = store.check(CheckRequest::new(p, key, 1)).await.unwrap();
    let others: Vec<String> = (0..8).map(|i| format!("other-{i}")).collect();
    let mut batch: Vec<CheckRequest<'_>> =
        others.iter().map(|k| CheckRequest::new(p, k, 1)).collect();
    batch.insert(3, CheckRequest::new(p, key, 1));
    let verdicts = store.check_batch(&batch).await;
    let batched = verdicts[3].as_ref().unwrap();
    (
        single.decisions[0].decision.limit,
        batched.decisions[0].decision.limit,
    )
}

const RAISED: Override = Override {
    limit: 100,
    burst: None,
    period: None,
};

#[tokio::test]
async fn overrides_set_after_the_flag_is_settled_apply_on_every_instance() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = redis::store(&server.url(), "flag").await;
    let b = redis::store(&server.url(), "flag").await;
    // A fresh database: no override anywhere, so the scripts skip reading them.
    assert_eq!(settled_flag(&server, "flag").await, "0");
    let p = [policy()];
    assert_eq!(limits(&a, &p, "k").await, (5, 5));
    // Set through one instance, seen by both, single and batched.
    b.set_override(&p[0], "k", Some(RAISED)).await.unwrap();
    assert_eq!(limits(&a, &p, "k").await, (100, 100));
    assert_eq!(limits(&b, &p, "k").await, (100, 100));
    assert_eq!(limits(&a, &p, "other").await, (5, 5));
    assert_eq!(settled_flag(&server, "flag").await, "1");
    // Removed: the flag stays "1" (others might remain), the key is back to the policy.
    a.set_override(&p[0], "k", None).await.unwrap();
    assert_eq!(limits(&a, &p, "k").await, (5, 5));
    assert_eq!(settled_flag(&server, "flag").await, "1");
}

#[tokio::test]
async fn overrides_written_before_the_flag_existed_are_found() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let p = [policy()];
    // As a store of an earlier version left it: the override key, no flag.
    let key = sluicegate_redis::override_key("old", "k", &p[0]);
    server.cli(&["SET", &key, "100 0 0"]);
    let store = redis::store(&server.url(), "old").await;
    let flag = settled_flag(&server, "old").await;
    assert_eq!(limits(&store, &p, "k").await, (100, 100));
    assert_eq!(flag, "1");

    // A flushed database loses the flag: without one the overrides are read again.
    server.cli(&["FLUSHDB"]);
    server.cli(&["SET", &key, "50 0 0"]);
    assert_eq!(limits(&store, &p, "k").await, (50, 50));
}
