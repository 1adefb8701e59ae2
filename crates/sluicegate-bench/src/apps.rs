//! The peers and the tower-layer apps.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
use sluicegate_middleware::{HeaderSet, RateLimitLayer, RateLimiter, RouteSpec};

/// What `POST /v1/check` answers for an admitted request under the benchmarks' policy
/// (`bench`, limit 10^9): the bare peer sends it without deciding anything.
pub const ANSWER: &str = r#"{"allowed":true,"policy":"bench","limit":1000000000,"remaining":999999999,"reset_after_ms":1,"retry_after_ms":null}"#;

async fn bare_check(_body: Bytes) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], ANSWER)
}

/// The bare decision endpoint: `POST /v1/check` reads the body and answers [`ANSWER`]. The
/// ceiling of HTTP with axum on this machine, the peer of sluicegate's decision API.
pub fn bare_check_router() -> Router {
    Router::new().route("/v1/check", post(bare_check))
}

async fn ok() -> &'static str {
    "ok"
}

/// A tiny upstream answering `ok` to everything, for the gateway and nginx to proxy to.
pub fn upstream_router() -> Router {
    Router::new().fallback(ok)
}

/// The minimal application the layer is measured on: `GET /api/items` answers `ok`.
pub fn layer_app() -> Router {
    Router::new().route("/api/items", get(ok))
}

/// [`layer_app`] behind the rate-limit layer: in-memory store, one token-bucket policy on
/// `/api` keyed by client IP, `127.0.0.1` trusted (so a varying `X-Forwarded-For` makes
/// many client keys), `header_sets` on responses. The limit (10^9 a minute) admits every
/// request: the measured path is the full one (decision, consumption, headers).
pub fn limited_app(header_sets: &[HeaderSet]) -> Router {
    let policy = Policy::builder(
        "api",
        AlgorithmKind::TokenBucket,
        1_000_000_000,
        Duration::from_secs(60),
    )
    .build()
    .expect("a valid policy");
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1_000_000)))
        .policy(policy)
        .route(RouteSpec::new("/api", &["api"]))
        .trusted_proxies(vec!["127.0.0.1/32".parse().expect("a CIDR")])
        .headers(header_sets)
        .build()
        .expect("a valid limiter");
    layer_app().layer(RateLimitLayer::new(limiter))
}
