//! The in-process cost of a pool (`[[pools]]`) through the tower layer, for instruction
//! counts under callgrind (repeatable on a loaded machine, unlike wall time):
//!
//! `pool_cost MODE N`: N requests, one after another, through `RateLimitLayer` in front of
//! an inner service that answers at once, MODE `nopool` (the route has no pool) or `pool`
//! (the same route in a fixed pool of 64 slots, never full: the cost of taking and freeing
//! a slot). Each response body is read to its end, which is where the slot is freed.
//! `crates/sluicegate-server/benches/pools.sh` runs it under callgrind at two N and
//! divides the difference, so start-up costs cancel out.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use http_body_util::BodyExt;
use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
use sluicegate_middleware::{Pool, RateLimitLayer, RateLimiter, RouteSpec};
use sluicegate_throttle::PoolSpec;
use tower::{Layer, ServiceExt};

fn limiter(pool: bool) -> RateLimiter {
    let policy = Policy::builder(
        "api",
        AlgorithmKind::TokenBucket,
        1_000_000_000,
        Duration::from_secs(60),
    )
    .build()
    .expect("valid policy");
    let route = RouteSpec::new("/api", &["api"]);
    let builder = RateLimiter::builder(Arc::new(MemoryStore::new(1_000_000))).policy(policy);
    let builder = if pool {
        let spec = PoolSpec::fixed("backend", 64)
            .validate()
            .expect("valid pool");
        builder
            .route(route.pool("backend", None))
            .pool(Pool::new(spec))
    } else {
        builder.route(route)
    };
    builder.build().expect("valid limiter")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let pool = match mode.as_str() {
        "pool" => true,
        "nopool" => false,
        _ => {
            eprintln!("usage: pool_cost pool|nopool N");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let inner = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::from("ok")))
    });
    let service = RateLimitLayer::new(limiter(pool)).layer(inner);
    let peer = ConnectInfo(SocketAddr::from(([10, 0, 0, 1], 40000)));
    rt.block_on(async {
        for _ in 0..n {
            let request = Request::get("/api/items")
                .extension(peer)
                .body(Body::empty())
                .expect("request");
            let response = service.clone().oneshot(request).await.expect("infallible");
            assert_eq!(response.status(), 200);
            let body = response.into_body().collect().await.expect("body");
            assert_eq!(body.to_bytes().len(), 2);
        }
    });
}
