//! Rough per-step costs of the limiter, in-process, for profiling (`ONLY=check` loops on
//! `RateLimiter::check` + headers for `perf`). The comparisons that count are
//! `crates/sluicegate-middleware/benches/layer.rs` (criterion) and
//! `crates/sluicegate-middleware/benches/loadtest.sh` (wrk over HTTP).
//!
//! `cargo run --release -p sluicegate-bench --bin step_costs`
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use axum::{Router, body::Body, extract::ConnectInfo, routing::get};
use http::{HeaderMap, Method, Request};
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
use sluicegate_middleware::RateLimitLayer;
use sluicegate_middleware::{HeaderSet, RateLimiter, RouteSpec, headers::write_headers};
use tower::ServiceExt;

/// Times `n` runs of `step` and prints nanoseconds per run.
fn timed(label: &str, n: usize, mut step: impl FnMut(usize)) {
    let t = Instant::now();
    for i in 0..n {
        step(i);
    }
    println!("{label:<22} {:>6} ns", t.elapsed().as_nanos() / n as u128);
}

fn api_policy() -> Policy {
    Policy::builder(
        "api",
        AlgorithmKind::TokenBucket,
        1_000_000_000,
        Duration::from_secs(60),
    )
    .build()
    .unwrap()
}

fn limiter(store: Arc<MemoryStore>) -> RateLimiter {
    RateLimiter::builder(store)
        .policy(api_policy())
        .route(RouteSpec::new("/api", &["api"]))
        .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
        .build()
        .unwrap()
}

/// 10,000 requests' headers, each from its own forwarded client address.
fn client_headers() -> Vec<HeaderMap> {
    (0..10_000)
        .map(|i| {
            let mut h = HeaderMap::new();
            h.insert(
                "x-forwarded-for",
                format!("10.0.{}.{}", i / 256, i % 256).parse().unwrap(),
            );
            h
        })
        .collect()
}

fn request(headers: &HeaderMap) -> Request<Body> {
    let mut request = Request::get("/api/items")
        .extension(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))))
        .body(Body::empty())
        .unwrap();
    *request.headers_mut() = headers.clone();
    request
}

/// `ONLY=check`: `RateLimiter::check` + headers in a loop, for `perf`.
fn loop_check(rt: &Runtime, limiter: &RateLimiter, headers: &[HeaderMap], peer: IpAddr) {
    for i in 0..3_000_000 {
        let d = rt.block_on(limiter.check(&Method::GET, "/api/items", &headers[i % 10_000], peer));
        let mut h = HeaderMap::with_capacity(8);
        d.unwrap().write_headers(&mut h);
        std::hint::black_box(h);
    }
}

/// `ONLY=layer`: the layered router in a loop, for `perf`.
fn loop_layer(rt: &Runtime, layered: &Router, headers: &[HeaderMap]) {
    for i in 0..2_000_000 {
        let r = rt.block_on(layered.clone().oneshot(request(&headers[i % 10_000])));
        std::hint::black_box(r.unwrap());
    }
}

/// One round of every step's timing.
fn round(rt: &Runtime, limiter: &RateLimiter, routers: &[(&str, Router)], headers: &[HeaderMap]) {
    let n = 200_000;
    let peer: IpAddr = SocketAddr::from(([127, 0, 0, 1], 1)).ip();
    let store = MemoryStore::new(1_000_000);
    let keys: Vec<String> = (0..10_000)
        .map(|i| format!("ip:10.0.{}.{}", i / 256, i % 256))
        .collect();
    let policies = [Arc::new(api_policy())];
    timed("store.check_now", n, |i| {
        let request = CheckRequest::new(&policies, &keys[i % 10_000], 1);
        std::hint::black_box(store.check_now(request).unwrap());
    });
    timed("identity + key", n, |i| {
        let ip = limiter.identity().client_ip(peer, &headers[i % 10_000]);
        std::hint::black_box(limiter.identity().ip_key(ip));
    });
    timed("limiter.check", n, |i| {
        let h = &headers[i % 10_000];
        std::hint::black_box(rt.block_on(limiter.check(&Method::GET, "/api/items", h, peer)));
    });
    let d = rt
        .block_on(limiter.check(&Method::GET, "/api/items", &headers[0], peer))
        .unwrap();
    let map = || {
        let mut h = HeaderMap::with_capacity(8);
        h.insert("content-type", http::HeaderValue::from_static("text/plain"));
        h
    };
    timed("decision.write_headers", n, |_| {
        let mut h = map();
        d.write_headers(&mut h);
        std::hint::black_box(h);
    });
    timed("draft6 only", n, |_| {
        let mut h = map();
        write_headers(&[HeaderSet::Draft6], d.verdict(), &mut h);
        std::hint::black_box(h);
    });
    timed("empty map", n, |_| {
        std::hint::black_box(map());
    });
    for (name, router) in routers {
        timed(&format!("oneshot {name}"), n, |i| {
            let r = rt.block_on(router.clone().oneshot(request(&headers[i % 10_000])));
            std::hint::black_box(r.unwrap());
        });
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = limiter(Arc::new(MemoryStore::new(1_000_000)));
    let bare = Router::new().route("/api/items", get(|| async { "ok" }));
    let layered = bare
        .clone()
        .layer(RateLimitLayer::new(self::limiter(Arc::new(
            MemoryStore::new(1_000_000),
        ))));
    let headers = client_headers();
    let peer: IpAddr = SocketAddr::from(([127, 0, 0, 1], 1)).ip();
    match std::env::var("ONLY").as_deref() {
        Ok("check") => return loop_check(&rt, &limiter, &headers, peer),
        Ok("layer") => return loop_layer(&rt, &layered, &headers),
        _ => {}
    }
    let routers = [("bare", bare), ("layer", layered)];
    for _ in 0..4 {
        round(&rt, &limiter, &routers, &headers);
    }
}
