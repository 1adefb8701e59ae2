//! The classic layout, per client IP: `/api/auth` 10 a minute, `/api/search` 30 a minute,
//! everything else under `/api` 100 a minute. `/` and `/healthz` are not limited.
//!
//! ```text
//! cargo run -p sluicegate-middleware --example classic          # listens on 127.0.0.1:3000
//! for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' -X POST localhost:3000/api/auth/login; done
//! curl -i localhost:3000/api/search?q=rust
//! ```
//!
//! Set `LISTEN` to change the address. Behind a reverse proxy on this machine, add its
//! address to `trusted_proxies` so `X-Forwarded-For` is believed (from it only).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
use sluicegate_middleware::{HeaderSet, MetricsObserver, RateLimitLayer, RateLimiter, RouteSpec};

fn per_minute(name: &str, limit: u64) -> Result<Policy, sluicegate_core::PolicyError> {
    Policy::builder(
        name,
        AlgorithmKind::TokenBucket,
        limit,
        Duration::from_secs(60),
    )
    .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1_000_000)))
        .policy(per_minute("auth", 10)?)
        .policy(per_minute("search", 30)?)
        .policy(per_minute("api", 100)?)
        .route(RouteSpec::new("/api/auth", &["auth"]))
        .route(RouteSpec::new("/api/search", &["search"]))
        .route(RouteSpec::new("/api", &["api"]))
        .trusted_proxies(vec!["127.0.0.1/32".parse()?, "::1/128".parse()?])
        .headers(&[HeaderSet::Draft6, HeaderSet::Ietf])
        .observer(Arc::new(MetricsObserver))
        .build()?;

    let app = Router::new()
        .route("/", get(|| async { "Sluicegate classic example\n" }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/auth/login", post(|| async { "logged in\n" }))
        .route("/api/search", get(|| async { "results\n" }))
        .route("/api/items", get(|| async { "[]\n" }))
        .layer(RateLimitLayer::new(limiter));

    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The connect info gives the layer each client's address.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
