//! GCRA, the generic cell rate algorithm: one number per key, the theoretical arrival time
//! (TAT) at which the key would be back to full. A request of `cost` moves the TAT on by
//! `cost × period / limit` (the emission interval) and is admitted if the TAT stays within
//! `burst` emission intervals of now. It makes the token bucket's decisions with 8 bytes of
//! state, which is why governor and redis-cell use it.
//!
//! The admission test is exact (`(now − tat) × limit + burst × period ≥ cost × period` in
//! 128-bit integers); the stored TAT is rounded up to the microsecond, so GCRA never admits
//! faster than the rate, and is at most 1 µs a request stricter than the exact bucket.

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::{Decision, div_ceil, sat};

/// GCRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    limit: u64,
    period: Micros,
    burst: u64,
}

/// A key's theoretical arrival time; 0 (the default) is a key never seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcraState {
    /// When the key is back to full.
    pub tat: Micros,
}

impl Gcra {
    /// `limit` per `period` µs, `burst` at once.
    pub fn new(limit: u64, period: Micros, burst: u64) -> Self {
        Gcra {
            limit,
            period,
            burst,
        }
    }

    /// The emission interval of `cost` requests, rounded up to whole microseconds.
    fn interval(&self, cost: u64) -> Micros {
        sat(div_ceil(
            u128::from(cost) * u128::from(self.period),
            u128::from(self.limit),
        ))
    }

    /// Capacity left at `now` if the TAT is `tat`, in units of 1/limit µs (a request is `period`).
    fn allowance(&self, tat: Micros, now: Micros) -> i128 {
        (i128::from(now) - i128::from(tat)) * i128::from(self.limit)
            + i128::from(self.burst) * i128::from(self.period)
    }

    fn whole(&self, allowance: i128) -> u64 {
        if allowance <= 0 {
            0
        } else {
            sat(allowance as u128 / u128::from(self.period)).min(self.burst)
        }
    }
}

impl From<Quota> for Gcra {
    fn from(q: Quota) -> Self {
        Gcra::new(q.limit, q.period, q.burst)
    }
}

impl Algorithm for Gcra {
    type State = GcraState;

    fn evaluate(
        &self,
        state: &Self::State,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Decision {
        let start = state.tat.max(now);
        let allowance = self.allowance(start, now);
        let need = i128::from(cost) * i128::from(self.period);
        let new_tat = start + self.interval(cost);
        // A read (cost 0) is always admitted, even while delayed requests keep the TAT ahead.
        if need <= allowance || cost == 0 {
            let left = self.allowance(new_tat, now);
            return Decision::allow(self.limit, self.whole(left), new_tat - now);
        }
        let wait = sat(div_ceil((need - allowance) as u128, u128::from(self.limit)));
        match max_delay {
            Some(budget) if wait <= budget => Decision {
                delay: wait,
                ..Decision::allow(self.limit, 0, new_tat - now)
            },
            // In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
            _ => Decision::deny(
                self.limit,
                self.whole(allowance),
                start - now,
                wait - max_delay.unwrap_or(0),
            ),
        }
    }

    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        state.tat = state.tat.max(now) + self.interval(cost);
    }

    fn refund(&self, state: &mut Self::State, _now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        state.tat = state.tat.saturating_sub(self.interval(cost));
    }

    fn idle_at(&self, state: &Self::State) -> Micros {
        state.tat
    }
}
