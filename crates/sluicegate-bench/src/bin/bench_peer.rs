//! Peers for the server's load tests (`scripts/bench-http.sh`, `scripts/bench-gateway.sh`):
//!
//! - `bench_peer bare ADDR`: a bare axum handler on `POST /v1/check` that reads the body
//!   and answers the same JSON as sluicegate's decision API, deciding nothing: the ceiling
//!   of HTTP on this machine.
//! - `bench_peer upstream ADDR`: a tiny HTTP upstream answering `ok` to everything, for
//!   the gateway and nginx to proxy to.
//! - `bench_peer proxy ADDR UPSTREAM`: a bare hyper reverse proxy, hyper's HTTP/1 server
//!   and `hyper_util`'s pooled client passing every request to `UPSTREAM` (`host:port`)
//!   and its answer back, doing nothing else: the floor of a proxy built on hyper, beside
//!   the gateway and nginx in `scripts/bench-gateway.sh`. Same worker model as the
//!   gateway: one single-threaded runtime per core, each on its own `SO_REUSEPORT`
//!   socket with its own upstream pool.
//!
//! `bare` and `upstream` run on a Tokio runtime with `THREADS` worker threads (default:
//! all cores); `proxy` on `THREADS` single-threaded workers.

use std::net::SocketAddr;

use axum::http::Uri;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluicegate_bench::apps::{bare_check_router, upstream_router};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// `bench_peer proxy`: one thread per worker, each a single-threaded runtime accepting on
/// its own `SO_REUSEPORT` socket (the gateway's model).
fn proxy(addr: &str, upstream: String) -> Result<(), Error> {
    let addr: SocketAddr = addr.parse()?;
    let workers = std::env::var("THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut threads = Vec::new();
    for _ in 0..workers {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseport(true)?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let upstream = upstream.clone();
        threads.push(std::thread::spawn(move || -> Result<(), Error> {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(proxy_worker(socket, upstream))
        }));
    }
    println!("proxy listening on {addr}");
    for thread in threads {
        thread.join().map_err(|_| "a worker panicked")??;
    }
    Ok(())
}

async fn proxy_worker(socket: tokio::net::TcpSocket, upstream: String) -> Result<(), Error> {
    let listener = socket.listen(1024)?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build(connector);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (client, upstream) = (client.clone(), upstream.clone());
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
            // A path that makes no URI is sent as it is, and the client refuses it.
            if let Ok(uri) = Uri::try_from(format!("http://{upstream}{path}")) {
                *request.uri_mut() = uri;
            }
            client.request(request)
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let (mode, addr) = match (args.next(), args.next()) {
        (Some(mode), Some(addr)) => (mode, addr),
        _ => return Err("usage: bench_peer bare|upstream ADDR | proxy ADDR UPSTREAM".into()),
    };
    if mode == "proxy" {
        let upstream = args.next().ok_or("usage: bench_peer proxy ADDR UPSTREAM")?;
        return proxy(&addr, upstream);
    }
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
