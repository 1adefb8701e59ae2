//! Sluicegate's traffic simulator, behind `sluicegate simulate`.
//!
//! It runs a traffic [`Pattern`] (steady, bursts, a burst straddling a window boundary,
//! Poisson arrivals, a ramp, or a CSV trace) through one or more policies on a virtual
//! clock (with, optionally, how long each request runs and what it really costs: see
//! [`model`]), and reports what each did: a plain-text summary table and an SVG chart. The
//! decisions are those of `sluicegate-core`'s own algorithms, called directly at each
//! request's virtual time: the simulator counts and draws; it decides nothing itself. A
//! simulated hour takes a fraction of a second, and nothing sleeps.
//!
//! It is not a load generator: no request leaves the process, and no store is involved.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use sluicegate_core::{AlgorithmKind, Policy};
//! use sluicegate_sim::{Pattern, PatternParams, engine};
//!
//! let params = PatternParams { rate: 1.0, duration: 120_000_000, period: 60_000_000, size: 20, seed: 1 };
//! let traffic = Pattern::Boundary.generate(&params)?;
//! let fixed = Arc::new(Policy::builder("f", AlgorithmKind::FixedWindow, 10, Duration::from_secs(60)).build()?);
//! let log = Arc::new(Policy::builder("l", AlgorithmKind::SlidingLog, 10, Duration::from_secs(60)).build()?);
//! assert_eq!(engine::run(&fixed, &traffic, 1_000_000)?.peak_in_period, 20);
//! assert_eq!(engine::run(&log, &traffic, 1_000_000)?.peak_in_period, 10);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod args;
pub mod chart;
pub mod engine;
mod error;
pub mod memory;
pub mod model;
pub mod pattern;
pub mod pool;
pub mod report;
pub mod trace;
mod traffic;

pub use args::{SimulateArgs, Simulation};
pub use engine::{LeaseStats, PolicyRun, SettleStats};
pub use error::SimError;
pub use pattern::{Pattern, PatternParams};
pub use traffic::{Arrival, MAX_REQUESTS, Traffic};
