//! Serving the rate limit service on a socket, with graceful shutdown.

use std::future::Future;

use tokio::net::TcpListener;

use crate::listener::{KEEPALIVE_TIMEOUT, ListenerLimits, incoming};
use crate::service::RateLimitService;

/// Serves `service` over HTTP/2 (gRPC) on `listener` until `shutdown` completes, then
/// lets requests in flight finish.
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
    serve_with_limits(listener, service, ListenerLimits::default(), shutdown).await
}

/// [`serve`] within `limits`: at most `max_connections` at once, each closed if it sends
/// nothing within `first_bytes_timeout`, HTTP/2 PINGs on quiet connections (see
/// [`crate::listener`]).
pub async fn serve_with_limits(
    listener: TcpListener,
    service: RateLimitService,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_keepalive(Some(limits.keepalive_interval))
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming(listener, limits), shutdown)
        .await
}
