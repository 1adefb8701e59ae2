//! The layer as a tower `Service`: it calls the inner service it polled ready, on every
//! path (decided at once, no route, delayed, a store answering later).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use sluicegate_core::{AlgorithmKind, ManualClock, MemoryStore, Mode, Policy, Store};
use sluicegate_middleware::{RateLimitLayer, RateLimiter, RouteSpec};
use sluicegate_testkit::Later;
use tower::{Layer, Service, ServiceExt};

fn limiter(store: Arc<dyn Store>) -> RateLimiter {
    let two = Policy::builder(
        "two",
        AlgorithmKind::TokenBucket,
        2,
        Duration::from_secs(60),
    )
    .build()
    .unwrap();
    // One request every 10 ms, the second of a burst waits for its turn (a short real wait).
    let paced = Policy::builder("paced", AlgorithmKind::Gcra, 100, Duration::from_secs(1))
        .burst(1)
        .mode(Mode::Delay)
        .max_delay(Duration::from_secs(1))
        .build()
        .unwrap();
    RateLimiter::builder(store)
        .policy(two)
        .policy(paced)
        .route(RouteSpec::new("/limited", &["two"]))
        .route(RouteSpec::new("/paced", &["paced"]))
        .build()
        .unwrap()
}

fn request(path: &str) -> Request<Full<Bytes>> {
    let mut request = Request::get(path).body(Full::new(Bytes::new())).unwrap();
    request
        .extensions_mut()
        .insert(SocketAddr::from(([192, 0, 2, 1], 4000)));
    request
}

/// Sends `path` through the layer around a concurrency limit of one, whose `call` panics
/// unless that very instance was polled ready (a clone of it is not): status and
/// `RateLimit-Remaining`.
async fn send(limiter: RateLimiter, paths: &[&str]) -> Vec<(u16, Option<String>)> {
    let inner = tower::limit::ConcurrencyLimitLayer::new(1).layer(tower::service_fn(
        |_: Request<Full<Bytes>>| async { Ok::<_, Infallible>(Response::new(Full::from("ok"))) },
    ));
    let mut service = RateLimitLayer::new(limiter).layer(inner);
    let mut out = Vec::new();
    for path in paths {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request(path))
            .await
            .unwrap();
        let remaining = response
            .headers()
            .get("ratelimit-remaining")
            .map(|v| v.to_str().unwrap().to_owned());
        let status = response.status().as_u16();
        // The body ends: whatever the response held (a permit of the limit) is freed.
        response.into_body().collect().await.unwrap();
        out.push((status, remaining));
    }
    out
}

fn expected() -> Vec<(u16, Option<String>)> {
    vec![
        (200, Some("1".into())),
        (200, Some("0".into())),
        (429, Some("0".into())),
        (200, None),
        (200, Some("0".into())),
        (200, Some("0".into())),
    ]
}

const PATHS: [&str; 6] = [
    "/limited", "/limited", "/limited", "/free", "/paced", "/paced",
];

#[tokio::test]
async fn a_store_answering_at_once_calls_the_service_polled_ready() {
    let store = Arc::new(MemoryStore::with_clock(100, ManualClock::new(1_000_000)));
    assert_eq!(send(limiter(store), &PATHS).await, expected());
}

#[tokio::test]
async fn a_store_answering_later_calls_the_service_polled_ready() {
    let store = Arc::new(Later(MemoryStore::with_clock(
        100,
        ManualClock::new(1_000_000),
    )));
    assert_eq!(send(limiter(store), &PATHS).await, expected());
}
