//! Token bucket: `burst` tokens, refilled continuously at `limit / period`, starting full.
//! A request takes `cost` tokens. In delay mode the bucket may go into debt: the request is
//! admitted now and waits until the refill has paid its debt back.
//!
//! Tokens are fixed-point: one token is `period` units and the refill adds `limit` units a
//! microsecond, so refill is exact integer arithmetic with no drift, however long the gap.

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::{Decision, div_ceil, div_floor, sat};

/// The token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    limit: u64,
    period: Micros,
    burst: u64,
}

/// A key's bucket. `last == 0` marks a key never seen (a full bucket).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenBucketState {
    /// Tokens × period at `last`; negative while a delayed request is in debt.
    pub tokens: i64,
    /// When `tokens` was last brought up to date.
    pub last: Micros,
}

impl TokenBucket {
    /// `burst` tokens refilled at `limit` per `period` µs.
    pub fn new(limit: u64, period: Micros, burst: u64) -> Self {
        TokenBucket {
            limit,
            period,
            burst,
        }
    }

    fn capacity(&self) -> i128 {
        i128::from(self.burst) * i128::from(self.period)
    }

    /// Scaled tokens at `now`, refilled and capped.
    fn tokens_at(&self, state: &TokenBucketState, now: Micros) -> i128 {
        if state.last == 0 {
            return self.capacity();
        }
        let elapsed = i128::from(now.saturating_sub(state.last));
        (i128::from(state.tokens) + elapsed * i128::from(self.limit)).min(self.capacity())
    }

    /// Microseconds until `deficit` scaled units have been refilled.
    fn refill_time(&self, deficit: i128) -> Micros {
        if deficit <= 0 {
            0
        } else {
            sat(div_ceil(deficit as u128, self.limit))
        }
    }

    fn whole(&self, scaled: i128) -> u64 {
        if scaled <= 0 {
            0
        } else {
            sat(div_floor(scaled as u128, self.period))
        }
    }
}

impl From<Quota> for TokenBucket {
    fn from(q: Quota) -> Self {
        TokenBucket::new(q.limit, q.period, q.burst)
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    #[inline]
    fn evaluate(
        &self,
        state: &Self::State,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Decision {
        let tokens = self.tokens_at(state, now);
        let after = tokens - i128::from(cost) * i128::from(self.period);
        let reset = self.refill_time(self.capacity() - after);
        // A read (cost 0) is always admitted, even while delayed requests keep the bucket in debt.
        if after >= 0 || cost == 0 {
            return Decision::allow(self.limit, self.whole(after), reset);
        }
        let wait = self.refill_time(-after);
        match max_delay {
            Some(budget) if wait <= budget => Decision {
                delay: wait,
                ..Decision::allow(self.limit, 0, reset)
            },
            // In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
            _ => Decision::deny(
                self.limit,
                self.whole(tokens),
                self.refill_time(self.capacity() - tokens),
                wait - max_delay.unwrap_or(0),
            ),
        }
    }

    #[inline]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        let tokens = self.tokens_at(state, now) - i128::from(cost) * i128::from(self.period);
        // Policy validation bounds burst × period and limit × max_delay below 2^62.
        state.tokens = i64::try_from(tokens).unwrap_or(i64::MIN);
        state.last = now.max(state.last).max(1);
    }

    #[inline]
    fn refund(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 || state.last == 0 {
            return;
        }
        let tokens = (self.tokens_at(state, now) + i128::from(cost) * i128::from(self.period))
            .min(self.capacity());
        state.tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        state.last = now.max(state.last).max(1);
    }

    fn settle(&self, state: &mut Self::State, now: Micros, a: super::Admitted, real: u64) {
        let p = i128::from(self.period);
        let tokens = self.tokens_at(state, now);
        let tokens = if real < a.estimate {
            let refilled = i128::from(now.saturating_sub(a.at)) * i128::from(self.limit);
            let give = (i128::from(a.estimate - real) * p).min(a.shortfall_left(
                self.capacity(),
                p,
                refilled,
            ));
            if give <= 0 || state.last == 0 {
                return;
            }
            (tokens + give).min(self.capacity())
        } else {
            // At most one capacity of debt (see Algorithm::settle).
            (tokens - i128::from(real - a.estimate) * p).max(tokens.min(-self.capacity()))
        };
        state.tokens = i64::try_from(tokens).unwrap_or(i64::MIN);
        state.last = now.max(state.last).max(1);
    }

    fn rescale(&self, from: &Self, state: &Self::State, now: Micros) -> Self::State {
        if state.last == 0 || from == self {
            return *state;
        }
        // Used = capacity − tokens at `now` (debt included), in tokens; kept, rounded up.
        let used = from.capacity() - from.tokens_at(state, now);
        if used <= 0 {
            return TokenBucketState::default();
        }
        let used = sat(super::carry_scaled(
            used as u128,
            from.period,
            self.limit,
            self.period,
        ));
        let tokens = self.capacity() - i128::from(used);
        TokenBucketState {
            // Within the fixed-point range the policy's validation guarantees (2^62).
            tokens: tokens.max(-(1 << 62)) as i64,
            last: now.max(state.last).max(1),
        }
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        if state.last == 0 {
            return 0;
        }
        let deficit = self.capacity() - i128::from(state.tokens);
        state.last.saturating_add(self.refill_time(deficit))
    }
}
