//! In-process cost of the layer: one request through a minimal axum app with and without
//! `RateLimitLayer`, side by side (no sockets; the HTTP load test is in
//! `examples/loadtest.rs`). The layer runs with the in-memory store, 10 000 client IPs
//! behind a trusted proxy (varying `X-Forwarded-For`), and the `draft-6` + `ietf` headers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
use sluicegate_middleware::{RateLimitLayer, RateLimiter, RouteSpec};
use tower::ServiceExt;

const CLIENTS: usize = 10_000;

fn app() -> Router {
    Router::new().route("/api/items", get(|| async { "ok" }))
}

fn limited() -> Router {
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1_000_000)))
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
        .unwrap();
    app().layer(RateLimitLayer::new(limiter))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ips: Vec<String> = (0..CLIENTS)
        .map(|i| format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256))
        .collect();
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000)));
    let mut group = c.benchmark_group("request");
    for (name, router) in [("bare", app()), ("with_layer", limited())] {
        let mut i = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % CLIENTS;
                let request = Request::get("/api/items")
                    .header("x-forwarded-for", &ips[i])
                    .extension(peer)
                    .body(Body::empty())
                    .unwrap();
                let response = rt.block_on(router.clone().oneshot(request)).unwrap();
                assert_eq!(response.status(), 200);
                response
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
