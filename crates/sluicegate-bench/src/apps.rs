//! The peers and the tower-layer apps.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use governor::{DefaultKeyedRateLimiter, Quota};
use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
use sluicegate_middleware::{HeaderSet, RateLimitLayer, RateLimiter, RouteSpec};
use tower::{Service, ServiceBuilder};

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
    layer_app().layer(RateLimitLayer::new(limiter(header_sets)))
}

/// [`limited_app`]'s limiter around the whole router (`RateLimitLayer::layer(router)`)
/// instead of through `Router::layer`: axum then wraps no route in a second boxed
/// service; the response body is boxed once, to axum's `Body`.
pub fn limited_service(
    header_sets: &[HeaderSet],
) -> impl Service<Request<Body>, Response = Response, Error = Infallible, Future: Send>
+ Clone
+ Send
+ Sync
+ 'static {
    ServiceBuilder::new()
        .map_response(IntoResponse::into_response)
        .layer(RateLimitLayer::new(limiter(header_sets)))
        // As `axum::serve` would: the handlers made routes once, not per request.
        .service(layer_app().with_state(()))
}

/// [`layer_app`] through `Router::layer` with a layer that does nothing (tower's
/// `Identity`): what axum charges for layering a route, whatever the layer.
pub fn identity_app() -> Router {
    layer_app().layer(tower::layer::util::Identity::new())
}

/// A minimal limiter, for context: governor's keyed GCRA (what tower-governor runs) in
/// axum's `from_fn` middleware, keyed by the last `X-Forwarded-For` address, sending no
/// rate-limit headers; the same limit as [`limited_app`].
pub fn governor_app() -> Router {
    let quota = Quota::per_minute(NonZeroU32::new(1_000_000_000).expect("not zero"));
    let limiter = Arc::new(governor::RateLimiter::keyed(quota));
    layer_app().layer(axum::middleware::from_fn_with_state(limiter, governed))
}

async fn governed(
    State(limiter): State<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let client = request
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|chain| chain.rsplit(',').next())
        .and_then(|last| last.trim().parse::<IpAddr>().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    match limiter.check_key(&client) {
        Ok(()) => next.run(request).await,
        Err(_) => StatusCode::TOO_MANY_REQUESTS.into_response(),
    }
}

fn limiter(header_sets: &[HeaderSet]) -> RateLimiter {
    let policy = Policy::builder(
        "api",
        AlgorithmKind::TokenBucket,
        1_000_000_000,
        Duration::from_secs(60),
    )
    .build()
    .expect("a valid policy");
    RateLimiter::builder(Arc::new(MemoryStore::new(1_000_000)))
        .policy(policy)
        .route(RouteSpec::new("/api", &["api"]))
        .trusted_proxies(vec!["127.0.0.1/32".parse().expect("a CIDR")])
        .headers(header_sets)
        .build()
        .expect("a valid limiter")
}
