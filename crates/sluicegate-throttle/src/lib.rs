//! Fair throttling for Sluicegate's `[[pools]]`: the pure decision part.
//!
//! A pool has `concurrency` slots shared by every client, a bounded queue, a longest wait,
//! and priority levels with shares. This crate decides **who gets the next slot**; it does
//! no I/O and reads no clock: every call takes the current time in microseconds, so the
//! same code runs under a real clock (the middleware's async pool) and on a virtual one
//! (property tests, the simulator).
//!
//! - [`Scheduler`]: arrivals, releases, withdrawals (timeout, client gone); levels by
//!   shares with lending; within a level, start-time fair queuing across flows, weighted.
//! - [`AdaptiveLimit`]: `concurrency = "adaptive"`, a gradient rule on measured round-trip
//!   time against its observed floor.
//! - [`PoolSpec`]: a `[[pools]]` table, validated.
//!
//! ```
//! use sluicegate_throttle::{Arrival, PoolSpec, Scheduler};
//!
//! let spec = PoolSpec::fixed("backend", 1).queue(10).max_wait_micros(5_000_000);
//! let mut pool = Scheduler::new(&spec.validate()?);
//! let now = 0;
//! let Arrival::Admitted(first) = pool.arrive(now, 0, "client-a", 1) else { panic!() };
//! let Arrival::Queued { id: second, .. } = pool.arrive(now, 0, "client-b", 1) else { panic!() };
//! // The first response ends after 10 ms: its slot goes to the waiting request.
//! assert_eq!(pool.release(first, now + 10_000).admitted, vec![second]);
//! # Ok::<(), sluicegate_throttle::PoolError>(())
//! ```

#![deny(missing_docs)]

pub mod adaptive;
pub mod scheduler;
pub mod spec;

pub use adaptive::AdaptiveLimit;
pub use scheduler::{Arrival, LevelStats, Rejected, Released, Scheduler};
pub use spec::{Capacity, PoolError, PoolField, PoolSpec, ValidPool};

/// Time and durations, in microseconds.
pub type Micros = u64;
