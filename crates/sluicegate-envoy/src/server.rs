//! Serving the rate limit service on a socket, with graceful shutdown.

use std::future::Future;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

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
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
