//! The decision API over real HTTP: shapes, errors, admin, OpenAPI, metrics.

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use sluicegate_testkit::{Sluicegate, sluicegate_bin, write};

const CONFIG: &str = r#"
[server]
admin_token = "s3cret-token"
headers = ["draft-6", "ietf", "legacy"]

[[policies]]
name = "burst"
algorithm = "token_bucket"
limit = 5
period = "1s"

[[policies]]
name = "daily"
algorithm = "fixed_window"
limit = 3
period = "1d"

[[policies]]
name = "slow"
algorithm = "gcra"
limit = 1
period = "1h"
mode = "delay"
max_delay = "2h"
"#;

fn start() -> (tempfile::TempDir, Sluicegate) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "sluicegate.toml", CONFIG);
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    (dir, server)
}

async fn check(
    client: &Client,
    server: &Sluicegate,
    body: Value,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let r = client
        .post(server.url("/v1/check"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap())
}

#[tokio::test]
async fn decisions_have_the_contract_shape() {
    let (_dir, server) = start();
    let client = Client::new();
    let (status, headers, body) = check(
        &client,
        &server,
        json!({"policy": "daily", "key": "user_1", "cost": 1}),
    )
    .await;
    assert_eq!(status, 200);
    let obj = body.as_object().unwrap();
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "allowed",
            "limit",
            "policy",
            "remaining",
            "reset_after_ms",
            "retry_after_ms"
        ]
    );
    assert_eq!(body["allowed"], true);
    assert_eq!(body["remaining"], 2);
    assert!(body["retry_after_ms"].is_null());
    assert_eq!(headers["ratelimit-limit"], "3");
    assert_eq!(headers["ratelimit-remaining"], "2");
    assert!(headers.contains_key("x-ratelimit-reset"));
    assert!(
        headers["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with(r#""daily";r=2;t="#)
    );

    // cost 0 peeks
    let (_, _, peek) = check(
        &client,
        &server,
        json!({"policy": "daily", "key": "user_1", "cost": 0}),
    )
    .await;
    assert_eq!(peek["remaining"], 2);
    let (_, _, peek) = check(
        &client,
        &server,
        json!({"policy": "daily", "key": "user_1", "cost": 0}),
    )
    .await;
    assert_eq!(peek["remaining"], 2);

    // A list: all-or-nothing, `policies` per policy, the top level is the deciding one.
    let multi = json!({"policy": ["burst", "daily"], "key": "user_1", "cost": 2});
    let (status, headers, body) = check(&client, &server, multi.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(body["allowed"], true);
    assert_eq!(body["policy"], "daily");
    assert_eq!(body["remaining"], 0);
    assert_eq!(body["policies"].as_array().unwrap().len(), 2);
    assert_eq!(body["policies"][0]["policy"], "burst");
    assert_eq!(body["policies"][0]["remaining"], 3);
    assert_eq!(
        headers["ratelimit-policy"],
        r#""burst";q=5;w=1, "daily";q=3;w=86400"#
    );
    let (_, headers, denied) = check(&client, &server, multi).await;
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["policy"], "daily");
    assert!(denied["retry_after_ms"].as_u64().unwrap() > 0);
    assert!(headers.contains_key("retry-after"));
    // The denial consumed nothing from `burst`.
    let (_, _, burst) = check(
        &client,
        &server,
        json!({"policy": "burst", "key": "user_1", "cost": 0}),
    )
    .await;
    assert!(burst["remaining"].as_u64().unwrap() >= 3, "{burst}");

    // GET /v1/limits peeks the same object.
    let r = client
        .get(server.url("/v1/limits/daily/user_1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["remaining"], 0);
    assert_eq!(body["policy"], "daily");

    // Delay mode says how long to wait.
    let (_, _, first) = check(&client, &server, json!({"policy": "slow", "key": "k"})).await;
    assert_eq!(first["allowed"], true);
    assert!(first.get("delay_ms").is_none());
    let (_, _, second) = check(&client, &server, json!({"policy": "slow", "key": "k"})).await;
    assert_eq!(second["allowed"], true);
    assert!(second["delay_ms"].as_u64().unwrap() > 3_000_000, "{second}");
}

#[tokio::test]
async fn batches_answer_in_order() {
    let (_dir, server) = start();
    let client = Client::new();
    let (status, _, body) = check(
        &client,
        &server,
        json!({"requests": [
            {"policy": "daily", "key": "a"},
            {"policy": "nope", "key": "a"},
            {"policy": "daily", "key": "a", "cost": 99},
            {"policy": ["daily", "burst"], "key": "b"},
        ]}),
    )
    .await;
    assert_eq!(status, 200);
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0]["remaining"], 2);
    assert_eq!(results[1]["error"], "unknown_policy");
    assert_eq!(results[2]["error"], "invalid_request");
    assert_eq!(results[3]["policies"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn bad_requests_get_the_contract_errors() {
    let (_dir, server) = start();
    let client = Client::new();
    let post = |body: &'static str, ct: &'static str| {
        client
            .post(server.url("/v1/check"))
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let cases: &[(&str, &str, u16, &str)] = &[
        ("{not json", "application/json", 400, "invalid_request"),
        ("[]", "application/json", 400, "invalid_request"),
        (
            r#"{"policy":"daily"}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":"daily","key":""}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":"daily","key":"k","cost":-1}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":"daily","key":"k","cost":1.5}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":"daily","key":"k","cost":4}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":"daily","key":"k","cost":"1"}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":["daily","daily"],"key":"k"}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":[],"key":"k"}"#,
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":"daily","key":"k"}"#,
            "text/plain",
            400,
            "invalid_request",
        ),
        (
            r#"{"policy":"ghost","key":"k"}"#,
            "application/json",
            404,
            "unknown_policy",
        ),
    ];
    for (body, ct, status, code) in cases {
        let r = post(body, ct).await.unwrap();
        assert_eq!(r.status().as_u16(), *status, "{body}");
        let json: Value = r.json().await.unwrap();
        assert_eq!(json["error"], *code, "{body}");
        assert!(json["message"].as_str().unwrap().len() > 5);
    }
    let long_key = "k".repeat(1025);
    let (status, _, body) = check(
        &client,
        &server,
        json!({"policy": "daily", "key": long_key}),
    )
    .await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (400, Some("invalid_request"))
    );

    let big = format!(r#"{{"policy":"daily","key":"{}"}}"#, "x".repeat(70 * 1024));
    let r = client
        .post(server.url("/v1/check"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "payload_too_large"
    );

    let r = client.get(server.url("/v1/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_found");
    let r = client.get(server.url("/v1/check")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "method_not_allowed"
    );
    let r = client
        .get(server.url("/v1/limits/ghost/k"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .get(server.url("/v1/limits/daily/%FF"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_request");
}

#[tokio::test]
async fn admin_reset_needs_the_token() {
    let (_dir, server) = start();
    let client = Client::new();
    for _ in 0..3 {
        check(
            &client,
            &server,
            json!({"policy": "daily", "key": "victim"}),
        )
        .await;
    }
    let (_, _, body) = check(
        &client,
        &server,
        json!({"policy": "daily", "key": "victim"}),
    )
    .await;
    assert_eq!(body["allowed"], false);

    let url = server.url("/v1/limits/daily/victim");
    let r = client.delete(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "unauthorized");
    let r = client
        .delete(&url)
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "forbidden");
    let (_, _, body) = check(
        &client,
        &server,
        json!({"policy": "daily", "key": "victim", "cost": 0}),
    )
    .await;
    assert_eq!(body["remaining"], 0, "refused resets change nothing");

    let r = client
        .delete(&url)
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (_, _, body) = check(
        &client,
        &server,
        json!({"policy": "daily", "key": "victim"}),
    )
    .await;
    assert_eq!(body["allowed"], true);
    assert_eq!(body["remaining"], 2);

    let r = client
        .delete(server.url("/v1/limits/ghost/victim"))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn admin_is_disabled_without_a_token() {
    let server = Sluicegate::start(sluicegate_bin!(), &[]);
    let r = Client::new()
        .delete(server.url("/v1/limits/default/k"))
        .bearer_auth("anything")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "admin_disabled");
}

#[tokio::test]
async fn policies_health_openapi_and_metrics() {
    let (_dir, server) = start();
    let client = Client::new();
    let policies: Value = client
        .get(server.url("/v1/policies"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = policies["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["burst", "daily", "slow"]);
    assert_eq!(policies["policies"][1]["period_ms"], 86_400_000);

    assert_eq!(
        client
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let ready: Value = client
        .get(server.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["store"], "memory");

    let spec: Value = client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v1/check",
        "/v1/limits/{policy}/{key}",
        "/v1/policies",
        "/v1/forward-auth",
        "/healthz",
        "/readyz",
    ] {
        assert!(spec["paths"].get(path).is_some(), "missing {path}");
    }
    assert!(
        spec["paths"]["/v1/limits/{policy}/{key}"]
            .get("delete")
            .is_some()
    );
    assert!(
        spec["components"]["schemas"]["CheckResponse"]["properties"]
            .get("reset_after_ms")
            .is_some()
    );

    check(&client, &server, json!({"policy": "daily", "key": "m"})).await;
    let text = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(r#"sluicegate_decisions_total{policy="daily",outcome="allowed"} 1"#),
        "{text}"
    );
    assert!(text.contains("sluicegate_tracked_keys 1"), "{text}");
    assert!(
        text.contains("sluicegate_store_duration_seconds_bucket"),
        "{text}"
    );
    assert!(text.contains("sluicegate_store_errors_total"), "{text}");
}
