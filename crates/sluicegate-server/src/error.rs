//! [`ServerError`]: why the server cannot start, stopped, or refused a configuration.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::Diagnostics;

/// Why the server cannot start, stopped on its own, or refused a new configuration. The
/// messages are the ones `sluicegate serve` prints.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration file cannot be read.
    #[error("{}: error: cannot read it: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration is invalid: every error with its line and column.
    #[error("{0}")]
    Config(#[from] Diagnostics),
    /// The command-line flags do not make a configuration.
    #[error("{0}")]
    Flags(&'static str),
    /// `[store] backend = "redis"` without `url` or `cluster`.
    #[error("[store] backend = \"redis\" needs url or cluster")]
    RedisWithoutUrl,
    /// A policy the Redis store cannot decide exactly (after `--redis` switched to it).
    #[error("{0}")]
    OutOfRange(sluicegate_redis::RedisStoreError),
    /// The Redis store cannot be set up (a Redis that is merely down is not an error).
    #[error("Redis store: {0}")]
    Redis(#[from] sluicegate_redis::RedisStoreError),
    /// A route of the configuration is invalid.
    #[error("{0}")]
    Route(#[from] sluicegate_middleware::RouteError),
    /// A route names a pool the limiter cannot bind.
    #[error("{0}")]
    Pool(#[from] sluicegate_middleware::PoolBindError),
    /// The `[envoy]` rules do not compile.
    #[error("[envoy]: {0}")]
    Envoy(#[from] sluicegate_envoy::ConfigErrors),
    /// A listener cannot bind its address.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Which listener: `API`, `gateway`, `envoy`.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// Setting up a listener's socket, thread or runtime failed.
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A listener's worker thread failed.
    #[error("{0}")]
    Worker(&'static str),
    /// The Envoy gRPC service failed.
    #[error("envoy service: {0}")]
    EnvoyService(String),
    /// A listener ended while the server was running.
    #[error("a listener stopped unexpectedly")]
    ListenerStopped,
    /// A listener's task panicked.
    #[error("a listener panicked: {0}")]
    ListenerPanicked(String),
}
