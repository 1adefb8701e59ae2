//! Concurrency leases and reserve-then-settle on the dashboard.
//!
//! - [`LeaseKeys`]: the keys whose leases this process handed out, each until its newest
//!   lease expires — a fixed number of them, so a flood of keys cannot grow it. At each poll
//!   the page's numbers are *read from the store* through a [`LeaseReader`] (a decision of
//!   cost 0, which takes nothing): slots held now, releases and expiries included, never a
//!   count kept on the side that a lost release could skew.
//! - [`SettleActivity`]: counters of what settles and releases did since the start, fed by
//!   the server around its store, whichever path settled (`POST /v1/settle`, a route's
//!   `settle`/`count`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluicegate_core::{BoxFuture, Micros, Settled, StoreError};

use crate::snapshot::SettleCounts;

/// Most `(policy, key)` pairs followed at once; when full, the one whose lease expires
/// first makes room.
pub const MAX_LEASE_KEYS: usize = 256;

/// `(policy, key)`.
pub type LeaseItem = (Arc<str>, Arc<str>);

/// What a read of one `(policy, key)` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRead {
    /// Slots its leases hold now.
    pub held: u64,
    /// The key's limit (an override's, where it has one).
    pub limit: u64,
    /// The policy's limit.
    pub policy_limit: u64,
}

/// Reads, without taking anything, the slots held now by each `(policy, key)`; `None` when
/// the policy is no longer a loaded concurrency policy or the store did not answer. The
/// server implements it on its current configuration and store.
pub trait LeaseReader: Send + Sync + 'static {
    /// One answer per item, in order.
    fn read<'a>(&'a self, items: &'a [LeaseItem]) -> BoxFuture<'a, Vec<Option<LeaseRead>>>;
}

/// The keys holding (or that recently held) leases: `(policy, key)` → when the newest lease
/// handed out for it expires, µs.
#[derive(Debug, Default)]
pub struct LeaseKeys {
    until: HashMap<LeaseItem, Micros>,
}

impl LeaseKeys {
    /// A lease of `item` expiring at `expires_at` was handed out.
    pub fn note(&mut self, item: LeaseItem, expires_at: Micros) {
        if let Some(until) = self.until.get_mut(&item) {
            *until = (*until).max(expires_at);
            return;
        }
        if self.until.len() >= MAX_LEASE_KEYS {
            let first = self
                .until
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(item, _)| item.clone());
            if let Some(first) = first {
                self.until.remove(&first);
            }
        }
        self.until.insert(item, expires_at);
    }

    /// The items whose newest lease has not expired at `now` (the others hold nothing, and
    /// are forgotten).
    pub fn live(&mut self, now: Micros) -> Vec<LeaseItem> {
        let mut items: Vec<LeaseItem> = self.live_until(now).into_iter().map(|(i, _)| i).collect();
        items.sort();
        items
    }

    /// [`LeaseKeys::live`] with when each item's newest lease expires, unsorted.
    pub fn live_until(&mut self, now: Micros) -> Vec<(LeaseItem, Micros)> {
        self.until.retain(|_, until| *until > now);
        self.until.iter().map(|(i, u)| (i.clone(), *u)).collect()
    }

    /// Items followed.
    pub fn len(&self) -> usize {
        self.until.len()
    }

    /// Whether none is followed.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }
}

/// What settles and releases did since the start (lock-free counters).
#[derive(Debug, Default)]
pub struct SettleActivity {
    settled: AtomicU64,
    refunded: AtomicU64,
    charged: AtomicU64,
    replayed: AtomicU64,
    expired: AtomicU64,
    failed: AtomicU64,
    releases: AtomicU64,
}

impl SettleActivity {
    /// Records a settle of `estimate` to `real` and its answer.
    pub fn settle(&self, estimate: u64, real: u64, result: &Result<Settled, StoreError>) {
        let counter = match result {
            Ok(Settled::Done) => {
                if real < estimate {
                    self.refunded.fetch_add(1, Ordering::Relaxed);
                } else if real > estimate {
                    self.charged.fetch_add(1, Ordering::Relaxed);
                }
                &self.settled
            }
            Ok(Settled::Replayed) => &self.replayed,
            Ok(Settled::Expired) => &self.expired,
            Err(_) => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `leases` leases released (freed, or already free).
    pub fn released(&self, leases: usize) {
        self.releases.fetch_add(leases as u64, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn counts(&self) -> SettleCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SettleCounts {
            settled: get(&self.settled),
            refunded: get(&self.refunded),
            charged: get(&self.charged),
            replayed: get(&self.replayed),
            expired: get(&self.expired),
            failed: get(&self.failed),
            releases: get(&self.releases),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(p: &str, k: &str) -> LeaseItem {
        (Arc::from(p), Arc::from(k))
    }

    #[test]
    fn keys_are_bounded_and_forgotten_when_their_leases_expire() {
        let mut keys = LeaseKeys::default();
        for i in 0..(MAX_LEASE_KEYS as u64 + 50) {
            keys.note(item("c", &format!("k{i}")), 1_000 + i);
        }
        assert_eq!(keys.len(), MAX_LEASE_KEYS);
        // The earliest expiries made room.
        assert!(!keys.live(0).contains(&item("c", "k0")));
        keys.note(item("c", "k300"), 10_000);
        assert_eq!(keys.live(5_000), [item("c", "k300")]);
        assert!(keys.live(10_000).is_empty());
    }

    #[test]
    fn settles_are_counted_by_answer() {
        let a = SettleActivity::default();
        a.settle(10, 4, &Ok(Settled::Done));
        a.settle(10, 14, &Ok(Settled::Done));
        a.settle(10, 10, &Ok(Settled::Done));
        a.settle(10, 4, &Ok(Settled::Replayed));
        a.settle(10, 4, &Ok(Settled::Expired));
        a.settle(10, 4, &Err(StoreError::Unavailable("down".into())));
        a.released(2);
        let c = a.counts();
        assert_eq!(
            (
                c.settled, c.refunded, c.charged, c.replayed, c.expired, c.failed, c.releases
            ),
            (3, 1, 1, 1, 1, 1, 2)
        );
    }
}
