//! The Envoy rate limit service (`envoy.service.ratelimit.v3`) on `[envoy] listen`: the
//! service itself is `sluicegate_envoy::RateLimitService`; this module binds it, compiles
//! the `[envoy]` rules, and recompiles them when the TOML (after a reload) or the YAML
//! files change.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use sluicegate_envoy::config::fingerprint;
use sluicegate_envoy::{EnvoyConfig as Compiled, RateLimitService};

use crate::config::EnvoyConfig;
use crate::state::AppState;

/// How often the YAML files and the running `[envoy]` section are checked for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Compiles the running configuration's `[envoy]` section.
fn compile(state: &AppState) -> Result<(Compiled, u64), String> {
    let runtime = state.runtime();
    let section = runtime.config.envoy.clone().unwrap_or_default();
    let policies = &runtime.config.policies;
    let print = fingerprint(&section, policies, Path::new(""));
    Compiled::load(&section, policies, Path::new(""))
        .map(|compiled| (compiled, print))
        .map_err(|errors| errors.to_string())
}

/// Runs the Envoy gRPC service until `shutdown` resolves.
pub async fn run(
    addr: SocketAddr,
    _config: EnvoyConfig,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let (compiled, mut last) = compile(&state).map_err(|e| format!("[envoy]: {e}"))?;
    for (domain, rules) in compiled.summary() {
        println!("  envoy domain {domain}: {rules} rule(s)");
    }
    state.envoy.replace(compiled);
    state.prune();

    let service = RateLimitService::new(std::sync::Arc::clone(&state.store), state.envoy.clone())
        .with_headers(state.runtime().header_sets.clone())
        .with_decider(state.decider.clone());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} (envoy): {e}"))?;

    let watcher = tokio::spawn({
        let state = state.clone();
        async move {
            let mut tick = tokio::time::interval(RELOAD_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let runtime = state.runtime();
                let section = runtime.config.envoy.clone().unwrap_or_default();
                let print = fingerprint(&section, &runtime.config.policies, Path::new(""));
                if print == last {
                    continue;
                }
                last = print;
                match compile(&state) {
                    Ok((compiled, _)) => {
                        state.envoy.replace(compiled);
                        state.prune();
                        tracing::info!("[envoy] rules reloaded");
                    }
                    Err(errors) => {
                        for line in errors.lines() {
                            tracing::error!("{line}");
                        }
                        tracing::error!("[envoy] rules not reloaded; the running rules stay");
                    }
                }
            }
        }
    });
    let result = sluicegate_envoy::serve(listener, service, shutdown)
        .await
        .map_err(|e| format!("envoy service: {e}"));
    watcher.abort();
    result
}
