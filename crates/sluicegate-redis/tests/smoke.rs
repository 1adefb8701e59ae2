//! Basic decisions, reset, refund, ping and the configuration errors, against a real
//! redis-server.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, Store, StoreError};
use sluicegate_redis::{RedisConfig, RedisStore, RedisStoreError};
use sluicegate_testkit::redis::store;
use sluicegate_testkit::{RedisServer, free_port, shared_policy};

#[tokio::test]
async fn decides_resets_and_pings_for_every_algorithm() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server.url(), "smoke").await;
    store.ping().await.unwrap();
    assert_eq!(store.kind(), "redis");
    for kind in AlgorithmKind::ALL {
        let p = [shared_policy("p", kind, 3, Duration::from_secs(60))];
        let req = CheckRequest::new(&p, "client-1", 1);
        for left in (0..3).rev() {
            let v = store.check(req).await.unwrap();
            assert!(v.allowed, "{kind}");
            assert_eq!(v.decisions[0].decision.remaining, left, "{kind}");
        }
        let denied = store.check(req).await.unwrap();
        assert!(!denied.allowed, "{kind}");
        assert!(denied.decisions[0].decision.retry_after.unwrap() > 0);
        store.reset(&p[0], "client-1").await.unwrap();
        assert!(
            store.check(req).await.unwrap().allowed,
            "{kind} after reset"
        );
        store.refund(&p, "client-1", 1).await.unwrap();
        let read = store
            .check(CheckRequest::new(&p, "client-1", 0))
            .await
            .unwrap();
        assert_eq!(
            read.decisions[0].decision.remaining, 3,
            "{kind} after refund"
        );
    }
}

#[tokio::test]
async fn bad_requests_fail_before_any_round_trip() {
    // No server at all: request errors must still be request errors.
    let mut config = RedisConfig::standalone(format!("redis://127.0.0.1:{}", free_port()));
    config.timeout = Duration::from_millis(50);
    let store = RedisStore::connect(config).await.unwrap();
    let p = [shared_policy(
        "p",
        AlgorithmKind::TokenBucket,
        3,
        Duration::from_secs(1),
    )];
    let over = store
        .check(CheckRequest::new(&p, "k", 4))
        .await
        .unwrap_err();
    assert!(over.is_bad_request(), "{over}");
    let long = "k".repeat(1025);
    let bad_key = store
        .check(CheckRequest::new(&p, &long, 1))
        .await
        .unwrap_err();
    assert!(matches!(bad_key, StoreError::InvalidKey(1025)));
    let down = store
        .check(CheckRequest::new(&p, "k", 1))
        .await
        .unwrap_err();
    assert!(
        !down.is_bad_request(),
        "Redis down is a store error: {down}"
    );
    assert!(store.ping().await.is_err());
}

#[tokio::test]
async fn invalid_configuration_is_refused() {
    let err = RedisStore::connect(RedisConfig::standalone("http://nope"))
        .await
        .unwrap_err();
    assert!(matches!(err, RedisStoreError::InvalidUrl { .. }), "{err}");
    let mut config = RedisConfig::standalone("redis://127.0.0.1:1");
    config.key_prefix = "a{b".into();
    assert!(RedisStore::connect(config).await.is_err());
}

#[tokio::test]
async fn auth_in_the_url() {
    let Some(server) = RedisServer::start_with(&["--requirepass", "s3cret"]) else {
        return;
    };
    let p = [shared_policy(
        "p",
        AlgorithmKind::Gcra,
        2,
        Duration::from_secs(60),
    )];
    let good = store(
        &format!("redis://:s3cret@127.0.0.1:{}/0", server.port),
        "auth",
    )
    .await;
    assert!(
        good.check(CheckRequest::new(&p, "k", 1))
            .await
            .unwrap()
            .allowed
    );
    let bad = store(
        &format!("redis://:wrong@127.0.0.1:{}/0", server.port),
        "auth",
    )
    .await;
    assert!(bad.check(CheckRequest::new(&p, "k", 1)).await.is_err());
    let _ = Arc::new(good);
}

#[tokio::test]
async fn a_flushed_script_is_loaded_again() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server.url(), "noscript").await;
    let p = [shared_policy(
        "p",
        AlgorithmKind::TokenBucket,
        5,
        Duration::from_secs(60),
    )];
    let request = CheckRequest::new(&p, "k", 1);
    assert!(store.check(request).await.unwrap().allowed);
    assert_eq!(server.cli(&["script", "flush"]).trim(), "OK");
    // EVALSHA now answers NOSCRIPT; the store loads the script and retries.
    let verdict = store.check(request).await.unwrap();
    assert_eq!(verdict.decisions[0].decision.remaining, 3);
}
