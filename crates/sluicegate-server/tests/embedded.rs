//! The embedded default, end to end: no config file, 60 requests a minute per client IP.

use serde_json::Value;
use sluicegate_testkit::{Sluicegate, sluicegate_bin};

#[tokio::test]
async fn the_61st_request_in_a_minute_from_one_ip_is_denied() {
    let server = Sluicegate::start(sluicegate_bin!(), &[]);
    assert!(server.banner.contains("store: memory"), "{}", server.banner);
    assert!(
        server
            .banner
            .contains("policy default: token_bucket 60/1m burst 60"),
        "{}",
        server.banner
    );
    let client = reqwest::Client::new();
    let url = server.url("/v1/forward-auth");
    // The bucket refills one a second in real time: however slow this machine is, the
    // burst of 60 is admitted, and at most one more a second that the requests took.
    let started = std::time::Instant::now();
    let mut admitted = 0u64;
    let denied = loop {
        let r = client
            .get(&url)
            .header("X-Original-URI", "/anything?x=1")
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            break r;
        }
        admitted += 1;
        assert_eq!(r.status(), 200, "request {admitted}");
        assert_eq!(r.headers()["ratelimit-limit"], "60");
        let remaining: u64 = r.headers()["ratelimit-remaining"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let refills = started.elapsed().as_secs() + 1;
        assert!(
            remaining + admitted >= 60 && remaining + admitted <= 60 + refills,
            "request {admitted}: remaining {remaining} after {refills} s of refills at most"
        );
        assert!(admitted <= 1000, "never denied");
    };
    let refills = started.elapsed().as_secs() + 1;
    assert!(
        (60..=60 + refills).contains(&admitted),
        "{admitted} admitted in {refills} s"
    );
    assert_eq!(denied.status(), 429);
    let h = denied.headers().clone();
    assert_eq!(h["content-type"], "application/json");
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    // One token a second: the next one is at most a second away, in whole seconds.
    assert_eq!(retry, 1, "Retry-After {retry}");
    assert_eq!(h["ratelimit-remaining"], "0");
    assert_eq!(h["ratelimit-policy"], r#""default";q=60;w=60"#);
    let body: Value = denied.json().await.unwrap();
    assert_eq!(body["error"], "rate_limit_exceeded");
    assert_eq!(body["policy"], "default");
    assert_eq!(body["retry_after_seconds"], retry);
    assert!(body["message"].as_str().unwrap().contains("default"));

    // The decision API on the same policy, for another key, is unaffected.
    let r: Value = client
        .post(server.url("/v1/check"))
        .json(&serde_json::json!({"policy": "default", "key": "203.0.113.7"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["allowed"], true);
    assert_eq!(r["remaining"], 59);
}

#[tokio::test]
async fn sigterm_drains_and_exits_zero() {
    let server = Sluicegate::start(sluicegate_bin!(), &[]);
    let r = reqwest::get(server.url("/healthz")).await.unwrap();
    assert_eq!(r.status(), 200);
    let status = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    assert!(status.success(), "exit status {status}");
}
