//! Sliding log: the exact answer. Every admitted request is logged with its time and cost;
//! a request is admitted while the cost logged in `(now - period, now]` plus its own is at
//! most `limit`. Denied requests are not logged, so a client that keeps retrying recovers.
//! Memory per key grows with the number of requests in a period (at most `limit` entries).

use std::collections::VecDeque;

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::Decision;

/// The sliding log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    period: Micros,
}

/// A key's admitted requests, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    /// `(admitted at, cost)`, in non-decreasing time.
    pub entries: VecDeque<(Micros, u64)>,
    /// Sum of the costs in `entries`.
    pub total: u64,
}

impl SlidingLog {
    /// At most `limit` in any `period` µs.
    pub fn new(limit: u64, period: Micros) -> Self {
        SlidingLog { limit, period }
    }

    fn live(&self, at: Micros, now: Micros) -> bool {
        at.saturating_add(self.period) > now
    }

    /// Cost of entries that have left the window at `now`.
    fn expired_cost(&self, state: &SlidingLogState, now: Micros) -> u64 {
        state
            .entries
            .iter()
            .take_while(|(at, _)| !self.live(*at, now))
            .map(|(_, cost)| cost)
            .sum()
    }
}

impl From<Quota> for SlidingLog {
    fn from(q: Quota) -> Self {
        SlidingLog::new(q.limit, q.period)
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    #[inline]
    fn evaluate(&self, state: &Self::State, now: Micros, cost: u64, _: Option<Micros>) -> Decision {
        let used = state.total - self.expired_cost(state, now);
        let newest = state.entries.back().map(|(at, _)| *at);
        if used.saturating_add(cost) <= self.limit {
            let reset = if cost > 0 {
                self.period
            } else {
                newest.map_or(0, |at| (at + self.period).saturating_sub(now))
            };
            return Decision::allow(self.limit, self.limit - used - cost, reset);
        }
        // Walk the live entries oldest first until enough cost has left the window.
        let mut still_used = used;
        let mut retry = self.period;
        for (at, entry_cost) in state.entries.iter().filter(|(at, _)| self.live(*at, now)) {
            still_used -= entry_cost;
            if still_used + cost <= self.limit {
                retry = at + self.period - now;
                break;
            }
        }
        let reset = newest.map_or(0, |at| (at + self.period).saturating_sub(now));
        Decision::deny(self.limit, self.limit.saturating_sub(used), reset, retry)
    }

    #[inline]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        while let Some(&(at, entry_cost)) = state.entries.front() {
            if self.live(at, now) {
                break;
            }
            state.entries.pop_front();
            state.total -= entry_cost;
        }
        // A clock that stepped back must not break the time order the scan relies on.
        let at = state.entries.back().map_or(now, |(last, _)| now.max(*last));
        state.entries.push_back((at, cost));
        state.total += cost;
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, _now: Micros, mut cost: u64) {
        while cost > 0 {
            let Some(back) = state.entries.back_mut() else {
                return;
            };
            let take = back.1.min(cost);
            back.1 -= take;
            state.total -= take;
            cost -= take;
            if back.1 == 0 {
                state.entries.pop_back();
            }
        }
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        state.entries.back().map_or(0, |(at, _)| at + self.period)
    }
}
