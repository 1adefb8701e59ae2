//! The Envoy rate limit service (`envoy.service.ratelimit.v3`) on `[envoy] listen`: the
//! service itself is `sluicegate_envoy::RateLimitService`; this module binds it. Its rules
//! are compiled by [`AppState::reload_envoy`] at start and recompiled by the one reload
//! watcher (`crate::reload`) when the TOML or a YAML file changes.
//!
//! tonic has no connection cap or header deadline of its own, so its connections come from
//! the server's one accept rule ([`conn::accept`]: `max_connections`, a permit taken before
//! `accept`), and a connection that has not sent a byte (its HTTP/2 preface) within
//! `header_read_timeout` fails its next read, which makes the HTTP/2 server drop it. After
//! that, HTTP/2 PINGs every `idle_timeout` watch it (Envoy keeps its connections open on
//! purpose, so idleness alone does not close one).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use sluicegate_envoy::RateLimitService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::conn;
use crate::error::ServerError;
use crate::state::AppState;

/// Runs the Envoy gRPC service on `listener` until `shutdown` resolves. The caller binds
/// the listener before it prints `ready`, so a client that connects on `ready` is never
/// refused (binding here, in the spawned task, raced with the first connection).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    for (domain, rules) in state.envoy.get().summary() {
        println!("  envoy domain {domain}: {rules} rule(s)");
    }
    let service = RateLimitService::new(Arc::clone(&state.store), state.envoy.clone())
        .with_headers(state.runtime().header_sets.clone())
        .with_decider(state.decider.clone());
    let limits = state.runtime().config.server.connections;
    let incoming = incoming(listener, conn::permits(&limits), limits.header_read_timeout);
    sluicegate_envoy::serve_incoming(incoming, service, limits.idle_timeout, shutdown)
        .await
        .map_err(|e| ServerError::EnvoyService(e.to_string()))
}

/// The connections `listener` accepts within `permits`, each with its first-bytes deadline.
fn incoming(
    listener: TcpListener,
    permits: Arc<Semaphore>,
    first_bytes: Duration,
) -> impl Stream<Item = io::Result<Silent>> {
    futures_util::stream::unfold((listener, permits), move |(listener, permits)| async move {
        let (stream, _, permit) = conn::accept(&listener, &permits).await?;
        let stream = Silent {
            inner: stream,
            _permit: permit,
            deadline: Some(Box::pin(tokio::time::sleep(first_bytes))),
        };
        Some((Ok(stream), (listener, permits)))
    })
}

/// An accepted connection that has maybe not spoken yet: holds its permit until it closes,
/// and fails a read once `deadline` passes with nothing read.
struct Silent {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Connected for Silent {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for Silent {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.deadline = None; // it spoke: from now on HTTP/2 keepalive watches it
            return polled;
        }
        if let Poll::Pending = polled
            && let Some(deadline) = self.deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request within the header deadline",
            )));
        }
        polled
    }
}

impl AsyncWrite for Silent {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
