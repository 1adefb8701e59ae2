//! The Envoy rate limit service (`envoy.service.ratelimit.v3`) on `[envoy] listen`: the
//! service itself is `sluicegate_envoy::RateLimitService`; this module binds it. Its rules
//! are compiled by [`AppState::reload_envoy`] at start and recompiled by the one reload
//! watcher (`crate::reload`) when the TOML or a YAML file changes.

use std::net::SocketAddr;

use sluicegate_envoy::RateLimitService;

use crate::error::ServerError;
use crate::state::AppState;

/// Runs the Envoy gRPC service until `shutdown` resolves.
pub async fn run(
    addr: SocketAddr,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    for (domain, rules) in state.envoy.get().summary() {
        println!("  envoy domain {domain}: {rules} rule(s)");
    }
    let service = RateLimitService::new(std::sync::Arc::clone(&state.store), state.envoy.clone())
        .with_headers(state.runtime().header_sets.clone())
        .with_decider(state.decider.clone());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Listen {
            addr,
            what: "envoy",
            source,
        })?;
    // The API's and gateway's connection limits hold here too (tonic has none of its own).
    let connections = state.runtime().config.server.connections;
    let limits = sluicegate_envoy::ListenerLimits {
        max_connections: connections.max_connections,
        first_bytes_timeout: connections.header_read_timeout,
        keepalive_interval: connections.idle_timeout,
    };
    sluicegate_envoy::serve_with_limits(listener, service, limits, shutdown)
        .await
        .map_err(|e| ServerError::EnvoyService(e.to_string()))
}
