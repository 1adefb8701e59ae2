//! GCRA, the generic cell rate algorithm: one number per key, the theoretical arrival time
//! (TAT) at which the key would be back to full. Each request of `cost` moves the TAT on
//! by `cost` emission intervals, and is admitted if the TAT then stays within `burst`
//! emission intervals of now. It makes the token bucket's decisions with 8 bytes of state,
//! which is why governor and redis-cell use it.
//!
//! The emission interval is `period / limit` rounded up to a whole microsecond, and every
//! number is then an exact integer of microseconds: the burst is exactly `burst` requests,
//! and where `period / limit` is a whole number of µs the decisions are the token bucket's,
//! field by field. Otherwise the rate is a little lower than `limit / period` (57 a minute
//! is one every 1,052,632 µs instead of 1,052,631.58: 0.00004% slower), never higher.

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::{Decision, Divisor, div_ceil, sat};

/// GCRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    limit: u64,
    /// The emission interval: `period / limit` rounded up, at least 1 µs.
    unit: Micros,
    /// How far ahead of now the TAT may be: `burst` emission intervals.
    tolerance: Micros,
    /// Divides by `unit` without a hardware division (every decision does it once).
    per_unit: Divisor,
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
        let unit = period.div_ceil(limit.max(1)).max(1);
        Gcra {
            limit,
            unit,
            tolerance: burst.saturating_mul(unit),
            per_unit: Divisor::new(unit),
        }
    }

    /// The emission interval of `cost` requests.
    #[inline(always)]
    fn interval(&self, cost: u64) -> Micros {
        cost.saturating_mul(self.unit)
    }

    /// Whole requests admissible while the TAT is `ahead` µs past now.
    #[inline(always)]
    fn whole(&self, ahead: Micros) -> u64 {
        self.per_unit.div(self.tolerance.saturating_sub(ahead))
    }
}

impl From<Quota> for Gcra {
    fn from(q: Quota) -> Self {
        Gcra::new(q.limit, q.period, q.burst)
    }
}

impl Algorithm for Gcra {
    type State = GcraState;

    #[inline(always)]
    fn evaluate(
        &self,
        state: &Self::State,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Decision {
        let ahead = state.tat.saturating_sub(now);
        let after = ahead.saturating_add(self.interval(cost));
        // A read (cost 0) is always admitted, even while delayed requests keep the TAT ahead.
        if after <= self.tolerance || cost == 0 {
            return Decision::allow(self.limit, self.whole(after), after);
        }
        let wait = after - self.tolerance;
        match max_delay {
            Some(budget) if wait <= budget => Decision {
                delay: wait,
                ..Decision::allow(self.limit, 0, after)
            },
            // In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
            _ => Decision::deny(
                self.limit,
                self.whole(ahead),
                ahead,
                wait - max_delay.unwrap_or(0),
            ),
        }
    }

    #[inline(always)]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        state.tat = state.tat.max(now).saturating_add(self.interval(cost));
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, _now: Micros, cost: u64) {
        state.tat = state.tat.saturating_sub(self.interval(cost));
    }

    fn settle(&self, state: &mut Self::State, now: Micros, a: super::Admitted, real: u64) {
        if real < a.estimate {
            let elapsed = i128::from(now.saturating_sub(a.at));
            let left = a.shortfall_left(i128::from(self.tolerance), i128::from(self.unit), elapsed);
            let give = i128::from(self.interval(a.estimate - real)).min(left);
            if give > 0 {
                state.tat = state.tat.saturating_sub(give as Micros);
            }
            return;
        }
        let charged = state
            .tat
            .max(now)
            .saturating_add(self.interval(real - a.estimate));
        // At most one capacity of debt: the TAT stays within two tolerances of now.
        let bound = now.saturating_add(self.tolerance.saturating_mul(2));
        state.tat = state.tat.max(charged.min(bound));
    }

    fn rescale(&self, from: &Self, state: &Self::State, now: Micros) -> Self::State {
        if from.unit == self.unit {
            return *state;
        }
        // Used = how far the TAT is ahead, in emission intervals; kept, rounded up.
        let ahead = state.tat.saturating_sub(now);
        if ahead == 0 {
            return GcraState::default();
        }
        let scaled = div_ceil(u128::from(ahead) * u128::from(self.unit), from.unit);
        GcraState {
            tat: now.saturating_add(sat(scaled)),
        }
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        state.tat
    }
}
