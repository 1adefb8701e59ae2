//! Two server processes sharing one redis-server admit exactly `limit` together.

use reqwest::Client;
use serde_json::{Value, json};
use sluicegate_testkit::{RedisServer, Sluicegate, free_port, sluicegate_bin, write};

#[tokio::test]
async fn two_servers_on_one_redis_admit_exactly_the_limit() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let port = redis.port;

    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[store]
backend = "redis"
url = "redis://127.0.0.1:{port}/0"
key_prefix = "sgtest"
timeout = "2s"

[[policies]]
name = "window"
algorithm = "fixed_window"
limit = 40
period = "1h"

[[policies]]
name = "cells"
algorithm = "gcra"
limit = 25
period = "1h"
on_store_error = "deny"
"#
    );
    let path = write(dir.path(), "redis.toml", &config);
    let a = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    let b = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    assert!(
        a.banner.contains("store: redis redis://127.0.0.1"),
        "{}",
        a.banner
    );

    let client = Client::new();
    let ready: Value = client
        .get(a.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "ready");

    for (policy, limit) in [("window", 40u64), ("cells", 25)] {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..120 {
            let url = if i % 2 == 0 {
                a.url("/v1/check")
            } else {
                b.url("/v1/check")
            };
            let client = client.clone();
            tasks.spawn(async move {
                let r = client
                    .post(url)
                    .json(&json!({"policy": policy, "key": "shared-client"}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                r.json::<Value>().await.unwrap()["allowed"] == true
            });
        }
        let mut admitted = 0;
        while let Some(allowed) = tasks.join_next().await {
            admitted += u64::from(allowed.unwrap());
        }
        assert_eq!(admitted, limit, "policy {policy}");
        // Both servers see the shared state.
        for server in [&a, &b] {
            let peek: Value = client
                .get(server.url(&format!("/v1/limits/{policy}/shared-client")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(peek["remaining"], 0, "{policy}: {peek}");
        }
    }
}

#[tokio::test]
async fn a_redis_that_is_down_follows_on_store_error() {
    // No redis-server needed: nothing listens on this port.
    let dead = format!("redis://127.0.0.1:{}/0", free_port());
    let dir = tempfile::tempdir().unwrap();
    let config = r#"
[[policies]]
name = "open"
algorithm = "token_bucket"
limit = 5
period = "1m"

[[policies]]
name = "closed"
algorithm = "token_bucket"
limit = 5
period = "1m"
on_store_error = "deny"
"#;
    let path = write(dir.path(), "down.toml", config);
    // `--redis` overrides the file's (default, in-memory) store.
    let server = Sluicegate::start(
        sluicegate_bin!(),
        &["--config", path.to_str().unwrap(), "--redis", &dead],
    );
    assert!(server.banner.contains("store: redis"), "{}", server.banner);
    let client = Client::new();
    let r = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "store_unavailable"
    );
    let decide = |policy: &'static str| {
        let client = client.clone();
        let url = server.url("/v1/check");
        async move {
            let r = client
                .post(url)
                .json(&json!({"policy": policy, "key": "k"}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    assert_eq!(decide("open").await["allowed"], true);
    let closed = decide("closed").await;
    assert_eq!(closed["allowed"], false);
    assert_eq!(closed["retry_after_ms"], 1000);
    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"sluicegate_decisions_total{policy="closed",outcome="store_error"} 1"#),
        "{metrics}"
    );
}
