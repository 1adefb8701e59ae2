//! Sluicegate as Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService`
//! over gRPC (tonic, with the generated types of the `envoy-types` crate), answering from
//! any Sluicegate [`Store`](sluicegate_core::Store).
//!
//! Rules come in two forms, merged into one descriptor tree per domain:
//! - native rules in the Sluicegate TOML (`[[envoy.rules]]`), mapping a domain and
//!   descriptor entries to named Sluicegate policies of any algorithm;
//! - envoyproxy/ratelimit's YAML files, read as they are, each limit becoming a
//!   `fixed_window` policy (or the `[envoy] algorithm`).
//!
//! Every descriptor of a request is checked in one atomic store call
//! ([`Store::check_keyed`](sluicegate_core::Store::check_keyed)): a descriptor over its
//! limit consumes nothing from the others. Store failures answer gRPC `UNAVAILABLE`, so
//! Envoy's own `failure_mode_deny` decides between failing open and closed.
//!
//! This crate is not the server: the `sluicegate` binary mounts [`RateLimitService`] on
//! `[envoy] listen`, reloads [`SharedConfig`] and exports the metrics. See docs/envoy.md.
//!
//! ```
//! use std::sync::Arc;
//! use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor::Entry, RateLimitDescriptor};
//! use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
//! use sluicegate_core::MemoryStore;
//! use sluicegate_envoy::{EnvoyConfig, RateLimitService, SharedConfig};
//!
//! let yaml = "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
//! let config = SharedConfig::new(EnvoyConfig::from_yaml_str(yaml, None)?);
//! let service = RateLimitService::new(Arc::new(MemoryStore::new(10_000)), config);
//! let request = RateLimitRequest {
//!     domain: "api".into(),
//!     descriptors: vec![RateLimitDescriptor {
//!         entries: vec![Entry { key: "remote_address".into(), value: "10.0.0.1".into() }],
//!         ..Default::default()
//!     }],
//!     ..Default::default()
//! };
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! let first = runtime.block_on(service.decide(&request))?;
//! let second = runtime.block_on(service.decide(&request))?;
//! assert_eq!((first.overall_code, second.overall_code), (1, 2)); // OK, then OVER_LIMIT
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod compile;
pub mod config;
pub mod decide;
pub mod files;
pub mod headers;
pub mod key;
pub mod metrics;
mod server;
pub mod service;
pub mod tree;
pub mod yaml;

pub use config::{ConfigError, ConfigErrors, EnvoyConfig, EnvoySection, RuleSpec, SharedConfig};
pub use headers::HeaderSet;
pub use server::{KEEPALIVE_TIMEOUT, serve, serve_incoming};
pub use service::RateLimitService;

/// The generated Envoy types this crate speaks, re-exported for clients and tests.
pub use envoy_types;
