//! Peers for the server's load tests (`crates/sluicegate-server/benches/loadtest.sh`):
//!
//! - `bench_peer bare ADDR`: a bare axum handler on `POST /v1/check` that reads the body
//!   and answers the same JSON as sluicegate's decision API, deciding nothing: the ceiling
//!   of HTTP on this machine.
//! - `bench_peer upstream ADDR`: a tiny HTTP upstream answering `ok` to everything, for
//!   the gateway and nginx to proxy to.
//!
//! Both run on a Tokio runtime with `THREADS` worker threads (default: all cores).

use sluicegate_bench::apps::{bare_check_router, upstream_router};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mode, addr) = match (args.next(), args.next()) {
        (Some(mode), Some(addr)) => (mode, addr),
        _ => return Err("usage: bench_peer bare|upstream ADDR".into()),
    };
    let app = match mode.as_str() {
        "bare" => bare_check_router(),
        "upstream" => upstream_router(),
        _ => return Err(format!("unknown mode {mode}").into()),
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = std::env::var("THREADS").ok().and_then(|t| t.parse().ok()) {
        builder.worker_threads(threads);
    }
    builder.enable_all().build()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("{mode} listening on {}", listener.local_addr()?);
        axum::serve(listener, app).await
    })?;
    Ok(())
}
