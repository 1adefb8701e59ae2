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
    #[inline]
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
    #[inline]
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

/// Division by a divisor fixed in advance, exact, by a multiplication: a hardware division
/// is the slowest instruction of a decision (10–40 cycles, on the critical path), a
/// multiply-high and a correction take a few.
///
/// With `m = ⌊(2⁶⁴ − 1) / d⌋`, `q = ⌊x·m / 2⁶⁴⌋` is `⌊x / d⌋` or one less for every
/// 64-bit `x`: `x·m / 2⁶⁴ = (x / d)·(1 − (1 + s) / 2⁶⁴)` with `s = (2⁶⁴ − 1) mod d < d`,
/// which is within `x / 2⁶⁴ < 1` below `x / d`; one comparison of the remainder fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Divisor {
    d: u64,
    m: u64,
}

impl Divisor {
    /// Dividing by `d` (at least 1).
    pub(crate) const fn new(d: u64) -> Self {
        let d = if d == 0 { 1 } else { d };
        Divisor { d, m: u64::MAX / d }
    }

    /// `⌊x / d⌋`.
    #[inline]
    pub(crate) fn div(self, x: u64) -> u64 {
        let q = ((u128::from(x) * u128::from(self.m)) >> 64) as u64;
        // q ≤ x / d, so q·d ≤ x: no overflow, and the remainder says whether q is one short.
        q + u64::from(x - q * self.d >= self.d)
    }
}

/// Narrows to `u64`, saturating.
pub(crate) fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::Divisor;

    /// Exact against the hardware division, at the edges and on a spread of values.
    #[test]
    fn divisor_divides_exactly() {
        let mut values = vec![0, 1, 2, 3, 7, 1_000_000, u64::MAX, u64::MAX - 1, 1 << 63];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x);
            values.push(x >> (x % 64));
        }
        let divisors = values.iter().copied().filter(|&d| d > 0);
        for d in divisors
            .clone()
            .take(300)
            .chain([1, 2, 3, 10, 1_000_000, u64::MAX])
        {
            let div = Divisor::new(d);
            for &x in &values {
                assert_eq!(div.div(x), x / d, "{x} / {d}");
                // Around multiples of d, where a one-off error would show.
                let k = x / d;
                for y in [
                    k * d,
                    (k * d).saturating_sub(1),
                    (k * d).saturating_add(d - 1),
                ] {
                    assert_eq!(div.div(y), y / d, "{y} / {d}");
                }
            }
        }
    }
}
