//! Fixed window: a counter per window, windows aligned to multiples of `period` since the
//! Unix epoch. Cheapest and simplest; its known weakness is the boundary: `limit` at the end
//! of one window and `limit` at the start of the next admit `2 × limit` within one period.

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::Decision;

/// The fixed-window counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    limit: u64,
    period: Micros,
}

/// A key's count in its latest window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// Index of the window the count belongs to (`now / period`).
    pub window: u64,
    /// Cost admitted in that window.
    pub count: u64,
}

impl FixedWindow {
    /// `limit` requests per aligned window of `period` µs.
    pub fn new(limit: u64, period: Micros) -> Self {
        FixedWindow { limit, period }
    }

    fn count_at(&self, state: &FixedWindowState, window: u64) -> u64 {
        if state.window == window {
            state.count
        } else {
            0
        }
    }
}

impl From<Quota> for FixedWindow {
    fn from(q: Quota) -> Self {
        FixedWindow::new(q.limit, q.period)
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    #[inline]
    fn evaluate(&self, state: &Self::State, now: Micros, cost: u64, _: Option<Micros>) -> Decision {
        let window = now / self.period;
        let until_end = (window + 1) * self.period - now;
        let count = self.count_at(state, window);
        let used = count.saturating_add(cost);
        if used <= self.limit {
            let reset = if used > 0 { until_end } else { 0 };
            Decision::allow(self.limit, self.limit - used, reset)
        } else {
            Decision::deny(
                self.limit,
                self.limit.saturating_sub(count),
                until_end,
                until_end,
            )
        }
    }

    #[inline]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        let window = now / self.period;
        if state.window != window {
            *state = FixedWindowState { window, count: 0 };
        }
        state.count = state.count.saturating_add(cost);
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if state.window == now / self.period {
            state.count = state.count.saturating_sub(cost);
        }
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        if state.count == 0 {
            0
        } else {
            (state.window + 1) * self.period
        }
    }
}
