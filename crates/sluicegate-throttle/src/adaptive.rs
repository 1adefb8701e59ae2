//! `concurrency = "adaptive"`: the pool's limit follows the upstream's latency.
//!
//! # The rule (a gradient, after Envoy's adaptive concurrency filter and Netflix's
//! concurrency-limits `Gradient2`)
//!
//! Every response that held a slot to its end gives one sample: the time it held the slot
//! (its round-trip time through the upstream). Requests cut short give none (the caller
//! frees their slot with [`Scheduler::withdraw`](crate::Scheduler::withdraw)). Samples are gathered in windows of
//! `max(limit, 8)` responses — about one round trip's worth at the current limit. At the
//! end of each window, with `rtt` the window's mean:
//!
//! 1. **Floor.** `floor = rtt` if `rtt < floor` (or it is the first window). Otherwise,
//!    only while the limit is already at `min_concurrency`, the floor drifts up by
//!    `(rtt - floor) / 128`: latency that stays high at the minimum is not the pool's doing,
//!    and a permanently slower upstream is eventually accepted as the new normal (Envoy
//!    re-measures its minimum RTT at intervals by dropping to the minimum instead). The floor
//!    never drifts above the minimum, so the pool's own load — which raises latency with
//!    concurrency — cannot ratchet it up.
//! 2. **Too slow** (`rtt > 1.5 × floor`): `limit = limit × max(0.5, 1.5 × floor / rtt)`,
//!    rounded down and at least one less (multiplicative decrease, at most halving a window).
//! 3. **Healthy and used** (`rtt ≤ 1.5 × floor`, and at some point in the window every slot
//!    was taken or a request waited): `limit += max(1, √limit)` (Gradient2's queue
//!    headroom). A limit that is not used does not grow: there is no evidence it is safe.
//! 4. The limit stays within `min_concurrency..=max_concurrency`. It starts at
//!    `clamp(16, min, max)`.
//!
//! So when the upstream's latency triples, the limit halves each window until latency
//! falls back within 1.5× the floor or the minimum is reached, and it climbs back by
//! `√limit` per window once latency recovers.

use crate::Micros;

/// Latency up to `TOLERANCE_NUM / TOLERANCE_DEN` × the floor counts as healthy.
const TOLERANCE_NUM: u64 = 3;
const TOLERANCE_DEN: u64 = 2;
/// A window is at least this many samples.
const MIN_WINDOW: u32 = 8;
/// At the minimum limit, the floor moves up by 1/DRIFT of the gap each window.
const DRIFT: u64 = 128;
/// The limit an adaptive pool starts at (clamped to its bounds).
pub const INITIAL_LIMIT: u32 = 16;

/// The adaptive limit's state. Pure: it sees samples, never a clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveLimit {
    min: u32,
    max: u32,
    limit: u32,
    floor: Option<Micros>,
    sum: u64,
    count: u32,
    saturated: bool,
}

impl AdaptiveLimit {
    /// A limit within `min..=max` (callers validate `1 <= min <= max`).
    pub fn new(min: u32, max: u32) -> AdaptiveLimit {
        let min = min.max(1);
        let max = max.max(min);
        AdaptiveLimit {
            min,
            max,
            limit: INITIAL_LIMIT.clamp(min, max),
            floor: None,
            sum: 0,
            count: 0,
            saturated: false,
        }
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }
    /// The observed latency floor, once a window has completed.
    pub fn floor(&self) -> Option<Micros> {
        self.floor
    }
    /// The bounds.
    pub fn bounds(&self) -> (u32, u32) {
        (self.min, self.max)
    }

    /// Records one response's round-trip time. `saturated`: every slot was taken, or a
    /// request was waiting, when it ended. Returns the new limit when the window closed
    /// and it changed.
    pub fn sample(&mut self, rtt: Micros, saturated: bool) -> Option<u32> {
        self.sum = self.sum.saturating_add(rtt.max(1));
        self.count += 1;
        self.saturated |= saturated;
        if self.count < self.limit.max(MIN_WINDOW) {
            return None;
        }
        let rtt = self.sum / u64::from(self.count);
        let saturated = self.saturated;
        self.sum = 0;
        self.count = 0;
        self.saturated = false;
        let floor = match self.floor {
            Some(floor) if rtt >= floor && self.limit == self.min => floor + (rtt - floor) / DRIFT,
            Some(floor) if rtt >= floor => floor,
            _ => rtt,
        };
        self.floor = Some(floor);
        let before = self.limit;
        let tolerated = floor.saturating_mul(TOLERANCE_NUM) / TOLERANCE_DEN;
        if rtt > tolerated {
            // gradient = tolerated / rtt, in [0.5, 1): scale in integers.
            let scaled = u64::from(self.limit) * tolerated.max(rtt / 2) / rtt;
            let lowered = (scaled as u32).min(self.limit.saturating_sub(1));
            self.limit = lowered.max(self.min);
        } else if saturated {
            let step = (f64::from(self.limit).sqrt() as u32).max(1);
            self.limit = self.limit.saturating_add(step).min(self.max);
        }
        (self.limit != before).then_some(self.limit)
    }

    /// Applies new bounds (a reload), keeping what was learnt.
    pub fn rebound(&mut self, min: u32, max: u32) {
        self.min = min.max(1);
        self.max = max.max(self.min);
        self.limit = self.limit.clamp(self.min, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(limit: &mut AdaptiveLimit, rtt: Micros, n: usize) {
        for _ in 0..n {
            for _ in 0..limit.limit().max(MIN_WINDOW) {
                limit.sample(rtt, true);
            }
        }
    }

    #[test]
    fn climbs_while_healthy_and_used_then_stops_at_max() {
        let mut l = AdaptiveLimit::new(2, 64);
        assert_eq!(l.limit(), 16);
        windows(&mut l, 10_000, 1);
        assert_eq!(l.limit(), 20);
        windows(&mut l, 10_000, 50);
        assert_eq!(l.limit(), 64);
    }

    #[test]
    fn unused_limit_does_not_grow() {
        let mut l = AdaptiveLimit::new(1, 64);
        for _ in 0..1000 {
            l.sample(10_000, false);
        }
        assert_eq!(l.limit(), 16);
    }

    #[test]
    fn tripled_latency_lowers_then_recovery_raises() {
        let mut l = AdaptiveLimit::new(2, 64);
        windows(&mut l, 10_000, 20);
        let high = l.limit();
        windows(&mut l, 30_000, 3);
        let low = l.limit();
        assert!(low < high / 4, "{low} vs {high}");
        assert!(l.floor().unwrap() < 11_000, "the floor moves slowly");
        windows(&mut l, 30_000, 10);
        assert_eq!(l.limit(), 2, "stays at the minimum while slow");
        windows(&mut l, 10_000, 20);
        assert!(l.limit() > 32, "climbs back: {}", l.limit());
    }

    #[test]
    fn a_rise_within_the_tolerance_leaves_the_limit_alone() {
        // 50 ms → 60 ms is 1.2× the floor, under the 1.5× tolerance: not a slowdown. (The
        // end-to-end test once "tripled" latency this way and waited in vain for a drop.)
        let mut l = AdaptiveLimit::new(2, 40);
        windows(&mut l, 50_000, 20);
        assert_eq!(l.limit(), 40);
        windows(&mut l, 60_000, 20);
        assert_eq!(l.limit(), 40);
        windows(&mut l, 150_000, 1);
        assert_eq!(l.limit(), 20, "tripled: halved in one window");
    }

    #[test]
    fn floor_drifts_towards_a_new_normal() {
        let mut l = AdaptiveLimit::new(1, 8);
        windows(&mut l, 10_000, 1);
        windows(&mut l, 40_000, 1000);
        let floor = l.floor().unwrap();
        assert!(floor > 25_000, "{floor}: within 1.5× of the new normal");
        // Once the floor has caught up, the limit grows again.
        windows(&mut l, 40_000, 20);
        assert_eq!(l.limit(), 8);
    }

    #[test]
    fn rebound_clamps() {
        let mut l = AdaptiveLimit::new(1, 64);
        l.rebound(20, 30);
        assert_eq!(l.limit(), 20);
        assert_eq!(l.bounds(), (20, 30));
    }
}
