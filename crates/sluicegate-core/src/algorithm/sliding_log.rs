//! Sliding log: the exact answer. Every admitted request is logged with its time and cost;
//! a request is admitted while the cost logged in `(now - period, now]` plus its own is at
//! most `limit`. Denied requests are not logged, so a client that keeps retrying recovers.
//! Memory per key grows with the number of requests in a period (at most `limit` entries,
//! 16 bytes each).
//!
//! Each entry keeps the running total of cost up to and including it (as the Redis script
//! does), so a decision never walks the log: the first entry still in the window and, on a
//! denial, the entry whose expiry makes room are found by binary search, O(log n).

use std::collections::VecDeque;

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::Decision;

/// The most entries logged after a settled request whose running totals a refund rewrites.
pub const MAX_SETTLE_SHIFT: usize = 64;

/// The sliding log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    period: Micros,
}

/// A key's admitted requests, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    /// `(admitted at, running total)` in non-decreasing time: the running total is the
    /// cost of every entry logged up to and including this one, counted from `base`
    /// (wrapping: only differences are read).
    pub entries: VecDeque<(Micros, u64)>,
    /// The running total before the first entry.
    pub base: u64,
}

impl SlidingLogState {
    /// The running total of the newest entry (`base` when empty).
    fn last_total(&self) -> u64 {
        self.entries.back().map_or(self.base, |&(_, t)| t)
    }

    /// The running total before entry `i`.
    fn total_before(&self, i: usize) -> u64 {
        if i == 0 {
            self.base
        } else {
            self.entries[i - 1].1
        }
    }

    /// Bytes on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<(Micros, u64)>()
    }
}

impl SlidingLog {
    /// At most `limit` in any `period` µs.
    pub fn new(limit: u64, period: Micros) -> Self {
        SlidingLog { limit, period }
    }

    fn live(&self, at: Micros, now: Micros) -> bool {
        at.saturating_add(self.period) > now
    }

    /// The index of the first entry still in the window at `now`.
    fn first_live(&self, state: &SlidingLogState, now: Micros) -> usize {
        state
            .entries
            .partition_point(|&(at, _)| !self.live(at, now))
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
        let first = self.first_live(state, now);
        let start = state.total_before(first);
        let used = state.last_total().wrapping_sub(start);
        let newest = state.entries.back().map(|(at, _)| *at);
        if used.saturating_add(cost) <= self.limit {
            let reset = if cost > 0 {
                self.period
            } else {
                newest.map_or(0, |at| (at + self.period).saturating_sub(now))
            };
            return Decision::allow(self.limit, self.limit - used - cost, reset);
        }
        // The oldest live entry whose expiry leaves room: the cost still used after it,
        // `used - (total - start)`, plus `cost` fits in `limit`.
        let needed = used + cost - self.limit;
        let (mut lo, mut hi) = (first, state.entries.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if state.entries[mid].1.wrapping_sub(start) < needed {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let retry = state
            .entries
            .get(lo)
            .map_or(self.period, |(at, _)| at + self.period - now);
        let reset = newest.map_or(0, |at| (at + self.period).saturating_sub(now));
        Decision::deny(self.limit, self.limit.saturating_sub(used), reset, retry)
    }

    #[inline]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        let first = self.first_live(state, now);
        if first > 0 {
            state.base = state.total_before(first);
            state.entries.drain(..first);
            // Give memory back once the log is mostly empty (it is bounded in bytes).
            if state.entries.capacity() > 4 * state.entries.len().max(4) {
                state.entries.shrink_to(2 * state.entries.len());
            }
        }
        // A clock that stepped back must not break the time order the search relies on.
        let at = state.entries.back().map_or(now, |(last, _)| now.max(*last));
        let total = state.last_total().wrapping_add(cost);
        state.entries.push_back((at, total));
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, _now: Micros, mut cost: u64) {
        while cost > 0 {
            let before = state.total_before(state.entries.len().saturating_sub(1));
            let Some(back) = state.entries.back_mut() else {
                return;
            };
            let entry_cost = back.1.wrapping_sub(before);
            let take = entry_cost.min(cost);
            back.1 = back.1.wrapping_sub(take);
            cost -= take;
            if take == entry_cost {
                state.entries.pop_back();
            }
        }
    }

    /// The request's logged entry is the last one at or before `at`. A charge is logged as
    /// a new entry now (it then counts a little longer than the admitted entry would: never
    /// more permissive); a refund lowers the admitted entry, and with it the running totals
    /// of the entries after it, at most [`MAX_SETTLE_SHIFT`] of them (beyond that nothing is
    /// given back, so the work stays bounded, as in the script).
    fn settle(&self, state: &mut Self::State, now: Micros, a: super::Admitted, real: u64) {
        let (at, estimate) = (a.at, a.estimate);
        let first = self.first_live(state, now);
        let found = state.entries.partition_point(|&(t, _)| t <= at);
        if found == 0 || found - 1 < first {
            return; // the admitted entry has left the window (or was never logged)
        }
        let i = found - 1;
        let used = state.last_total().wrapping_sub(state.total_before(first));
        if real > estimate {
            // At most one capacity of debt: the logged cost stays within twice the limit.
            let take = (real - estimate).min(self.limit.saturating_mul(2).saturating_sub(used));
            if take > 0 {
                self.consume(state, now, take);
            }
            return;
        }
        if state.entries.len() - 1 - i > MAX_SETTLE_SHIFT {
            return;
        }
        let own = state.entries[i].1.wrapping_sub(state.total_before(i));
        let give = (estimate - real).min(own);
        for entry in state.entries.iter_mut().skip(i) {
            entry.1 = entry.1.wrapping_sub(give);
        }
    }

    fn rescale(&self, _from: &Self, state: &Self::State, _now: Micros) -> Self::State {
        // The log is timestamps and costs: the new numbers read it as it is.
        state.clone()
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        state
            .entries
            .back()
            .map_or(0, |(at, _)| at.saturating_add(self.period))
    }

    fn heap_bytes(state: &Self::State) -> usize {
        state.heap_bytes()
    }
}
