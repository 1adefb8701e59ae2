//! Fixed window: a counter per window, windows aligned to multiples of `period` since the
//! Unix epoch, or calendar windows (days, weeks, months, years in a time zone, see
//! [`crate::calendar`]). Cheapest and simplest; its known weakness is the boundary: `limit`
//! at the end of one window and `limit` at the start of the next admit `2 × limit` within
//! one period.

use super::{Algorithm, Quota};
use crate::calendar::Calendar;
use crate::clock::Micros;
use crate::decision::Decision;

/// The fixed-window counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedWindow {
    limit: u64,
    period: Micros,
    calendar: Option<Calendar>,
}

/// A key's count in its latest window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// Which window the count belongs to: its index (`now / period`), or for calendar
    /// windows the instant it ends (µs), which is as unique and tells when the state expires.
    pub window: u64,
    /// Cost admitted in that window.
    pub count: u64,
}

impl FixedWindow {
    /// `limit` requests per aligned window of `period` µs.
    pub fn new(limit: u64, period: Micros) -> Self {
        FixedWindow {
            limit,
            period,
            calendar: None,
        }
    }

    /// `limit` requests per calendar window.
    pub fn calendar(limit: u64, calendar: Calendar) -> Self {
        FixedWindow {
            limit,
            period: calendar.unit().longest(),
            calendar: Some(calendar),
        }
    }

    /// The window holding `now`: its id (see [`FixedWindowState::window`]) and its end.
    #[inline]
    fn window(&self, now: Micros) -> (u64, Micros) {
        if let Some((_, end)) = self.calendar.as_ref().and_then(|c| c.window(now)) {
            return (end, end);
        }
        let window = now / self.period;
        (window, (window + 1).saturating_mul(self.period))
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
        match q.calendar {
            Some(calendar) => FixedWindow::calendar(q.limit, calendar),
            None => FixedWindow::new(q.limit, q.period),
        }
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    #[inline]
    fn evaluate(&self, state: &Self::State, now: Micros, cost: u64, _: Option<Micros>) -> Decision {
        let (window, end) = self.window(now);
        let until_end = end.saturating_sub(now);
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
        let (window, _) = self.window(now);
        if state.window != window {
            *state = FixedWindowState { window, count: 0 };
        }
        state.count = state.count.saturating_add(cost);
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if state.window == self.window(now).0 {
            state.count = state.count.saturating_sub(cost);
        }
    }

    fn settle(&self, state: &mut Self::State, now: Micros, a: super::Admitted, real: u64) {
        let (at, estimate) = (a.at, a.estimate);
        let window = self.window(now).0;
        if self.window(at).0 != window {
            return; // admitted in a window that has ended: nothing to change
        }
        let count = self.count_at(state, window);
        let count = if real < estimate {
            count.saturating_sub(estimate - real)
        } else {
            count.max(
                count
                    .saturating_add(real - estimate)
                    .min(self.limit.saturating_mul(2)),
            )
        };
        *state = FixedWindowState { window, count };
    }

    fn rescale(&self, from: &Self, state: &Self::State, now: Micros) -> Self::State {
        if from.period == self.period && from.calendar == self.calendar {
            return *state;
        }
        // The count of the window still running under the old numbers, carried into the
        // window holding `now` under the new ones.
        if from.idle_at(state) <= now {
            return FixedWindowState::default();
        }
        FixedWindowState {
            window: self.window(now).0,
            count: state.count,
        }
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        if state.count == 0 {
            0
        } else if self.calendar.is_some() {
            state.window
        } else {
            (state.window + 1).saturating_mul(self.period)
        }
    }
}
