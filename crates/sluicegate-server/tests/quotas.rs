//! Issue 14 through the real binary, on the memory store and on a real redis-server:
//! richer keys, allow/deny lists (and their metrics).

use std::net::IpAddr;

use sluicegate_testkit::{RedisServer, Sluicegate, sluicegate_bin, write};

fn store_section(redis_port: Option<u16>) -> String {
    match redis_port {
        Some(port) => format!(
            "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}/0\"\ntimeout = \"2s\"\n"
        ),
        None => "[store]\nbackend = \"memory\"\n".to_owned(),
    }
}

fn client_from(local: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(local.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

async fn forward_auth(client: &reqwest::Client, server: &Sluicegate, uri: &str) -> u16 {
    client
        .get(server.url("/v1/forward-auth"))
        .header("x-original-uri", uri)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn keys_and_lists(redis_port: Option<u16>) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[server]
allow = ["127.0.0.2"]
deny = ["127.0.0.3/32"]

{}
[[policies]]
name = "per-key"
algorithm = "fixed_window"
limit = 1
period = "1h"

[[routes]]
path = "/api"
policies = ["per-key"]
key = "ip+query:api_key"
deny = ["127.0.0.4/32"]
"#,
        store_section(redis_port)
    );
    let path = write(dir.path(), "quotas.toml", &config);
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);

    let plain = client_from("127.0.0.1");
    assert_eq!(forward_auth(&plain, &server, "/api?api_key=a").await, 200);
    assert_eq!(forward_auth(&plain, &server, "/api?api_key=%61").await, 429);
    assert_eq!(forward_auth(&plain, &server, "/api?api_key=b").await, 200);

    let allowed = client_from("127.0.0.2");
    for _ in 0..3 {
        assert_eq!(forward_auth(&allowed, &server, "/api?api_key=a").await, 200);
    }
    let denied = client_from("127.0.0.3");
    let response = denied
        .get(server.url("/v1/forward-auth"))
        .header("x-original-uri", "/not-limited")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "forbidden");
    let route_denied = client_from("127.0.0.4");
    assert_eq!(forward_auth(&route_denied, &server, "/api").await, 403);
    assert_eq!(forward_auth(&route_denied, &server, "/else").await, 200);

    let metrics = plain
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |list: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("sluicegate_access_list_total{{list=\"{list}\"}}")))
            .and_then(|l| l.rsplit(' ').next())
            .map(|n| n.to_owned())
    };
    assert_eq!(count("allow").as_deref(), Some("3"), "{metrics}");
    assert_eq!(count("deny").as_deref(), Some("2"), "{metrics}");
}

#[tokio::test]
async fn keys_and_access_lists_on_memory() {
    keys_and_lists(None).await;
}

#[tokio::test]
async fn keys_and_access_lists_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    keys_and_lists(Some(redis.port)).await;
}
