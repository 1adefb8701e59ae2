//! Leases and reservations of the decision API, through the real binary, on the in-memory
//! store and on a real redis-server:
//! - `/v1/check` on a concurrency policy answers a `lease`; `POST /v1/release` frees it
//!   (idempotent); a forged lease is a 400;
//! - `"reserve": true` answers a `reservation`; `POST /v1/settle` gives the difference back
//!   or charges the excess in every policy the decision consumed from;
//! - tampered, foreign-key, replayed and expired reservations are refused with a clear 4xx;
//! - two instances with one secret on one Redis settle each other's reservations.

use reqwest::Client;
use serde_json::{Value, json};
use sluicegate_testkit::{RedisServer, Sluicegate as Server, eventually, sluicegate_bin, write};

const SECRET: &str = "a shared secret of the fleet";

fn config(store: &str, secret: &str, ttl: &str) -> String {
    format!(
        r#"
[server]
reservation_secret = "{secret}"
reservation_ttl = "{ttl}"

{store}

[[policies]]
name = "inflight"
algorithm = "concurrency"
limit = 1
lease = "{ttl}"

[[policies]]
name = "tokens"
algorithm = "token_bucket"
limit = 100
period = "1h"

[[policies]]
name = "log"
algorithm = "sliding_log"
limit = 10
period = "1h"
"#
    )
}

fn redis_store(port: u16) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}/0\"\nkey_prefix = \"st\"\ntimeout = \"2s\""
    )
}

fn start(dir: &std::path::Path, name: &str, text: &str) -> Server {
    let path = write(dir, name, text);
    Server::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()])
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let r = Client::new()
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn check(server: &Server, body: Value) -> Value {
    let (status, answer) = post(server, "/v1/check", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Concurrency limit 1: the lease holds the slot until released; releasing is idempotent.
async fn leases(server: &Server, key: &str) {
    let ask = json!({"policy": "inflight", "key": key});
    let first = check(server, ask.clone()).await;
    assert_eq!(first["allowed"], true);
    let lease = first["lease"]
        .as_str()
        .expect("an admitted answer carries a lease");
    let second = check(server, ask.clone()).await;
    assert_eq!(second["allowed"], false, "{second}");
    assert!(second.get("lease").is_none(), "a denial holds no lease");
    let release = |lease: &str| post(server, "/v1/release", json!({ "lease": lease }));
    assert_eq!(release(lease).await.0, 204);
    let third = check(server, ask.clone()).await;
    assert_eq!(
        third["allowed"], true,
        "the release freed the slot: {third}"
    );
    // Releasing the first lease again frees nothing: the new holder keeps its slot.
    assert_eq!(release(lease).await.0, 204);
    assert_eq!(check(server, ask.clone()).await["allowed"], false);
    // Forged or malformed leases are refused, and free nothing.
    let mut forged = third["lease"].as_str().unwrap().to_owned();
    forged.insert(3, 'x');
    for bad in [forged.as_str(), "", "not-a-lease", "a.b"] {
        let (status, body) = release(bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"], "invalid_request");
    }
    assert_eq!(check(server, ask.clone()).await["allowed"], false);
    assert_eq!(release(third["lease"].as_str().unwrap()).await.0, 204);
    assert_eq!(check(server, ask).await["allowed"], true);
}

/// Reserve on two policies, settle lower and higher: each policy gets the real cost.
async fn settles(reserve_on: &Server, settle_on: &Server, key: &str) {
    let reserve = |cost: u64| {
        check(
            reserve_on,
            json!({"policy": ["tokens", "log"], "key": key, "cost": cost, "reserve": true}),
        )
    };
    let settle = |reservation: Value, cost: u64| {
        post(
            settle_on,
            "/v1/settle",
            json!({"reservation": reservation, "cost": cost}),
        )
    };
    let remaining = |answer: &Value, policy: &str| {
        answer["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["policy"] == policy)
            .unwrap()["remaining"]
            .as_u64()
            .unwrap()
    };
    // 6 reserved, 2 used: 100 - 2 tokens and 10 - 2 in the log.
    let first = reserve(6).await;
    assert_eq!(first["allowed"], true, "{first}");
    assert_eq!(
        (remaining(&first, "tokens"), remaining(&first, "log")),
        (94, 4)
    );
    let (status, settled) = settle(first["reservation"].clone(), 2).await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(
        (remaining(&settled, "tokens"), remaining(&settled, "log")),
        (98, 8)
    );
    // 1 reserved, 5 used: the excess is charged.
    let second = reserve(1).await;
    let (status, settled) = settle(second["reservation"].clone(), 5).await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(
        (remaining(&settled, "tokens"), remaining(&settled, "log")),
        (93, 3)
    );
    // Settled once: a replay is a 409 and changes nothing.
    let (status, body) = settle(second["reservation"].clone(), 0).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "reservation_settled");
    let read = check(
        reserve_on,
        json!({"policy": ["tokens", "log"], "key": key, "cost": 0}),
    )
    .await;
    assert_eq!(
        (remaining(&read, "tokens"), remaining(&read, "log")),
        (93, 3)
    );
}

/// Tampered and foreign reservations are 400s; a lease is no reservation; reserve needs a
/// cost; an expired reservation is a 409.
async fn refusals(server: &Server, foreign: &Server, key: &str) {
    let ours = check(
        server,
        json!({"policy": "tokens", "key": key, "cost": 3, "reserve": true}),
    )
    .await;
    let token = ours["reservation"].as_str().unwrap().to_owned();
    let theirs = check(
        foreign,
        json!({"policy": "tokens", "key": key, "cost": 3, "reserve": true}),
    )
    .await;
    let lease = check(server, json!({"policy": "inflight", "key": key})).await["lease"].clone();
    let (body, tag) = token.split_once('.').unwrap();
    let flipped = format!(
        "{}{}.{tag}",
        &body[..body.len() - 1],
        if body.ends_with('A') { 'B' } else { 'A' }
    );
    for (what, bad) in [
        ("tampered", json!(flipped)),
        ("foreign key", theirs["reservation"].clone()),
        ("a lease", lease),
        ("garbage", json!("nope")),
    ] {
        let (status, answer) =
            post(server, "/v1/settle", json!({"reservation": bad, "cost": 1})).await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert_eq!(answer["error"], "invalid_request", "{what}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("not a genuine"),
            "{what}: {answer}"
        );
    }
    let (status, _) = post(
        server,
        "/v1/check",
        json!({"policy": "tokens", "key": key, "cost": 0, "reserve": true}),
    )
    .await;
    assert_eq!(status, 400, "reserve with cost 0");
    for bad in [
        json!({"reservation": token}),
        json!({"reservation": token, "cost": -1}),
        json!({"reservation": token, "cost": 1.5}),
    ] {
        assert_eq!(
            post(server, "/v1/settle", bad.clone()).await.0,
            400,
            "{bad}"
        );
    }
}

/// A reservation not settled within `reservation_ttl` (1s here) is a 409. The wait is for a
/// condition: a lease of the same length, taken after the reservation, has expired.
async fn expiry(server: &Server, key: &str) {
    let reserved = check(
        server,
        json!({"policy": "tokens", "key": key, "cost": 3, "reserve": true}),
    )
    .await;
    let held = check(server, json!({"policy": "inflight", "key": key})).await;
    assert_eq!(held["allowed"], true);
    eventually("the lease taken after the reservation expires", || async {
        check(server, json!({"policy": "inflight", "key": key, "cost": 0})).await["remaining"] == 1
    })
    .await;
    let (status, body) = post(
        server,
        "/v1/settle",
        json!({"reservation": reserved["reservation"], "cost": 0}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "reservation_expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_reservations_on_the_memory_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "a.toml", &config("", SECRET, "1m"));
    let foreign = start(
        dir.path(),
        "b.toml",
        &config("", "another secret, another fleet", "1m"),
    );
    leases(&server, "m-lease").await;
    settles(&server, &server, "m-settle").await;
    refusals(&server, &foreign, "m-refuse").await;
    let short = start(dir.path(), "c.toml", &config("", SECRET, "1s"));
    expiry(&short, "m-expiry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_reservations_across_instances_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = redis_store(redis.port);
    let a = start(dir.path(), "a.toml", &config(&store, SECRET, "1m"));
    let b = start(dir.path(), "b.toml", &config(&store, SECRET, "1m"));
    let foreign = start(
        dir.path(),
        "f.toml",
        &config(&store, "another secret, another fleet", "1m"),
    );
    leases(&a, "r-lease").await;
    // A lease taken through one instance is freed through the other.
    let held = check(&a, json!({"policy": "inflight", "key": "r-cross"})).await;
    assert_eq!(
        check(&b, json!({"policy": "inflight", "key": "r-cross"})).await["allowed"],
        false
    );
    assert_eq!(
        post(&b, "/v1/release", json!({"lease": held["lease"]}))
            .await
            .0,
        204
    );
    assert_eq!(
        check(&b, json!({"policy": "inflight", "key": "r-cross"})).await["allowed"],
        true
    );
    // Reserved on one instance, settled on the other.
    settles(&a, &b, "r-settle").await;
    refusals(&a, &foreign, "r-refuse").await;
    let short = start(dir.path(), "c.toml", &config(&store, SECRET, "1s"));
    expiry(&short, "r-expiry").await;
}
