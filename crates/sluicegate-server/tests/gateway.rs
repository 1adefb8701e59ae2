//! The gateway in front of a small upstream: per-route limits, everything else passed
//! through byte for byte (bodies streamed both ways), 502 when the upstream is down.

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::response::Response;
use reqwest::Client;
use serde_json::Value;
use sluicegate_testkit::{Sluicegate, free_port, http, sluicegate_bin, write};

const CONFIG: &str = r#"
[[policies]]
name = "limited"
algorithm = "fixed_window"
limit = 3
period = "1h"

[[routes]]
path = "/api/limited"
methods = ["GET"]
policies = ["limited"]
"#;

/// Echoes the request body back (streaming) and reports what it saw in headers.
async fn echo(request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if parts.uri.path() == "/big" {
        return Response::new(Body::from(pattern(BIG)));
    }
    let mut response = Response::new(Body::new(body));
    let h = response.headers_mut();
    let seen = |v: Option<&HeaderValue>| v.cloned().unwrap_or(HeaderValue::from_static("-"));
    h.insert(
        "x-seen-uri",
        HeaderValue::from_str(&parts.uri.to_string()).unwrap(),
    );
    h.insert(
        "x-seen-method",
        HeaderValue::from_str(parts.method.as_str()).unwrap(),
    );
    h.insert("x-seen-xff", seen(parts.headers.get("x-forwarded-for")));
    h.insert("x-seen-host", seen(parts.headers.get("host")));
    h.insert("x-seen-custom", seen(parts.headers.get("x-custom")));
    h.insert("x-seen-secret", seen(parts.headers.get("x-secret")));
    h.insert("x-upstream-header", HeaderValue::from_static("kept"));
    response
}

const BIG: usize = 8 * 1024 * 1024 + 17;

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 8)) as u8)
        .collect()
}

/// The echo upstream on loopback; returns its `http://` URL.
async fn upstream() -> String {
    http::serve(Router::new().fallback(echo)).await
}

#[tokio::test]
async fn routes_are_limited_and_everything_else_passes_through() {
    let upstream_url = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "g.toml", CONFIG);
    let server = Sluicegate::start(
        sluicegate_bin!(),
        &[
            "--config",
            path.to_str().unwrap(),
            "--gateway-listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream_url,
        ],
    );
    let client = Client::new();

    for i in 1..=3 {
        let r = client
            .get(server.gateway_url("/api/limited/x"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "request {i}");
        assert_eq!(
            r.headers()["ratelimit-remaining"],
            (3 - i).to_string().as_str()
        );
        assert_eq!(r.headers()["x-seen-uri"], "/api/limited/x");
    }
    let r = client
        .get(server.gateway_url("/api/limited/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "rate_limit_exceeded");
    assert_eq!(body["policy"], "limited");

    // Other methods and paths are not limited and carry no rate-limit headers.
    for _ in 0..5 {
        let r = client
            .post(server.gateway_url("/api/limited/x"))
            .body("p")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let r = client
            .get(server.gateway_url("/public?q=a%20b&x=1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(!r.headers().contains_key("ratelimit-limit"));
        assert_eq!(r.headers()["x-seen-uri"], "/public?q=a%20b&x=1");
    }

    // Headers: custom ones pass, hop-by-hop ones go, X-Forwarded-For gets the peer, Host stays.
    let r = client
        .put(server.gateway_url("/echo"))
        .header("x-custom", "value-1")
        .header("x-forwarded-for", "203.0.113.1")
        .header("connection", "x-secret")
        .header("x-secret", "hop")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["x-seen-method"], "PUT");
    assert_eq!(h["x-seen-custom"], "value-1");
    assert_eq!(h["x-seen-secret"], "-");
    assert_eq!(h["x-seen-xff"], "203.0.113.1, 127.0.0.1");
    assert_eq!(
        h["x-seen-host"],
        server.gateway.unwrap().to_string().as_str()
    );
    assert_eq!(h["x-upstream-header"], "kept");
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"hello");

    // Large bodies, both ways, byte for byte.
    let upload = pattern(6 * 1024 * 1024 + 3);
    let r = client
        .post(server.gateway_url("/upload"))
        .body(upload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let echoed = r.bytes().await.unwrap();
    assert_eq!(echoed.len(), upload.len());
    assert!(
        echoed.as_ref() == upload.as_slice(),
        "uploaded body changed on the way"
    );
    let r = client.get(server.gateway_url("/big")).send().await.unwrap();
    assert_eq!(r.headers()["content-length"], BIG.to_string().as_str());
    let big = r.bytes().await.unwrap();
    assert!(
        big.as_ref() == pattern(BIG).as_slice(),
        "downloaded body changed on the way"
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_json_502() {
    let dead = format!("http://127.0.0.1:{}", free_port());
    let server = Sluicegate::start(
        sluicegate_bin!(),
        &["--gateway-listen", "127.0.0.1:0", "--upstream", &dead],
    );
    let r = Client::new()
        .get(server.gateway_url("/anything"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "bad_gateway");
    // The embedded default's catch-all route applied before forwarding.
    let r = Client::new()
        .get(server.gateway_url("/anything"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
}
