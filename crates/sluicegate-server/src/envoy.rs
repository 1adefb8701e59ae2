//! The Envoy rate limit service (`envoy.service.ratelimit.v3`), wired in by `sluicegate-envoy`.

use std::net::SocketAddr;

use crate::config::EnvoyConfig;
use crate::state::AppState;

/// Runs the Envoy gRPC service until `shutdown` resolves.
pub async fn run(
    addr: SocketAddr,
    _config: EnvoyConfig,
    _state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    tracing::warn!(%addr, "the Envoy rate limit service is not built into this binary yet");
    shutdown.await;
    Ok(())
}
