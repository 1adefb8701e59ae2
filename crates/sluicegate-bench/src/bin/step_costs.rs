//! Rough per-step costs of the limiter, in-process, for profiling (`ONLY=check` loops on
//! `RateLimiter::check` + headers for `perf`). The comparisons that count are
//! `crates/sluicegate-middleware/benches/layer.rs` (criterion) and
//! `crates/sluicegate-middleware/benches/loadtest.sh` (wrk over HTTP).
//!
//! `cargo run --release -p sluicegate-bench --bin step_costs`
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::{Router, body::Body, extract::ConnectInfo, routing::get};
use http::{HeaderMap, Method, Request};
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
use sluicegate_middleware::RateLimitLayer;
use sluicegate_middleware::{HeaderSet, RateLimiter, RouteSpec, headers::write_headers};
use tower::ServiceExt;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(MemoryStore::new(1_000_000));
    let policy = Policy::builder(
        "api",
        AlgorithmKind::TokenBucket,
        1_000_000_000,
        Duration::from_secs(60),
    )
    .build()
    .unwrap();
    let limiter = RateLimiter::builder(store.clone())
        .policy(policy.clone())
        .route(RouteSpec::new("/api", &["api"]))
        .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
        .build()
        .unwrap();
    let n = 200_000;
    let bare = Router::new().route("/api/items", get(|| async { "ok" }));
    let layered = bare.clone().layer(RateLimitLayer::new(
        RateLimiter::builder(Arc::new(MemoryStore::new(1_000_000)))
            .policy(
                Policy::builder(
                    "api",
                    AlgorithmKind::TokenBucket,
                    1_000_000_000,
                    Duration::from_secs(60),
                )
                .build()
                .unwrap(),
            )
            .route(RouteSpec::new("/api", &["api"]))
            .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
            .build()
            .unwrap(),
    ));
    let headers: Vec<HeaderMap> = (0..10_000)
        .map(|i| {
            let mut h = HeaderMap::new();
            h.insert(
                "x-forwarded-for",
                format!("10.0.{}.{}", i / 256, i % 256).parse().unwrap(),
            );
            h
        })
        .collect();
    let peer: IpAddr = SocketAddr::from(([127, 0, 0, 1], 1)).ip();
    let keys: Vec<String> = (0..10_000)
        .map(|i| format!("ip:10.0.{}.{}", i / 256, i % 256))
        .collect();
    let policies = [Arc::new(policy)];
    if std::env::var("ONLY").as_deref() == Ok("check") {
        for i in 0..3_000_000 {
            let d =
                rt.block_on(limiter.check(&Method::GET, "/api/items", &headers[i % 10_000], peer));
            let mut h = HeaderMap::with_capacity(8);
            d.unwrap().write_headers(&mut h);
            std::hint::black_box(h);
        }
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("layer") {
        for i in 0..2_000_000 {
            let mut request = Request::get("/api/items")
                .extension(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))))
                .body(Body::empty())
                .unwrap();
            *request.headers_mut() = headers[i % 10_000].clone();
            let r = rt.block_on(layered.clone().oneshot(request)).unwrap();
            std::hint::black_box(r);
        }
        return;
    }
    for _ in 0..4 {
        let t = Instant::now();
        for i in 0..n {
            let v = store
                .check_now(CheckRequest::new(&policies, &keys[i % 10_000], 1))
                .unwrap();
            std::hint::black_box(v);
        }
        println!(
            "store.check_now      {:>6} ns",
            t.elapsed().as_nanos() / n as u128
        );
        let t = Instant::now();
        for i in 0..n {
            let ip = limiter.identity().client_ip(peer, &headers[i % 10_000]);
            std::hint::black_box(limiter.identity().ip_key(ip));
        }
        println!(
            "identity + key       {:>6} ns",
            t.elapsed().as_nanos() / n as u128
        );
        let t = Instant::now();
        for i in 0..n {
            let d =
                rt.block_on(limiter.check(&Method::GET, "/api/items", &headers[i % 10_000], peer));
            std::hint::black_box(d);
        }
        println!(
            "limiter.check        {:>6} ns",
            t.elapsed().as_nanos() / n as u128
        );
        let d = rt
            .block_on(limiter.check(&Method::GET, "/api/items", &headers[0], peer))
            .unwrap();
        let t = Instant::now();
        for _ in 0..n {
            let mut h = HeaderMap::with_capacity(8);
            h.insert("content-type", http::HeaderValue::from_static("text/plain"));
            d.write_headers(&mut h);
            std::hint::black_box(h);
        }
        println!(
            "decision.write_headers {:>6} ns",
            t.elapsed().as_nanos() / n as u128
        );
        let t = Instant::now();
        for _ in 0..n {
            let mut h = HeaderMap::with_capacity(8);
            h.insert("content-type", http::HeaderValue::from_static("text/plain"));
            write_headers(&[HeaderSet::Draft6], d.verdict(), &mut h);
            std::hint::black_box(h);
        }
        println!(
            "draft6 only          {:>6} ns",
            t.elapsed().as_nanos() / n as u128
        );
        let t = Instant::now();
        for _ in 0..n {
            let mut h = HeaderMap::with_capacity(8);
            h.insert("content-type", http::HeaderValue::from_static("text/plain"));
            std::hint::black_box(h);
        }
        println!(
            "empty map            {:>6} ns",
            t.elapsed().as_nanos() / n as u128
        );
        for (name, router) in [("bare", bare.clone()), ("layer", layered.clone())] {
            let t = Instant::now();
            for i in 0..n {
                let mut request = Request::get("/api/items")
                    .extension(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))))
                    .body(Body::empty())
                    .unwrap();
                *request.headers_mut() = headers[i % 10_000].clone();
                let r = rt.block_on(router.clone().oneshot(request)).unwrap();
                std::hint::black_box(r);
            }
            println!(
                "oneshot {name:<12} {:>6} ns",
                t.elapsed().as_nanos() / n as u128
            );
        }
    }
}
