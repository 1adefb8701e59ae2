//! Sluicegate's Redis store: [`RedisStore`], a [`sluicegate_core::Store`] that keeps limiter
//! state in Redis or Redis Cluster so many gateway or service instances share one set of
//! limits.
//!
//! - **Atomic, one round trip.** Every algorithm of the core is a Lua script (one `.lua` file
//!   each); they are built into one entry script that decides a request under any number of
//!   policies all-or-nothing (the core's [`Verdict::combine`](sluicegate_core::Verdict::combine)
//!   rule) in one `EVALSHA`; a batch goes in one call too, and on a standalone server
//!   concurrent single decisions are coalesced into shared calls (see [`MAX_IN_FLIGHT`]).
//! - **Same decisions as the in-memory store.** Same integer-microsecond arithmetic, exact
//!   within a documented range ([`check_policy`], [`EXACT_BOUND`]).
//! - **The Redis server's clock** (`TIME` inside the script), never the caller's.
//! - **Every key has a TTL**, set on every write to when its state is idle again.
//! - **Redis Cluster**: all keys of one client key share a hash slot ([`state_key`]).
//! - **Bounded failure**: each call is bounded by the configured timeout; a circuit breaker
//!   fails fast while Redis is down, and a background probe brings it back within
//!   [`PROBE_INTERVAL`] of Redis answering. The store reports errors; callers apply the
//!   policy's `on_store_error`.
//!
//! For fleets past what one Redis core decides exactly, [`SyncedStore`] (`store.sync`)
//! decides locally and exchanges window counts with Redis every interval, with a bounded
//! over-admission (see its module documentation and docs/redis.md).
//!
//! [`RedisStore`] is not a cache in front of another store, and it does not decide what happens when
//! Redis fails: that is the caller's `on_store_error`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{sync::Arc, time::Duration};
//! use sluicegate_core::{AlgorithmKind, CheckRequest, Policy, Store};
//! use sluicegate_redis::{RedisConfig, RedisStore};
//!
//! let store = RedisStore::connect(RedisConfig::standalone("redis://127.0.0.1:6379/0")).await?;
//! let policies = [Arc::new(
//!     Policy::builder("login", AlgorithmKind::Gcra, 10, Duration::from_secs(60)).build()?,
//! )];
//! let verdict = store.check(CheckRequest::new(&policies, "203.0.113.7", 1)).await?;
//! println!("allowed: {}", verdict.allowed);
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod breaker;
mod cache;
mod coalesce;
mod config;
mod conn;
mod keys;
mod link;
mod overrides;
mod range;
mod script;
mod store;
mod synced;

pub use cache::LOCAL_CACHE_CAPACITY;
pub use coalesce::MAX_IN_FLIGHT;
pub use config::{RedisConfig, RedisStoreError};
pub use keys::{override_key, placed_override_key, placed_state_key, state_key};
pub use link::OUTAGE_REPLIES;
pub use range::{EXACT_BOUND, check_policy};
pub use store::{BATCH_CHUNK, METRIC_DURATION, METRIC_ERRORS, PROBE_INTERVAL, RedisStore};
pub use synced::{
    METRIC_SYNC, METRIC_SYNC_DROPPED, SYNC_MAX, SYNC_MIN, SyncOptions, SyncedStore, check_synced,
};
