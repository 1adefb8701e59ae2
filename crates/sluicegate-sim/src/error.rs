//! [`SimError`]: everything that can stop a simulation, with a message a user can act on.

use std::path::PathBuf;

use sluicegate_core::PolicyError;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A policy built from flags or the config file is invalid.
    #[error("policy {name:?}: {source}")]
    Policy {
        /// The policy's name.
        name: String,
        /// What is wrong with it.
        source: PolicyError,
    },
    /// A policy built from the flags (over the config file's) breaks the policy rules.
    #[error("policy {name:?}: {errors}")]
    Invalid {
        /// The policy's name.
        name: String,
        /// Every mistake, `field: why`, separated by `; `.
        errors: String,
    },
    /// A flag is missing or out of range.
    #[error("{0}")]
    Usage(String),
    /// `--pattern` names no known pattern.
    #[error(
        "unknown pattern {0:?}; expected steady, burst, boundary, poisson, ramp or trace:FILE.csv"
    )]
    UnknownPattern(String),
    /// A trace line that does not parse.
    #[error("{path}:{line}: {reason}")]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
    /// The configuration reader's errors, each with its file, line and column.
    #[error("{0}")]
    Read(String),
    /// The config file has no policy to simulate, or not the one asked for.
    #[error("{path}: {reason}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A request's cost can never be admitted by a policy.
    #[error(
        "a request of cost {cost} can never be admitted by policy {policy:?}, whose capacity is {capacity}"
    )]
    CostOverCapacity {
        /// The policy.
        policy: String,
        /// The largest cost in the traffic.
        cost: u64,
        /// The policy's capacity (burst for buckets, limit for windows).
        capacity: u64,
    },
    /// The pattern would offer more requests than the simulator is willing to hold.
    #[error(
        "the traffic has {0} requests, over the simulator's bound of {max}; lower --rate or --duration",
        max = crate::traffic::MAX_REQUESTS
    )]
    TooManyRequests(u64),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Plotters could not draw the chart.
    #[error("drawing the chart failed: {0}")]
    Chart(String),
}
