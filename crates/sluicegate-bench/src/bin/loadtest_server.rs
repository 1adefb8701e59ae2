//! The load-test target: the same minimal axum app twice, in one process and one runtime,
//! without the layer and with it, each on a free loopback port, printed on the first
//! line of stdout as `bare=ADDR limited=ADDR`. Driven by
//! `crates/sluicegate-middleware/benches/loadtest.sh` with wrk.
//!
//! The limited app: in-memory store, one token-bucket policy on `/api` keyed by client
//! IP, 127.0.0.1 trusted so wrk's varying `X-Forwarded-For` makes 10 000 client keys,
//! `draft-6` and `ietf` headers. The limit is high enough that every request is admitted:
//! the measured path is the full one (decision, consumption, headers). A third port serves
//! the app behind a minimal governor middleware (no headers), as context.

use std::net::SocketAddr;

use axum::Router;
use sluicegate_bench::apps::{governor_app, layer_app, limited_app};
use sluicegate_middleware::HeaderSet;

async fn serve(app: Router, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let threads: usize = std::env::var("THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    // HEADERS=none measures the layer without rate-limit headers on admitted responses.
    let header_sets = match std::env::var("HEADERS").as_deref() {
        Ok("none") => Vec::new(),
        _ => HeaderSet::DEFAULT.to_vec(),
    };
    runtime.block_on(async move {
        let bare = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let limited_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        // For context: a minimal limiter (governor, no headers) on the same app.
        let governor = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!(
            "bare={} limited={} governor={}",
            bare.local_addr()?,
            limited_listener.local_addr()?,
            governor.local_addr()?
        );
        let limited = limited_app(&header_sets);
        let (a, b, c) = tokio::join!(
            serve(layer_app(), bare),
            serve(limited, limited_listener),
            serve(governor_app(), governor)
        );
        a.and(b).and(c)
    })?;
    Ok(())
}
