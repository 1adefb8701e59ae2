//! Policies for tests: valid by construction (an invalid one is a bug in the test).

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::policy::PolicyBuilder;
use sluicegate_core::{AlgorithmKind, Policy};

/// `limit` requests per `period` under `algorithm`, rejecting over the limit.
pub fn policy(name: &str, algorithm: AlgorithmKind, limit: u64, period: Duration) -> Policy {
    policy_with(name, algorithm, limit, period, |b| b)
}

/// [`policy`] with more settings: `policy_with("p", kind, 10, secs, |b| b.burst(3))`.
pub fn policy_with(
    name: &str,
    algorithm: AlgorithmKind,
    limit: u64,
    period: Duration,
    configure: impl FnOnce(PolicyBuilder) -> PolicyBuilder,
) -> Policy {
    configure(Policy::builder(name, algorithm, limit, period))
        .build()
        .unwrap_or_else(|e| panic!("test policy {name:?} is invalid: {e}"))
}

/// [`policy`] behind an `Arc`, as stores take it.
pub fn shared_policy(
    name: &str,
    algorithm: AlgorithmKind,
    limit: u64,
    period: Duration,
) -> Arc<Policy> {
    Arc::new(policy(name, algorithm, limit, period))
}
