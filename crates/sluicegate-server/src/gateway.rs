//! The gateway: a streaming reverse proxy that rate-limits `routes` and forwards the rest.

use tokio::net::TcpListener;

use crate::state::AppState;

/// Serves the gateway on `listener` until `shutdown` resolves.
pub async fn run(
    _listener: TcpListener,
    _state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    shutdown.await;
    Ok(())
}
