//! Routes over real HTTP: per-route limits, the longest prefix, methods and header tiers.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, MemoryStore};
use sluicegate_middleware::{KeySpec, RateLimiter, RouteSpec};
use sluicegate_testkit::http::serve_limited;
use sluicegate_testkit::{ok_count, policy, statuses};

const MINUTE: Duration = Duration::from_secs(60);

fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(10_000))
}

#[tokio::test]
async fn each_route_has_its_own_limit_and_the_longest_prefix_wins() {
    let limiter = RateLimiter::builder(store())
        .policy(policy("auth", AlgorithmKind::TokenBucket, 3, MINUTE))
        .policy(policy("search", AlgorithmKind::FixedWindow, 5, MINUTE))
        .policy(policy("api", AlgorithmKind::SlidingWindow, 8, MINUTE))
        .route(RouteSpec::new("/api", &["api"]))
        .route(RouteSpec::new("/api/auth", &["auth"]))
        .route(RouteSpec::new("/api/search", &["search"]))
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();

    let auth = statuses(&client, &format!("{base}/api/auth/login"), 5).await;
    assert_eq!(auth, [200, 200, 200, 429, 429]);
    let search = statuses(&client, &format!("{base}/api/search?q=x"), 7).await;
    assert_eq!(ok_count(&search), 5);
    // /api/searching is not under /api/search (segment boundary): it counts against /api.
    let api = statuses(&client, &format!("{base}/api/searching"), 10).await;
    assert_eq!(ok_count(&api), 8);
    assert_eq!(api[8], 429);
    // Unrouted paths pass untouched: no limit, no headers.
    let free = client.get(format!("{base}/apiary")).send().await.unwrap();
    assert_eq!(free.status(), 200);
    assert!(free.headers().get("ratelimit-limit").is_none());
    assert_eq!(
        ok_count(&statuses(&client, &format!("{base}/health"), 20).await),
        20
    );
}

#[tokio::test]
async fn methods_select_the_route() {
    let limiter = RateLimiter::builder(store())
        .policy(policy("upload", AlgorithmKind::Gcra, 1, MINUTE))
        .policy(policy("api", AlgorithmKind::Gcra, 4, MINUTE))
        .route(RouteSpec::new("/api", &["api"]))
        .route(RouteSpec::new("/api/files", &["upload"]).methods(&["POST", "put"]))
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/files/a.txt");

    assert_eq!(client.post(&url).send().await.unwrap().status(), 200);
    assert_eq!(client.post(&url).send().await.unwrap().status(), 429);
    assert_eq!(client.put(&url).send().await.unwrap().status(), 429);
    // GET falls through to /api, whose limit is separate.
    let gets = statuses(&client, &url, 5).await;
    assert_eq!(gets, [200, 200, 200, 200, 429]);
    let limit = client.get(&url).send().await.unwrap();
    assert_eq!(limit.headers()["ratelimit-limit"], "4");
}

#[tokio::test]
async fn header_tiers_select_policies_and_keys() {
    let limiter = RateLimiter::builder(store())
        .policy(policy("free", AlgorithmKind::TokenBucket, 2, MINUTE))
        .policy(policy("pro", AlgorithmKind::TokenBucket, 6, MINUTE))
        .policy(policy("pro-burst", AlgorithmKind::TokenBucket, 4, MINUTE))
        .route(RouteSpec::new("/api", &["free"]).key("header:x-api-key".parse().unwrap()))
        .route(
            RouteSpec::new("/api", &["pro", "pro-burst"])
                .header("x-plan", "pro")
                .key(KeySpec::Header("x-api-key".parse().unwrap())),
        )
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/items");
    let send = |key: &'static str, plan: Option<&'static str>| {
        let mut request = client.get(&url).header("x-api-key", key);
        if let Some(plan) = plan {
            request = request.header("x-plan", plan);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };

    let mut free = Vec::new();
    for _ in 0..3 {
        free.push(send("alice", None).await);
    }
    assert_eq!(free, [200, 200, 429]);
    // A different key has its own budget; a non-matching tier value is the free tier.
    assert_eq!(send("bob", Some("enterprise")).await, 200);
    // Pro: both policies apply, all-or-nothing: the tighter (4) decides.
    let mut pro = Vec::new();
    for _ in 0..6 {
        pro.push(send("carol", Some("pro")).await);
    }
    assert_eq!(pro, [200, 200, 200, 200, 429, 429]);
    // The rejected requests consumed nothing from "pro": its headers say 6 - 4 = 2 remain.
    let response = client
        .get(&url)
        .header("x-api-key", "carol")
        .header("x-plan", "pro")
        .send()
        .await
        .unwrap();
    let ietf = response.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(ietf.contains(r#""pro";r=2"#), "{ietf}");
}
