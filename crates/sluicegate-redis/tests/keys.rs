//! Hostile client keys on a standalone server: each gets its own state (no collision), and
//! each maps to one hash tag (checked by the Redis server's own CLUSTER KEYSLOT in the
//! cluster test).

use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, Store};
use sluicegate_testkit::redis::keys;
use sluicegate_testkit::{RedisServer, redis, shared_policy};

#[tokio::test]
async fn hostile_keys_get_distinct_state() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = redis::store(&server.url(), "keys").await;
    let p = [shared_policy(
        "one",
        AlgorithmKind::FixedWindow,
        1,
        Duration::from_secs(3600),
    )];
    let clients = [
        "a".to_owned(),
        "a}".into(),
        "{a".into(),
        "{a}".into(),
        "a:b".into(),
        "a%3Ab".into(),
        "a\nb".into(),
        "a\r\nb".into(),
        "a\u{0}".into(),
        "a b".into(),
        "é".into(),
        "x".repeat(1024),
        "x".repeat(1023) + "y",
    ];
    for client in &clients {
        assert!(
            store
                .check(CheckRequest::new(&p, client, 1))
                .await
                .unwrap()
                .allowed,
            "{client:?}"
        );
    }
    for client in &clients {
        assert!(
            !store
                .check(CheckRequest::new(&p, client, 1))
                .await
                .unwrap()
                .allowed,
            "{client:?}"
        );
    }
    let stored = keys(server.port, "keys:*");
    assert_eq!(stored.len(), clients.len(), "{stored:?}");
    for key in stored {
        assert_eq!(key.matches('{').count(), 1, "{key}");
        assert_eq!(key.matches('}').count(), 1, "{key}");
        assert!(!key.contains('\n'));
    }
}
