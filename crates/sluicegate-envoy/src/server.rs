//! Serving the rate limit service on a socket, with graceful shutdown.
//!
//! What a listener allows (how many connections, how long a silent one is kept) is the
//! embedding program's business: the `sluicegate` binary hands [`serve_incoming`] the
//! connections its own accept loop admits, under the same rule as its HTTP listeners.
//! [`serve`] is the plain tonic listener, for programs that bound connections elsewhere.

use std::future::Future;
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tonic::transport::server::{Connected, TcpIncoming};

use crate::service::RateLimitService;

/// How long an HTTP/2 PING may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Serves `service` over HTTP/2 (gRPC) on `listener` until `shutdown` completes, then
/// lets requests in flight finish. No bound on connections: see [`serve_incoming`].
///
/// ```no_run
/// # async fn run(service: sluicegate_envoy::RateLimitService) -> Result<(), Box<dyn std::error::Error>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
/// sluicegate_envoy::serve(listener, service, async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
pub async fn serve(
    listener: TcpListener,
    service: RateLimitService,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    serve_incoming(incoming, service, Duration::from_secs(60), shutdown).await
}

/// Serves `service` on the connections `incoming` yields (the caller's accept loop, with
/// its own connection bound and first-bytes deadline), sending an HTTP/2 PING every
/// `keepalive_interval` on a quiet connection and dropping a peer that leaves one
/// unanswered for [`KEEPALIVE_TIMEOUT`] (a vanished Envoy, a half-open socket).
pub async fn serve_incoming<I, IO, IE>(
    incoming: I,
    service: RateLimitService,
    keepalive_interval: Duration,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error>
where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(keepalive_interval))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
