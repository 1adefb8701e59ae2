//! The `sluicegate` server: configuration, the HTTP decision API, forward-auth for
//! nginx/Traefik/Caddy, a rate-limiting reverse proxy (the gateway), Prometheus metrics and
//! hot reload, around the stores of `sluicegate-core` and `sluicegate-redis`.
//!
//! It is the product's process, not a library to embed: applications that want limiting
//! inside their own service use `sluicegate-middleware` directly.
//!
//! Map of the crate:
//! - [`cli`]: the command line (`serve`, `validate`, `simulate`);
//! - [`config`]: the TOML model and its validation (every error with line and column);
//! - [`state`]: the shared [`state::AppState`] and the swappable [`state::Runtime`];
//! - [`app`]: the axum router of the decision API; [`api`]: its handlers; [`front`]: the
//!   listener's front door, answering `POST /v1/check` without the router; [`h1`]: the
//!   lean HTTP/1.1 front that answers it without hyper, hyper taking any other request;
//! - [`forward_auth`], [`gateway`]: the two ways in for an existing proxy or none;
//! - [`serve`]: listeners, signals, graceful shutdown; [`reload`]: the config watcher;
//! - [`metrics`]: Prometheus; [`envoy`]: the Envoy rate limit service hook;
//! - [`snapshot`]: the memory store's state on disk (`store.snapshot`).

#![deny(missing_docs)]

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod conn;
pub mod dashboard;
pub mod envoy;
pub mod error;
pub mod forward_auth;
pub mod front;
pub mod gateway;
pub mod h1;
pub mod header_lines;
pub mod lane;
pub mod metrics;
pub mod reload;
pub mod serve;
pub mod simulate;
pub mod snapshot;
pub mod state;
pub mod store;
pub mod tls;
pub mod tunnel;
pub mod upstream;
