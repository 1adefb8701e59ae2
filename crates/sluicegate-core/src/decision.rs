//! What one policy says about one request: a [`Decision`].

use crate::clock::Micros;

/// The answer of one policy for one request.
///
/// All durations are microseconds. `remaining` counts whole requests of cost 1 admissible
/// right after this decision; `reset_after` is how long until the key's state is back to
/// full (as if never seen); `retry_after` is set only when the request is denied, and says
/// when this same request (its cost) would be admitted if nothing else arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    /// Whether the request may go ahead (possibly after `delay`).
    pub allowed: bool,
    /// The policy's `limit` (requests per period).
    pub limit: u64,
    /// Whole requests admissible now.
    pub remaining: u64,
    /// Until the key is back to full.
    pub reset_after: Micros,
    /// When denied: until this request's cost would be admitted.
    pub retry_after: Option<Micros>,
    /// In delay mode: how long the admitted request must wait for its reserved turn.
    pub delay: Micros,
    /// Concurrency policies, when admitted with a cost: when the lease this request took
    /// expires (µs since the epoch), which with the cost names the lease to release.
    /// 0 otherwise.
    pub lease: Micros,
}

impl Decision {
    /// An admitted decision without delay.
    pub fn allow(limit: u64, remaining: u64, reset_after: Micros) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: None,
            delay: 0,
            lease: 0,
        }
    }

    /// A denied decision; `retry_after` is at least one microsecond.
    pub fn deny(limit: u64, remaining: u64, reset_after: Micros, retry_after: Micros) -> Self {
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_after,
            retry_after: Some(retry_after.max(1)),
            delay: 0,
            lease: 0,
        }
    }
}

/// `ceil(a / b)` for `b > 0`; 64-bit division when `a` fits (it nearly always does, and a
/// 128-bit division costs several times more).
#[inline]
pub(crate) fn div_ceil(a: u128, b: u64) -> u128 {
    match u64::try_from(a) {
        Ok(a) => u128::from(a.div_ceil(b)),
        Err(_) => a.div_ceil(u128::from(b)),
    }
}

/// `floor(a / b)` for `b > 0`, like [`div_ceil`].
#[inline]
pub(crate) fn div_floor(a: u128, b: u64) -> u128 {
    match u64::try_from(a) {
        Ok(a) => u128::from(a / b),
        Err(_) => a / u128::from(b),
    }
}

/// Narrows to `u64`, saturating.
pub(crate) fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}
