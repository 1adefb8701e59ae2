//! What one gRPC listener allows: a bound on connections held at once, a deadline for a new
//! connection's first bytes (its HTTP/2 preface), and HTTP/2 keepalive, so that a peer
//! that connects and says nothing, or vanishes, cannot hold a file descriptor for ever.
//!
//! tonic has no connection cap or header timeout of its own; both are here, in the stream
//! of accepted connections handed to it: a permit is taken *before* `accept` (beyond the
//! bound, new connections wait in the kernel's backlog and cost nothing), released when
//! the connection closes; and a connection that has not sent a byte by the deadline fails
//! its next read, which makes the HTTP/2 server drop it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The limits of one gRPC listener (from the server's `[server]` connection settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections served at once; beyond, new ones wait in the backlog.
    pub max_connections: usize,
    /// A connection that has sent nothing by then is closed (slowloris on HTTP/2: the
    /// preface never comes).
    pub first_bytes_timeout: Duration,
    /// HTTP/2 PING interval on a quiet connection; a peer that does not answer within
    /// [`KEEPALIVE_TIMEOUT`] is dropped (a vanished Envoy, a half-open socket).
    pub keepalive_interval: Duration,
}

/// How long a PING may go unanswered.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: 10_000,
            first_bytes_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(60),
        }
    }
}

/// An accepted connection: holds its permit until it closes, and fails a read once the
/// first-bytes deadline passes with nothing read.
pub struct LimitedStream {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    first_bytes: Option<Pin<Box<Sleep>>>,
}

impl Connected for LimitedStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.first_bytes = None; // it spoke: from now on HTTP/2 keepalive watches it
            return polled;
        }
        if let Poll::Pending = polled
            && let Some(deadline) = self.first_bytes.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request within the first-bytes deadline",
            )));
        }
        polled
    }
}

impl AsyncWrite for LimitedStream {
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

/// The accepted connections of `listener` within `limits`, for tonic's
/// `serve_with_incoming_shutdown`. An accept error (e.g. out of file descriptors) is logged
/// and retried after a short pause instead of ending the listener.
pub fn incoming(
    listener: TcpListener,
    limits: ListenerLimits,
) -> impl Stream<Item = io::Result<LimitedStream>> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    futures_util::stream::unfold((listener, permits), move |(listener, permits)| async move {
        let permit = Arc::clone(&permits).acquire_owned().await.ok()?;
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let stream = LimitedStream {
                        inner: stream,
                        _permit: permit,
                        first_bytes: Some(Box::pin(tokio::time::sleep(limits.first_bytes_timeout))),
                    };
                    return Some((Ok(stream), (listener, permits)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "envoy listener: accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}
