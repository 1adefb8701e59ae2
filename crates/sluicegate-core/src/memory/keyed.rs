//! [`KeyedLimiter`]: one policy over many keys, typed by its algorithm, with no boxing on
//! the way: the building block for callers that need one limit and the fastest path (and
//! what the benchmarks compare with governor's keyed limiter).

use parking_lot::Mutex;

use crate::algorithm::Algorithm;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::policy::Policy;

use super::DEFAULT_MAX_KEYS;
use super::Key;
use super::fingerprint::{Fingerprint, KeyHasher};
use super::raw::RawTable;
use super::shard::{Padded, SWEEP_STEPS, shard_cap, shard_count};
use super::typed::EVICTION_SAMPLE;

type Shard<S> = Padded<Mutex<RawTable<S>>>;

/// One policy's limiter over many keys, bounded by `max_keys` like the
/// [`MemoryStore`](super::MemoryStore) (same tables, same eviction).
///
/// A key is any [`Key`]: a string, a byte string, an unsigned integer or an IP address.
/// Give it the key as the caller has it: a `u64` id is hashed as its 8 bytes, where the
/// same id formatted as text would be formatted first and then hashed over three words.
/// One limiter takes one key type (a `u64` key and a string of the same bytes are the
/// same key).
///
/// ```
/// use std::time::Duration;
/// use sluicegate_core::{AlgorithmKind, Policy};
/// use sluicegate_core::algorithm::Gcra;
/// use sluicegate_core::memory::KeyedLimiter;
///
/// let policy = Policy::builder("api", AlgorithmKind::Gcra, 2, Duration::from_secs(1)).build()?;
/// let limiter = KeyedLimiter::with_max_keys(Gcra::from(sluicegate_core::algorithm::Quota::from(&policy)), policy, 10_000);
/// let now = 1_700_000_000_000_000;
/// assert!(limiter.check("alice", now, 1).allowed);
/// assert!(limiter.check("alice", now, 1).allowed);
/// assert!(!limiter.check("alice", now, 1).allowed);
/// assert!(limiter.check("bob", now, 1).allowed);
/// assert_eq!(limiter.len(), 2);
///
/// // Keyed by user id, as governor's `RateLimiter::keyed` is by any `Hash` key.
/// let by_id = KeyedLimiter::with_max_keys(Gcra::from(sluicegate_core::algorithm::Quota::from(limiter.policy())), limiter.policy().clone(), 10_000);
/// assert!(by_id.check(&1024u64, now, 2).allowed);
/// assert!(!by_id.check(&1024u64, now, 1).allowed);
/// assert!(by_id.check(&1025u64, now, 1).allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedLimiter<A: Algorithm> {
    algorithm: A,
    policy: Policy,
    max_delay: Option<Micros>,
    hasher: KeyHasher,
    max_keys: usize,
    shards: Box<[Shard<A::State>]>,
}

impl<A: Algorithm> KeyedLimiter<A> {
    /// A limiter running `algorithm` for `policy`, bounded by [`DEFAULT_MAX_KEYS`].
    pub fn new(algorithm: A, policy: Policy) -> Self {
        Self::with_max_keys(algorithm, policy, DEFAULT_MAX_KEYS)
    }

    /// A limiter tracking at most `max_keys` keys (at least 1).
    pub fn with_max_keys(algorithm: A, policy: Policy, max_keys: usize) -> Self {
        let max_keys = max_keys.max(1);
        let n = shard_count(max_keys);
        KeyedLimiter {
            algorithm,
            max_delay: policy.delay_budget(),
            policy,
            hasher: KeyHasher::new(),
            max_keys,
            shards: (0..n)
                .map(|i| Padded(Mutex::new(RawTable::new(shard_cap(max_keys, n, i)))))
                .collect(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The bound on tracked keys.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Decides a request of `cost` for `key` at `now` and, if admitted, consumes it. A denial
    /// changes nothing; `cost` 0 only reads. The caller keeps `cost` within the policy's
    /// capacity (see [`CheckRequest::validate`](crate::CheckRequest::validate)).
    #[inline]
    pub fn check<K: Key + ?Sized>(&self, key: &K, now: Micros, cost: u64) -> Decision {
        let fp = self.fingerprint(key);
        let alg = &self.algorithm;
        let idle_at = |s: &A::State| alg.idle_at(s);
        let mut table = self.shards[fp.shard(self.shards.len())].lock();
        let decision = match table.find(fp) {
            Some(i) => {
                let decision = alg.evaluate(table.state(i), now, cost, self.max_delay);
                if decision.allowed && cost > 0 {
                    alg.consume(table.state_mut(i), now, cost);
                    table.note_idle_at(now.saturating_add(decision.reset_after));
                }
                decision
            }
            None => {
                let decision = alg.evaluate(&A::State::default(), now, cost, self.max_delay);
                if decision.allowed && cost > 0 {
                    if table.is_full() && !table.drop_expired(now, idle_at, &|_| false) {
                        // The state whose loss admits the fewest extra requests goes.
                        let loss =
                            |s: &A::State| u64::MAX - alg.evaluate(s, now, 0, None).remaining;
                        table.drop_cheapest(EVICTION_SAMPLE, loss, |_| false, idle_at);
                    }
                    let i = table.insert(fp);
                    alg.consume(table.state_mut(i), now, cost);
                    table.note_idle_at(now.saturating_add(decision.reset_after));
                }
                decision
            }
        };
        table.sweep(now, SWEEP_STEPS, idle_at, &|_| false);
        decision
    }

    /// What a request would be told now, changing nothing.
    pub fn peek<K: Key + ?Sized>(&self, key: &K, now: Micros) -> Decision {
        self.check(key, now, 0)
    }

    /// Gives back what an admitted request of `cost` took (see [`Algorithm::refund`]).
    pub fn refund<K: Key + ?Sized>(&self, key: &K, now: Micros, cost: u64) {
        let fp = self.fingerprint(key);
        let mut table = self.shards[fp.shard(self.shards.len())].lock();
        if let Some(i) = table.find(fp) {
            let state = table.state_mut(i);
            self.algorithm.refund(state, now, cost);
            let idle = self.algorithm.idle_at(state);
            table.note_idle_at(idle);
        }
    }

    /// Forgets `key`; returns whether it was tracked.
    pub fn remove<K: Key + ?Sized>(&self, key: &K) -> bool {
        let fp = self.fingerprint(key);
        let alg = &self.algorithm;
        self.shards[fp.shard(self.shards.len())]
            .lock()
            .remove(fp, |s| alg.idle_at(s))
    }

    #[inline(always)]
    fn fingerprint<K: Key + ?Sized>(&self, key: &K) -> Fingerprint {
        key.with_bytes(|bytes| self.hasher.fingerprint_bytes(bytes))
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes allocated for state: the cells of every shard, plus the shards themselves.
    pub fn allocated_bytes(&self) -> usize {
        let shards = std::mem::size_of_val(&*self.shards);
        shards
            + self
                .shards
                .iter()
                .map(|s| s.lock().allocated_bytes())
                .sum::<usize>()
    }
}
