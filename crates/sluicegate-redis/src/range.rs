//! What the scripts receive for a policy, and the range in which they compute exactly.
//!
//! Lua numbers are doubles, exact for integers up to 2^53. The core bounds its fixed-point
//! products below 2^62 (it has 64- and 128-bit integers); the scripts need every product
//! they form at or below 2^53. Bucket algorithms first divide `limit` and `period` by their
//! greatest common divisor, which changes no decision (every comparison is homogeneous in
//! them) and usually shrinks the products by orders of magnitude: 1,000,000 a day becomes
//! 1 a 86,400 µs. What remains must satisfy, with `L` and `P` the reduced limit and period:
//!
//! - token_bucket, leaky_bucket: `burst × P ≤ 2^50`, `L ≤ 2^50`, and in delay mode
//!   `L × max_delay ≤ 2^50`;
//! - gcra (which works in whole µs: the emission interval `unit = ⌈period / limit⌉`):
//!   `burst × unit ≤ 2^50` and `max_delay ≤ 2^50` µs;
//! - fixed_window, sliding_log, sliding_window: `limit ≤ 2^50` and `period ≤ 2^50` µs (the
//!   sliding window's products go through an exact multiply-divide).
//!
//! 2^50 leaves room for the sums of two or three such products. Policies outside the range
//! are refused with [`RedisStoreError::OutOfRange`] rather than decided approximately.

use sluicegate_core::{AlgorithmKind, Policy};

use crate::config::RedisStoreError;

/// The largest product the scripts form from one policy's numbers.
pub const EXACT_BOUND: u64 = 1 << 50;

/// One policy as the entry script reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    /// Index into the script's algorithm table (1-based, `AlgorithmKind::ALL` order).
    pub code: u8,
    pub limit: u64,
    pub period: u64,
    pub burst: u64,
    /// `-1` outside delay mode.
    pub max_delay: i64,
    /// µs; 0 for none (at most [`sluicegate_core::policy::MAX_PENALTY`], exact in doubles).
    pub penalty: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn code(kind: AlgorithmKind) -> u8 {
    match kind {
        AlgorithmKind::FixedWindow => 1,
        AlgorithmKind::SlidingLog => 2,
        AlgorithmKind::SlidingWindow => 3,
        AlgorithmKind::TokenBucket => 4,
        AlgorithmKind::LeakyBucket => 5,
        AlgorithmKind::Gcra => 6,
        AlgorithmKind::Concurrency => 7,
    }
}

/// The script parameters of `policy`, or why the scripts cannot decide it exactly.
pub(crate) fn params(policy: &Policy) -> Result<Params, RedisStoreError> {
    let out_of_range = |reason: String| RedisStoreError::OutOfRange {
        policy: policy.name().to_owned(),
        reason,
    };
    let within = |v: u128| v <= u128::from(EXACT_BOUND);
    let kind = policy.algorithm();
    if !kind.uses_burst() {
        if !within(policy.limit().into()) || !within(policy.period().into()) {
            return Err(out_of_range(format!(
                "limit and period (µs) must each be at most 2^50, got {} and {}",
                policy.limit(),
                policy.period()
            )));
        }
        return Ok(Params {
            code: code(kind),
            limit: policy.limit(),
            period: policy.period(),
            burst: policy.burst(),
            max_delay: -1,
            penalty: policy.penalty(),
        });
    }
    if kind == AlgorithmKind::Gcra {
        // The script receives the emission interval in the `limit` field.
        let unit = policy.period().div_ceil(policy.limit()).max(1);
        let tolerance = u128::from(policy.burst()) * u128::from(unit);
        let max_delay = policy.delay_budget().map_or(-1, i128::from);
        if !within(tolerance) || max_delay > i128::from(EXACT_BOUND) {
            return Err(out_of_range(format!(
                "burst × ⌈period / limit⌉ (µs) and max_delay must be at most 2^50, got {tolerance} and {max_delay}"
            )));
        }
        return Ok(Params {
            code: code(kind),
            limit: unit,
            period: 1,
            burst: policy.burst(),
            max_delay: i64::try_from(max_delay).unwrap_or(-1),
            penalty: policy.penalty(),
        });
    }
    let g = gcd(policy.limit(), policy.period()).max(1);
    let (limit, period) = (policy.limit() / g, policy.period() / g);
    let capacity = u128::from(policy.burst()) * u128::from(period);
    if !within(capacity) || !within(limit.into()) {
        return Err(out_of_range(format!(
            "burst × period / gcd(limit, period) must be at most 2^50, got {capacity}"
        )));
    }
    let max_delay = match policy.delay_budget() {
        None => -1,
        Some(budget) => {
            let debt = u128::from(limit) * u128::from(budget);
            if !within(debt) {
                return Err(out_of_range(format!(
                    "limit × max_delay (µs) / gcd(limit, period) must be at most 2^50, got {debt}"
                )));
            }
            i64::try_from(budget).map_err(|_| out_of_range("max_delay too large".into()))?
        }
    };
    Ok(Params {
        code: code(kind),
        limit,
        period,
        burst: policy.burst(),
        max_delay,
        penalty: policy.penalty(),
    })
}

/// Checks that the Redis store can decide `policy` exactly; call it when loading a
/// configuration so an unsupported policy is refused at start, not at its first request.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_core::{AlgorithmKind, Policy};
/// let daily = Policy::builder("daily", AlgorithmKind::TokenBucket, 1_000_000, Duration::from_secs(86_400))
///     .build()
///     .unwrap();
/// assert!(sluicegate_redis::check_policy(&daily).is_ok());
/// let odd = Policy::builder("odd", AlgorithmKind::TokenBucket, 7, Duration::from_secs(86_400))
///     .burst(1_000_000)
///     .build()
///     .unwrap();
/// assert!(sluicegate_redis::check_policy(&odd).is_err());
/// ```
pub fn check_policy(policy: &Policy) -> Result<(), RedisStoreError> {
    params(policy).map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluicegate_core::Mode;

    use super::*;

    #[test]
    fn reduces_by_the_gcd() {
        let p = Policy::builder("p", AlgorithmKind::TokenBucket, 10, Duration::from_secs(60))
            .build()
            .unwrap();
        let params = params(&p).unwrap();
        assert_eq!((params.limit, params.period), (1, 6_000_000));
        assert_eq!(params.max_delay, -1);
    }

    #[test]
    fn refuses_what_doubles_cannot_hold() {
        let wide = Policy::builder(
            "w",
            AlgorithmKind::SlidingWindow,
            1 << 51,
            Duration::from_micros(1),
        )
        .build()
        .unwrap();
        assert!(matches!(
            params(&wide),
            Err(RedisStoreError::OutOfRange { .. })
        ));
        let delay = Policy::builder(
            "d",
            AlgorithmKind::LeakyBucket,
            1 << 30,
            Duration::from_secs(1),
        )
        .burst(1)
        .mode(Mode::Delay)
        .max_delay(Duration::from_secs(3600))
        .build()
        .unwrap();
        let err = params(&delay).unwrap_err().to_string();
        assert!(err.contains("max_delay"), "{err}");
    }
}
