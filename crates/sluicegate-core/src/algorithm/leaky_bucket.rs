//! Leaky bucket: a bucket of size `burst` that drains at `limit / period`; a request pours
//! `cost` in and is admitted if it does not overflow. As a meter (reject mode) it makes the
//! same decisions as the token bucket. In delay mode it is a queue, like nginx `limit_req`
//! without `nodelay`: requests leave evenly spaced, each waiting for the water ahead of it
//! to drain; a request that would overflow the bucket, or wait over `max_delay`, is rejected.
//!
//! Water is fixed-point: one request is `period` units, draining `limit` units a microsecond.

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::{Decision, div_ceil, div_floor, sat};

/// The leaky bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    limit: u64,
    period: Micros,
    burst: u64,
}

/// A key's water level. The default (empty bucket) is a key never seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeakyBucketState {
    /// Water × period at `last`.
    pub level: u64,
    /// When `level` was last brought up to date.
    pub last: Micros,
}

impl LeakyBucket {
    /// A bucket of `burst` requests draining `limit` per `period` µs.
    pub fn new(limit: u64, period: Micros, burst: u64) -> Self {
        LeakyBucket {
            limit,
            period,
            burst,
        }
    }

    fn capacity(&self) -> u128 {
        u128::from(self.burst) * u128::from(self.period)
    }

    fn level_at(&self, state: &LeakyBucketState, now: Micros) -> u128 {
        let drained = u128::from(now.saturating_sub(state.last)) * u128::from(self.limit);
        u128::from(state.level).saturating_sub(drained)
    }

    fn drain_time(&self, level: u128) -> Micros {
        sat(div_ceil(level, self.limit))
    }

    fn room(&self, level: u128) -> u64 {
        sat(div_floor(
            self.capacity().saturating_sub(level),
            self.period,
        ))
    }
}

impl From<Quota> for LeakyBucket {
    fn from(q: Quota) -> Self {
        LeakyBucket::new(q.limit, q.period, q.burst)
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    #[inline]
    fn evaluate(
        &self,
        state: &Self::State,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Decision {
        let level = self.level_at(state, now);
        let after = level + u128::from(cost) * u128::from(self.period);
        let fits = after <= self.capacity();
        match max_delay {
            // Queue: wait for the water ahead to drain.
            Some(budget) => {
                let wait = if cost == 0 { 0 } else { self.drain_time(level) };
                if fits && wait <= budget {
                    Decision {
                        delay: wait,
                        ..Decision::allow(self.limit, self.room(after), self.drain_time(after))
                    }
                } else {
                    let overflow = after.saturating_sub(self.capacity());
                    let retry = self.drain_time(overflow).max(wait.saturating_sub(budget));
                    Decision::deny(self.limit, self.room(level), self.drain_time(level), retry)
                }
            }
            None if fits => Decision::allow(self.limit, self.room(after), self.drain_time(after)),
            None => Decision::deny(
                self.limit,
                self.room(level),
                self.drain_time(level),
                self.drain_time(after - self.capacity()),
            ),
        }
    }

    #[inline]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        let after = self.level_at(state, now) + u128::from(cost) * u128::from(self.period);
        state.level = sat(after);
        state.last = now.max(state.last);
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        let level = self
            .level_at(state, now)
            .saturating_sub(u128::from(cost) * u128::from(self.period));
        state.level = sat(level);
        state.last = now.max(state.last);
    }

    fn settle(&self, state: &mut Self::State, now: Micros, a: super::Admitted, real: u64) {
        let level = self.level_at(state, now);
        let p = u128::from(self.period);
        let level = if real < a.estimate {
            let drained = i128::from(now.saturating_sub(a.at)) * i128::from(self.limit);
            let left = a.shortfall_left(self.capacity() as i128, p as i128, drained);
            let give = (u128::from(a.estimate - real) * p).min(left.max(0) as u128);
            if give == 0 {
                return;
            }
            level.saturating_sub(give)
        } else {
            let charged = level + u128::from(real - a.estimate) * p;
            // At most one capacity of debt: the water stays within twice the bucket.
            level.max(charged.min(2 * self.capacity()))
        };
        state.level = sat(level);
        state.last = now.max(state.last);
    }

    fn rescale(&self, from: &Self, state: &Self::State, now: Micros) -> Self::State {
        if from.period == self.period && from.limit == self.limit {
            return *state;
        }
        // The water (level / period) is kept, rounded up.
        let level = from.level_at(state, now);
        if level == 0 {
            return LeakyBucketState::default();
        }
        LeakyBucketState {
            level: sat(super::carry_scaled(
                level,
                from.period,
                self.limit,
                self.period,
            )),
            last: now.max(state.last),
        }
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        state
            .last
            .saturating_add(self.drain_time(u128::from(state.level)))
    }
}
