//! The optional local over-limit cache: a request denied by Redis with `retry_after` T is
//! denied again locally, without a round trip, until T has passed.
//!
//! It never admits anything: a hit is always a denial, and only while the denial is certain.
//! A denial is cached only for requests under one key and cost, only when a *reject-mode*
//! policy denied it (shadow policies never deny, delay-mode waits change), and T is the
//! longest such `retry_after`. Until T that policy keeps denying whatever else happens:
//! other requests only consume more, and a larger cost is denied longer. A refund or reset
//! through this store forgets the key's entries. The only cost is that a request may be
//! denied up to one round trip after Redis would admit it again (T is measured from when the
//! reply arrives), and that another instance's refund or reset is not seen.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluicegate_core::{Decision, Mode, Policy, Verdict, clock::micros};

/// Entries kept at most: bounded memory whatever the client key space.
pub const LOCAL_CACHE_CAPACITY: usize = 10_000;

struct Denial {
    until: Instant,
    stored: Instant,
    cost: u64,
    decisions: Vec<Decision>,
}

#[derive(Default)]
pub(crate) struct DenyCache {
    entries: Mutex<HashMap<String, Denial>>,
}

impl DenyCache {
    /// The cached denial for the request whose state keys are `key` (joined by newlines),
    /// if one still holds for `cost`.
    pub(crate) fn lookup(&self, key: &str, cost: u64, policies: &[Arc<Policy>]) -> Option<Verdict> {
        if cost == 0 {
            return None;
        }
        let now = Instant::now();
        let decided: Vec<(Arc<Policy>, Decision, u64)> = {
            let entries = self.entries.lock();
            let denial = entries.get(key)?;
            if now >= denial.until || cost < denial.cost || denial.decisions.len() != policies.len()
            {
                return None;
            }
            let elapsed = micros(now - denial.stored);
            policies
                .iter()
                .zip(&denial.decisions)
                .map(|(policy, decision)| {
                    let mut d = *decision;
                    d.reset_after = d.reset_after.saturating_sub(elapsed);
                    d.retry_after = d.retry_after.map(|r| r.saturating_sub(elapsed).max(1));
                    // Already corrected for the unconsumed cost when first combined.
                    (Arc::clone(policy), d, 0)
                })
                .collect()
        };
        // Recombined under the current policies: if one was switched to shadow mode since,
        // the cached denial no longer holds and Redis must decide.
        let verdict = Verdict::combine(decided);
        (!verdict.allowed).then_some(verdict)
    }

    /// Remembers `verdict` if it is a denial the cache may repeat.
    pub(crate) fn remember(&self, key: String, cost: u64, verdict: &Verdict) {
        if verdict.allowed || cost == 0 {
            return;
        }
        let Some(retry) = verdict
            .decisions
            .iter()
            // A concurrency denial ends as soon as a holder releases, from any instance:
            // it is never certain until its retry_after.
            .filter(|d| {
                !d.decision.allowed
                    && d.policy.mode() == Mode::Reject
                    && !d.policy.algorithm().is_concurrency()
            })
            .filter_map(|d| d.decision.retry_after)
            .max()
        else {
            return;
        };
        let now = Instant::now();
        let denial = Denial {
            until: now + Duration::from_micros(retry),
            stored: now,
            cost,
            decisions: verdict.decisions.iter().map(|d| d.decision).collect(),
        };
        let mut entries = self.entries.lock();
        if entries.len() >= LOCAL_CACHE_CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, d| d.until > now);
            if entries.len() >= LOCAL_CACHE_CAPACITY {
                return;
            }
        }
        entries.insert(key, denial);
    }

    /// Forgets every entry that involves the state key `state_key`.
    pub(crate) fn forget(&self, state_key: &str) {
        self.entries
            .lock()
            .retain(|key, _| !key.split('\n').any(|k| k == state_key));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluicegate_core::AlgorithmKind;

    use super::*;

    fn policy(mode: Mode) -> Arc<Policy> {
        Arc::new(
            Policy::builder("p", AlgorithmKind::TokenBucket, 1, Duration::from_secs(60))
                .mode(mode)
                .max_delay(Duration::from_millis(1))
                .build()
                .unwrap(),
        )
    }

    fn denied(policy: &Arc<Policy>) -> Verdict {
        Verdict::combine(vec![(
            Arc::clone(policy),
            Decision::deny(1, 0, 60_000_000, 30_000_000),
            1,
        )])
    }

    #[test]
    fn repeats_reject_denials_for_equal_or_larger_costs() {
        let cache = DenyCache::default();
        let p = policy(Mode::Reject);
        cache.remember("k".into(), 2, &denied(&p));
        let ps = [Arc::clone(&p)];
        assert!(
            cache.lookup("k", 1, &ps).is_none(),
            "a smaller cost may fit"
        );
        assert!(cache.lookup("k", 0, &ps).is_none(), "reads go to Redis");
        let hit = cache.lookup("k", 2, &ps).unwrap();
        assert!(!hit.allowed);
        assert!(hit.decisions[0].decision.retry_after.unwrap() <= 30_000_000);
        cache.forget("k");
        assert!(cache.lookup("k", 2, &ps).is_none());
    }

    #[test]
    fn never_caches_delay_or_shadow_denials() {
        let cache = DenyCache::default();
        cache.remember("d".into(), 1, &denied(&policy(Mode::Delay)));
        cache.remember("s".into(), 1, &denied(&policy(Mode::Shadow)));
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_policy_now_in_shadow_mode_is_not_denied_locally() {
        let cache = DenyCache::default();
        cache.remember("k".into(), 1, &denied(&policy(Mode::Reject)));
        assert!(cache.lookup("k", 1, &[policy(Mode::Shadow)]).is_none());
    }

    #[test]
    fn stays_bounded() {
        let cache = DenyCache::default();
        let v = denied(&policy(Mode::Reject));
        for i in 0..LOCAL_CACHE_CAPACITY + 10 {
            cache.remember(format!("k{i}"), 1, &v);
        }
        assert_eq!(cache.len(), LOCAL_CACHE_CAPACITY);
    }
}
