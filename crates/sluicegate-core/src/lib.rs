//! Sluicegate's core: the six rate-limiting algorithms as pure state transitions, the
//! [`Policy`] and [`Decision`] types, the all-or-nothing [`Verdict`] over several policies,
//! the [`Store`] trait, and the bounded in-memory [`MemoryStore`].
//!
//! It is not a server and does no I/O: no sockets, no runtime, no clock reads outside
//! [`clock`]. Redis, HTTP and gRPC live in the other `sluicegate-*` crates.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
//!
//! let login = Arc::new(
//!     Policy::builder("login", AlgorithmKind::Gcra, 10, Duration::from_secs(60)).build()?,
//! );
//! let store = MemoryStore::new(100_000);
//! let policies = [login];
//! let verdict = store.check_now(CheckRequest::new(&policies, "203.0.113.7", 1))?;
//! assert!(verdict.allowed);
//! assert_eq!(verdict.decisions[0].decision.remaining, 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod algorithm;
pub mod calendar;
pub mod clock;
pub mod decide;
pub mod decision;
pub mod memory;
pub mod overrides;
pub mod penalty;
pub mod policy;
pub mod render;
pub mod spec;
pub mod store;
pub mod verdict;

pub use clock::{Clock, ManualClock, Micros, SystemClock};
pub use decide::{Decided, Decider, Timer};
pub use decision::Decision;
pub use memory::MemoryStore;
pub use overrides::{Override, OverrideSpec};
pub use policy::{AlgorithmKind, CountingKey, MAX_PERIOD, Mode, OnStoreError, Policy, PolicyError};
pub use spec::PolicySpec;
pub use store::{
    BoxFuture, CheckRequest, KeyedCheck, Lease, Settled, Settlement, Store, StoreError,
};
pub use verdict::{
    Decisions, DecisionsOf, NoObserver, Outcome, PolicyArc, PolicyDecision, PolicyDecisionOf,
    Verdict, VerdictObserver, VerdictOf,
};
