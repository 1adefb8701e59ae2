//! `[store] sync` through the binary: two servers on one redis-server decide locally,
//! `GET /v1/limits` shows the merged count once they have exchanged, racing on one key they
//! admit at least the limit and at most the documented bound; and what `sync` cannot do is
//! refused by `validate` with the field's line and column.

use std::process::Command;

use reqwest::Client;
use serde_json::{Value, json};
use sluicegate_testkit::{RedisServer, Sluicegate, eventually, sluicegate_bin, write};

const LIMIT: u64 = 40;

async fn check(client: &Client, server: &Sluicegate, key: &str) -> bool {
    let r = client
        .post(server.url("/v1/check"))
        .json(&json!({"policy": "window", "key": key}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["allowed"] == true
}

async fn remaining(client: &Client, server: &Sluicegate, key: &str) -> u64 {
    let peek: Value = client
        .get(server.url(&format!("/v1/limits/window/{key}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    peek["remaining"].as_u64().unwrap()
}

#[tokio::test]
async fn two_servers_exchange_counts_and_stay_within_the_bound() {
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
key_prefix = "synctest"
timeout = "2s"
sync = "20ms"

[[policies]]
name = "window"
algorithm = "fixed_window"
limit = {LIMIT}
period = "1d"
"#
    );
    let path = write(dir.path(), "sync.toml", &config);
    let a = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    let b = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    assert!(
        a.banner.contains("local-first, sync every 20ms"),
        "{}",
        a.banner
    );
    let client = Client::new();

    // Under the limit nothing races: each server sees the other's admissions after an
    // exchange (the merged view).
    for _ in 0..10 {
        assert!(check(&client, &a, "calm").await);
    }
    for _ in 0..5 {
        assert!(check(&client, &b, "calm").await);
    }
    for server in [&a, &b] {
        eventually("the merged count is visible on both servers", || async {
            remaining(&client, server, "calm").await == LIMIT - 15
        })
        .await;
    }

    // Exchanges are counted; decisions are timed under the store's name.
    let metrics = client
        .get(a.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("sluicegate_store_sync_total{result=\"ok\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("store=\"redis-sync\""), "{metrics}");

    // Racing: 240 requests at once, half on each. At least the limit (no under-admission)
    // and at most N × limit = 80 (each server within the limit by itself).
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..240 {
        let url = if i % 2 == 0 {
            a.url("/v1/check")
        } else {
            b.url("/v1/check")
        };
        let client = client.clone();
        tasks.spawn(async move {
            let r = client
                .post(url)
                .json(&json!({"policy": "window", "key": "race"}))
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()["allowed"] == true
        });
    }
    let mut admitted = 0;
    while let Some(allowed) = tasks.join_next().await {
        admitted += u64::from(allowed.unwrap());
    }
    assert!(
        (LIMIT..=2 * LIMIT).contains(&admitted),
        "admitted {admitted}"
    );
    for server in [&a, &b] {
        eventually("both servers see the key full", || async {
            remaining(&client, server, "race").await == 0
        })
        .await;
        assert!(!check(&client, server, "race").await);
    }
}

/// With an exchange only once a minute, what a server admitted reaches Redis at shutdown.
#[tokio::test]
async fn shutdown_sends_what_was_not_exchanged_yet() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let port = redis.port;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}/0\"\nsync = \"1m\"\n\n[[policies]]\nname = \"window\"\nalgorithm = \"fixed_window\"\nlimit = {LIMIT}\nperiod = \"1d\"\n"
    );
    let path = write(dir.path(), "flush.toml", &config);
    let client = Client::new();
    let a = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    for _ in 0..5 {
        assert!(check(&client, &a, "flush").await);
    }
    assert!(a.terminate().success());
    let b = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    assert_eq!(remaining(&client, &b, "flush").await, LIMIT - 5);
}

#[test]
fn what_sync_cannot_do_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[store]\nsync = \"100ms\"\n",
            "2:8: error: sync is for backend = \"redis\"",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:1/0\"\nsync = \"1ms\"\n",
            "4:8: error: sync must be between 10ms and 1m",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:1/0\"\nsync = \"100ms\"\n\n[[policies]]\nname = \"b\"\nalgorithm = \"token_bucket\"\nlimit = 5\nperiod = \"1m\"\n",
            "error: policy \"b\": store.sync exchanges window counts",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:1/0\"\nsync = \"100ms\"\n\n[[policies]]\nname = \"w\"\nalgorithm = \"fixed_window\"\nlimit = 5\nperiod = \"1m\"\n\n[[overrides]]\npolicy = \"w\"\nkey = \"k\"\nlimit = 9\n",
            "error: overrides are not supported with store.sync",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = write(dir.path(), &format!("c{i}.toml"), text);
        let out = Command::new(sluicegate_bin!())
            .args(["validate", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}
