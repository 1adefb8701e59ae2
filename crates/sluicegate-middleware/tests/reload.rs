//! Swapping the limiter at run time, and serving without a peer address.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use sluicegate_core::{AlgorithmKind, MemoryStore};
use sluicegate_middleware::{LimiterHandle, RateLimitLayer, RateLimiter, RouteSpec};
use sluicegate_testkit::{Counting, http, policy, statuses};

fn limiter(store: Arc<MemoryStore>, limit: u64, observer: Arc<Counting>) -> RateLimiter {
    RateLimiter::builder(store)
        .policy(policy(
            "api",
            AlgorithmKind::TokenBucket,
            limit,
            Duration::from_secs(60),
        ))
        .route(RouteSpec::new("/api", &["api"]))
        .trusted_proxies(vec!["0.0.0.0/0".parse().unwrap()])
        .observer(observer)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_swapped_limiter_applies_to_the_next_request() {
    let store = Arc::new(MemoryStore::new(1000));
    let observer = Arc::new(Counting::default());
    let handle = LimiterHandle::new(limiter(store.clone(), 2, observer.clone()));
    let app = Router::new()
        .route("/api/x", get(|| async { "ok" }))
        .layer(RateLimitLayer::from_handle(handle.clone()));
    // Deliberately without connect info.
    let base = http::serve(app).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/x");
    assert_eq!(statuses(&client, &url, 3).await, [200, 200, 429]);
    // A policy with new numbers starts from a fresh state.
    handle.replace(limiter(store, 5, observer.clone()));
    assert_eq!(
        statuses(&client, &url, 6).await,
        [200, 200, 200, 200, 200, 429]
    );

    // Without ConnectInfo the peer is 0.0.0.0, and forwarded headers count only if that is
    // trusted (here it is, through 0.0.0.0/0): without them every client shares one key.
    let keys = observer.keys.lock().unwrap().clone();
    assert!(keys.iter().all(|k| k == "ip:0.0.0.0"), "{keys:?}");
}
