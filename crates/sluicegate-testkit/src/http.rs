//! Real HTTP over loopback: serving a router (optionally behind the rate-limit layer) and
//! sending requests in sequence.

#[cfg(feature = "http")]
use std::net::SocketAddr;
#[cfg(feature = "middleware")]
use std::sync::{Arc, Mutex};
#[cfg(feature = "middleware")]
use std::time::Instant;

#[cfg(feature = "http")]
/// Serves `app` on 127.0.0.1 without peer addresses (no `ConnectInfo`); returns
/// `http://<addr>`.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{addr}")
}

#[cfg(feature = "http")]
/// Serves `app` on `bind` (e.g. "127.0.0.1:0", "[::1]:0") with each connection's peer
/// address as `ConnectInfo<SocketAddr>`; returns the address.
pub async fn serve_with_peers(app: axum::Router, bind: &str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve")
    });
    addr
}

/// When the handler behind the limiter ran, one instant a call.
#[cfg(feature = "middleware")]
pub type Calls = Arc<Mutex<Vec<Instant>>>;

#[cfg(feature = "middleware")]
/// Serves every path with 200 "ok" behind `limiter`, on `bind`, with peer addresses.
/// Returns the address and the instants at which the handler ran.
pub async fn serve_limited_on(
    limiter: sluicegate_middleware::RateLimiter,
    bind: &str,
) -> (SocketAddr, Calls) {
    use axum::routing::any;
    let calls = Calls::default();
    let seen = Arc::clone(&calls);
    let app = axum::Router::new()
        .fallback(any(move || {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(Instant::now());
                "ok"
            }
        }))
        .layer(sluicegate_middleware::RateLimitLayer::new(limiter));
    (serve_with_peers(app, bind).await, calls)
}

#[cfg(feature = "middleware")]
/// [`serve_limited_on`] 127.0.0.1; returns `http://<addr>`.
pub async fn serve_limited(limiter: sluicegate_middleware::RateLimiter) -> String {
    let (addr, _) = serve_limited_on(limiter, "127.0.0.1:0").await;
    format!("http://{addr}")
}

/// Sends `n` GETs to `url` one after another; returns the statuses.
pub async fn statuses(client: &reqwest::Client, url: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let response = client.get(url).send().await.expect("GET");
        out.push(response.status().as_u16());
    }
    out
}

/// How many of `statuses` are 200.
pub fn ok_count(statuses: &[u16]) -> usize {
    statuses.iter().filter(|s| **s == 200).count()
}
