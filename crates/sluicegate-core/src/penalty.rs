//! Penalties (`penalty = "10m"`): once a policy denies a key, the key stays denied for the
//! penalty, whatever its algorithm would say meanwhile (rate-limiter-flexible's
//! `blockDuration`, Cloudflare's mitigation timeout).
//!
//! The rule, the same in every store (the Redis script repeats it, and the differential
//! tests keep the two equal):
//! - a request the algorithm denies while no penalty runs starts one, until
//!   `now + penalty`; its own decision already says so (`retry_after` ≥ the penalty);
//! - while a penalty runs, every request of that key under that policy is denied with
//!   `remaining` 0 and `retry_after` (and `reset_after`) at least the time left; requests
//!   during the penalty do not extend it;
//! - in shadow mode the penalty is kept and reported the same way (the outcome is
//!   `shadow_denied`), never enforced;
//! - a read (cost 0) never starts a penalty; during one it reports the denial;
//! - resetting the key (`DELETE /v1/limits`) ends its penalty, and so does removing the
//!   policy's `penalty` from the configuration (a policy without one reads none).

use crate::clock::Micros;
use crate::decision::Decision;
use crate::policy::Policy;

/// Applies `policy`'s penalty to what its algorithm decided (`raw`), given the end of the
/// key's running penalty (`blocked_until`, 0 or past for none). Returns the decision and,
/// when this decision starts a penalty, its end, which the store must keep.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_core::{AlgorithmKind, Decision, Policy, penalty};
/// let p = Policy::builder("p", AlgorithmKind::FixedWindow, 5, Duration::from_secs(60))
///     .penalty(Duration::from_secs(600))
///     .build()?;
/// let now = 1_000_000_000;
/// // A denial starts a ten-minute penalty; retry_after says so.
/// let (d, start) = penalty::apply(&p, Decision::deny(5, 0, 7_000_000, 7_000_000), 0, now);
/// assert_eq!(start, Some(now + 600_000_000));
/// assert_eq!(d.retry_after, Some(600_000_000));
/// // A minute later the algorithm would admit, the penalty does not.
/// let later = now + 60_000_000;
/// let (d, start) = penalty::apply(&p, Decision::allow(5, 4, 1), now + 600_000_000, later);
/// assert!(!d.allowed && start.is_none());
/// assert_eq!(d.retry_after, Some(540_000_000));
/// # Ok::<(), sluicegate_core::PolicyError>(())
/// ```
pub fn apply(
    policy: &Policy,
    raw: Decision,
    blocked_until: Micros,
    now: Micros,
) -> (Decision, Option<Micros>) {
    if blocked_until > now {
        return (blocked(raw, blocked_until - now), None);
    }
    if raw.allowed || policy.penalty() == 0 {
        return (raw, None);
    }
    let until = now.saturating_add(policy.penalty());
    (blocked(raw, policy.penalty()), Some(until))
}

fn blocked(raw: Decision, left: Micros) -> Decision {
    Decision {
        allowed: false,
        limit: raw.limit,
        remaining: 0,
        reset_after: raw.reset_after.max(left),
        retry_after: Some(raw.retry_after.unwrap_or(0).max(left).max(1)),
        delay: 0,
        lease: 0,
    }
}
