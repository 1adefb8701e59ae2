//! Concurrency: at most `limit` requests of a key in flight. Rate is not load: a report
//! that takes twenty seconds, a download or an LLM completion is limited by how many run at
//! once, like nginx `limit_conn` or Traefik `InFlightReq`.
//!
//! An admitted request takes a *lease* of `cost` slots that lasts until it is released
//! ([`Algorithm::release`], when the request ends) or until `lease` has passed since it
//! was taken, so a holder that crashed, hung or lost its connection cannot leak slots
//! forever. The lease duration travels in the policy's `period` field (see
//! [`Policy::lease`](crate::Policy::lease)).
//!
//! # Identity of a lease
//! A lease is known by its expiry time and its cost. Expiries are unique within a key: a
//! new lease expires at `max(now + lease, last + 1 µs)`, where `last` is the latest expiry
//! the key ever gave (kept until it passes, even when every lease was released), so the
//! leases of a key are in strictly increasing expiry order and one `(expires_at, cost)`
//! names exactly one of them, now or later.
//! The rule is pure arithmetic on the state, so the Redis script (a sorted set scored by
//! expiry, see `concurrency.lua`) computes the same expiry to the microsecond, and a lease
//! taken by one instance can be released by another. A stale release (the lease already
//! expired or released) matches nothing and changes nothing.
//!
//! # Numbers
//! `remaining` is the free slots; `reset_after` is until the newest lease expires (every
//! slot free again even if no holder releases); a denial's `retry_after` is until enough
//! of the oldest leases expire for this request's cost, which for cost 1 is when the
//! earliest lease expires. Releases can only make it sooner.

use std::collections::VecDeque;

use super::{Algorithm, Quota};
use crate::clock::Micros;
use crate::decision::Decision;

/// The concurrency limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    limit: u64,
    lease: Micros,
}

/// A key's leases, in increasing expiry order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConcurrencyState {
    /// `(expires_at, cost)`, strictly increasing in `expires_at`. Entries at or before `now`
    /// have expired and no longer count.
    pub leases: VecDeque<(Micros, u64)>,
    /// The latest expiry ever given to a lease of this key (0: none). New leases expire
    /// after it, so a lease released and then named again (a stale or repeated release)
    /// can never match a newer lease; the state is kept until it has passed.
    pub last: Micros,
}

impl Concurrency {
    /// At most `limit` in flight; a lease not released is freed after `lease` µs.
    pub fn new(limit: u64, lease: Micros) -> Self {
        Concurrency {
            limit,
            lease: lease.max(1),
        }
    }

    /// The live leases at `now`: `(cost in flight, newest expiry)`.
    fn live(&self, state: &ConcurrencyState, now: Micros) -> (u64, Option<Micros>) {
        let used = state
            .leases
            .iter()
            .filter(|(at, _)| *at > now)
            .map(|(_, cost)| *cost)
            .fold(0u64, u64::saturating_add);
        let newest = state
            .leases
            .back()
            .map(|(at, _)| *at)
            .filter(|at| *at > now);
        (used, newest)
    }

    /// When a lease taken at `now` expires: unique within the key (see the module doc).
    pub fn expiry(&self, state: &ConcurrencyState, now: Micros) -> Micros {
        let base = now.saturating_add(self.lease);
        if state.last >= base {
            state.last.saturating_add(1)
        } else {
            base
        }
    }
}

/// Drops the leases that expired at `now` (they can never count again: time only moves on).
fn drop_expired(state: &mut ConcurrencyState, now: Micros) {
    while state.leases.front().is_some_and(|(at, _)| *at <= now) {
        state.leases.pop_front();
    }
}

impl From<Quota> for Concurrency {
    fn from(q: Quota) -> Self {
        Concurrency::new(q.limit, q.period)
    }
}

impl Algorithm for Concurrency {
    type State = ConcurrencyState;

    #[inline]
    fn evaluate(&self, state: &Self::State, now: Micros, cost: u64, _: Option<Micros>) -> Decision {
        let (used, newest) = self.live(state, now);
        let until = |at: Micros| at.saturating_sub(now);
        if used.saturating_add(cost) <= self.limit {
            if cost == 0 {
                return Decision::allow(self.limit, self.limit - used, newest.map_or(0, until));
            }
            let expires_at = self.expiry(state, now);
            return Decision {
                lease: expires_at,
                ..Decision::allow(self.limit, self.limit - used - cost, until(expires_at))
            };
        }
        // Walk the live leases oldest first until enough cost has expired.
        let mut still_used = used;
        let mut retry = self.lease;
        for (at, lease_cost) in state.leases.iter().filter(|(at, _)| *at > now) {
            still_used -= lease_cost;
            if still_used + cost <= self.limit {
                retry = until(*at);
                break;
            }
        }
        Decision::deny(
            self.limit,
            self.limit.saturating_sub(used),
            newest.map_or(0, until),
            retry,
        )
    }

    #[inline]
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64) {
        if cost == 0 {
            return;
        }
        let expires_at = self.expiry(state, now);
        drop_expired(state, now);
        state.leases.push_back((expires_at, cost));
        state.last = expires_at;
    }

    /// Gives back `cost` from the newest leases (a request admitted and then cancelled at
    /// once). A request that ends normally frees its own lease with [`Algorithm::release`].
    #[inline]
    fn refund(&self, state: &mut Self::State, now: Micros, mut cost: u64) {
        drop_expired(state, now);
        while cost > 0 {
            let Some(back) = state.leases.back_mut() else {
                return;
            };
            let take = back.1.min(cost);
            back.1 -= take;
            cost -= take;
            if back.1 == 0 {
                state.leases.pop_back();
            }
        }
    }

    /// Nothing to settle: a lease is freed by [`Algorithm::release`], not by a cost.
    fn settle(&self, _: &mut Self::State, _: Micros, _: super::Admitted, _: u64) {}
    fn rescale(&self, _from: &Self, state: &Self::State, _now: Micros) -> Self::State {
        // Leases in flight stay held (and keep their expiry).
        state.clone()
    }

    #[inline]
    fn idle_at(&self, state: &Self::State) -> Micros {
        state.last
    }

    fn heap_bytes(state: &Self::State) -> usize {
        state.leases.capacity() * std::mem::size_of::<(Micros, u64)>()
    }

    /// Frees the lease `(expires_at, cost)` if the key still holds it; returns whether it did.
    /// A lease already released or expired is not an error: releasing it again changes nothing.
    fn release(
        &self,
        state: &mut ConcurrencyState,
        now: Micros,
        expires_at: Micros,
        cost: u64,
    ) -> bool {
        drop_expired(state, now);
        match state
            .leases
            .binary_search_by_key(&expires_at, |(at, _)| *at)
        {
            Ok(i) if state.leases[i].1 == cost => {
                state.leases.remove(i);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Micros = 1_700_000_000_000_000;

    fn take(alg: &Concurrency, state: &mut ConcurrencyState, now: Micros, cost: u64) -> Decision {
        let d = alg.evaluate(state, now, cost, None);
        if d.allowed {
            alg.consume(state, now, cost);
        }
        d
    }

    #[test]
    fn leases_in_one_microsecond_get_distinct_expiries() {
        let alg = Concurrency::new(3, 1_000);
        let mut st = ConcurrencyState::default();
        let a = take(&alg, &mut st, T, 1);
        let b = take(&alg, &mut st, T, 1);
        assert_eq!((a.lease, b.lease), (T + 1_000, T + 1_001));
        assert_eq!(b.remaining, 1);
        let c = take(&alg, &mut st, T, 2);
        assert!(!c.allowed);
        assert_eq!(c.retry_after, Some(1_000));
        // Releasing the first lease makes room; releasing it twice frees nothing more.
        assert!(alg.release(&mut st, T, a.lease, 1));
        assert!(!alg.release(&mut st, T, a.lease, 1));
        assert!(take(&alg, &mut st, T, 2).allowed);
        assert!(!take(&alg, &mut st, T, 1).allowed);
    }

    #[test]
    fn an_unreleased_lease_expires() {
        let alg = Concurrency::new(1, 1_000);
        let mut st = ConcurrencyState::default();
        let a = take(&alg, &mut st, T, 1);
        assert!(!take(&alg, &mut st, T + 999, 1).allowed);
        let b = take(&alg, &mut st, T + 1_000, 1);
        assert!(b.allowed);
        // The expired lease's release does not free the new holder's slot.
        assert!(!alg.release(&mut st, T + 1_000, a.lease, 1));
        assert!(!take(&alg, &mut st, T + 1_000, 1).allowed);
        assert_eq!(alg.idle_at(&st), T + 2_000);
    }
}
