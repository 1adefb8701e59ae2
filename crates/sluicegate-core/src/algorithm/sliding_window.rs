//! Sliding window counter: two aligned fixed windows, with the estimate
//! `previous × (1 − elapsed/period) + current`. Constant memory like the fixed window, and
//! no double burst at the boundary when traffic is even. The estimate assumes the previous
//! window's requests were spread evenly; its error bound is:
//! - never more than `limit` admitted within one aligned window;
//! - never more than `2 × limit` in any interval of one period (the adversarial case: all of
//!   the previous window's requests in its last instant).
//!
//! The comparison is done exactly in 128-bit integers:
//! `previous × (period − elapsed) + (current + cost) × period ≤ limit × period`.

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::{Decision, sat};

/// The sliding window counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: u64,
    period: Micros,
}

/// A key's counts in its latest window and the one before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// Index of the current window (`now / period`).
    pub window: u64,
    /// Cost admitted in the window before `window`.
    pub previous: u64,
    /// Cost admitted in `window`.
    pub current: u64,
}

impl SlidingWindow {
    /// `limit` per `period` µs, estimated over two windows.
    pub fn new(limit: u64, period: Micros) -> Self {
        SlidingWindow { limit, period }
    }

    /// The state as seen from window `window`: shifted if time moved on.
    fn at_window(state: &SlidingWindowState, window: u64) -> (u64, u64) {
        if state.window == window {
            (state.previous, state.current)
        } else if state.window + 1 == window {
            (state.current, 0)
        } else {
            (0, 0)
        }
    }

    /// Whole requests that fit, given the weighted previous count.
    fn fits(&self, previous: u64, current: u64, elapsed: Micros) -> u64 {
        let p = u128::from(self.period);
        let budget = u128::from(self.limit) * p;
        let weighted = u128::from(previous) * (p - u128::from(elapsed));
        let free = budget.saturating_sub(weighted) / p;
        sat(free).saturating_sub(current)
    }

    /// Smallest elapsed time in a window at which `previous × (period − e) ≤ allowance × period`.
    fn elapsed_needed(&self, previous: u64, allowance: u64) -> Micros {
        if previous == 0 {
            return 0;
        }
        let p = u128::from(self.period);
        let room = u128::from(allowance) * p / u128::from(previous);
        sat(p.saturating_sub(room))
    }
}

impl From<Quota> for SlidingWindow {
    fn from(q: Quota) -> Self {
        SlidingWindow::new(q.limit, q.period)
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    #[inline]
    fn evaluate(&self, state: &Self::State, now: Micros, cost: u64, _: Option<Micros>) -> Decision {
        let window = now / self.period;
        let start = window * self.period;
        let elapsed = now - start;
        let (previous, current) = Self::at_window(state, window);
        let fits = self.fits(previous, current, elapsed);
        let reset_for = |current: u64| {
            if current > 0 {
                start + 2 * self.period - now
            } else if previous > 0 {
                start + self.period - now
            } else {
                0
            }
        };
        if cost <= fits {
            return Decision::allow(
                self.limit,
                fits - cost,
                reset_for(current.saturating_add(cost)),
            );
        }
        let retry_at = if current.saturating_add(cost) <= self.limit {
            // Later in this window, once the previous window's weight has faded enough.
            start + self.elapsed_needed(previous, self.limit - current - cost)
        } else {
            // In the next window, where today's count becomes the weighted one.
            start + self.period + self.elapsed_needed(current, self.limit.saturating_sub(cost))
        };
        Decision::deny(
            self.limit,
            fits,
            reset_for(current),
            retry_at.saturating_sub(now),
        )
    }

    #[inline]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        let window = now / self.period;
        let (previous, current) = Self::at_window(state, window);
        *state = SlidingWindowState {
            window,
            previous,
            current: current.saturating_add(cost),
        };
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if state.window == now / self.period {
            state.current = state.current.saturating_sub(cost);
        }
    }

    /// The count of the window the request was admitted in changes: the current one, or
    /// the previous one, which still weighs in the estimate.
    fn settle(&self, state: &mut Self::State, now: Micros, a: super::Admitted, real: u64) {
        let (at, estimate) = (a.at, a.estimate);
        let window = now / self.period;
        let (mut previous, mut current) = Self::at_window(state, window);
        let count = match window - (at / self.period).min(window) {
            0 => &mut current,
            1 => &mut previous,
            _ => return, // admitted in a window that no longer counts
        };
        *count = if real < estimate {
            count.saturating_sub(estimate - real)
        } else {
            let charged = count.saturating_add(real - estimate);
            (*count).max(charged.min(self.limit.saturating_mul(2)))
        };
        *state = SlidingWindowState {
            window,
            previous,
            current,
        };
    }

    fn rescale(&self, from: &Self, state: &Self::State, now: Micros) -> Self::State {
        if from.period == self.period {
            return *state;
        }
        // Both counts, as they stand at `now`, move to the windows around `now`.
        let (previous, current) = Self::at_window(state, now / from.period);
        if previous == 0 && current == 0 {
            return SlidingWindowState::default();
        }
        SlidingWindowState {
            window: now / self.period,
            previous,
            current,
        }
    }

    /// Saturating: a state kept under a per-key override's shorter period counts its
    /// `window` in that period, and the store's table still asks this (the policy's)
    /// algorithm when it moves the state past a removed neighbour; the product can then
    /// exceed `u64`. "Never idle" is the safe answer (an overridden key is never swept).
    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        if state.current > 0 {
            state.window.saturating_add(2).saturating_mul(self.period)
        } else if state.previous > 0 {
            state.window.saturating_add(1).saturating_mul(self.period)
        } else {
            0
        }
    }
}
