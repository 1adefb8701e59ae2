//! Sluicegate as HTTP middleware: a tower [`RateLimitLayer`] for axum, hyper and tonic
//! services, and the [`RateLimiter`] engine behind it, which the `sluicegate` server's
//! forward-auth endpoint and reverse-proxy gateway use too.
//!
//! - [`route`]: which requests are limited ([`RouteSpec`] = a `[[routes]]` table; the
//!   longest path prefix wins; methods and exact header conditions select tiers).
//! - [`identity`]: the client IP behind trusted proxies ([`ClientIdentity`]) and the
//!   client key of a route (`ip`, `header:<name>`, `query:<name>`, `cookie:<name>`,
//!   `global`, composites joined by `+`, or your [`KeyExtractor`]).
//! - [`headers`]: the `draft-6`, `ietf` (Structured Fields) and `legacy` rate-limit
//!   headers, `Retry-After`, and the 429 JSON response.
//! - [`RateLimiter`]: route → key → store → `on_store_error` → observer → decision;
//!   delay mode waits without holding a thread and refunds a cancelled request's slot.
//! - [`settle`]: response-aware routes (`cost`, `settle`, `count`): the real cost of a
//!   request, set after its response.
//! - [`Pool`]: fair throttling (`[[pools]]`): a route's admitted requests wait for a slot
//!   shared by every client, by level shares and fair queuing per client key.
//! - [`MetricsObserver`]: `sluicegate_decisions_total{policy, outcome}`.
//!
//! It is not a store (see `sluicegate-core`'s `MemoryStore` and `sluicegate-redis`) and does
//! not parse configuration files: it takes the spec types the server's TOML deserialises to.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use axum::{Router, routing::get};
//! use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
//! use sluicegate_middleware::{RateLimitLayer, RateLimiter, RouteSpec};
//!
//! let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(100_000)))
//!     .policy(Policy::builder("auth", AlgorithmKind::TokenBucket, 10, Duration::from_secs(60)).build()?)
//!     .policy(Policy::builder("api", AlgorithmKind::TokenBucket, 100, Duration::from_secs(60)).build()?)
//!     .route(RouteSpec::new("/api/auth", &["auth"]))
//!     .route(RouteSpec::new("/api", &["api"]))
//!     .build()?;
//! let app: Router = Router::new()
//!     .route("/api/auth/login", get(|| async { "welcome" }))
//!     .layer(RateLimitLayer::new(limiter));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod access;
pub mod builder;
pub mod handle;
pub mod headers;
pub mod identity;
pub mod key;
pub mod layer;
pub mod lease;
pub mod limiter;
pub mod lookup;
pub mod metrics;
pub mod path;
pub mod pool;
pub mod route;
pub mod settle;

pub use access::{Access, AccessList};
pub use builder::{BuildError, RateLimiterBuilder};
pub use handle::LimiterHandle;
pub use headers::{HeaderSet, RejectionBody};
pub use identity::{ClientIdentity, ClientIpHeader, KeyContext, KeyExtractor, RouteKey};
pub use layer::{HeldBody, PeerAddr, RateLimitLayer, RateLimitService};
pub use lease::{LeaseBody, LeaseGuard};
pub use limiter::{CheckNow, RateLimitDecision, RateLimiter, TokioTimer, WaitQueue};
pub use lookup::{FieldLines, HeaderLookup};
pub use metrics::MetricsObserver;
pub use pool::{PermitBody, Pool, PoolBindError, PoolPermit, PoolRejected, PoolStatus};
pub use route::{
    KeySpec, Route, RouteError, RouteField, RouteFieldError, RoutePool, RouteSpec, RouteTable,
};
pub use settle::{AfterResponse, Count, SettleFrom, Settler, UsageTap};
