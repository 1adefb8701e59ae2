//! The in-memory store: limiter state in this process, shared by all its threads, bounded
//! by `max_keys`.
//!
//! # Layout
//! The store has up to 256 shards, each behind one mutex. A key's shard comes from its
//! fingerprint (see below), so every policy's state of one key lives in one shard and a
//! check of several policies on one key takes one lock. A check whose policies use
//! different keys ([`Store::check_keyed`]) locks their shards in ascending order, so two
//! such checks cannot deadlock. Within a shard each policy has an open-addressing table of
//! `(fingerprint, state)` cells: 8 bytes plus the algorithm's state (8 bytes for gcra, 16 for
//! token_bucket), at a load between 7/12 and 7/8. Fixed-size states live in the cells; only
//! the sliding log keeps a per-key heap buffer.
//!
//! # Keys
//! Keys are not stored. A key is known by a 63-bit fingerprint of a keyed SipHash-1-3
//! (a random 128-bit key per store): two keys share state only if their
//! fingerprints collide, about `n / 2^63` for a new key among `n` tracked ones (10^-13 at a
//! million keys), and without the per-process key nobody can choose a key that collides.
//!
//! # Bound and eviction
//! `max_keys` bounds the (policy, key) states of all policies together: it is split evenly
//! over the shards (the shard bounds add up to `max_keys`), and a shard at its bound makes
//! room for a new state by evicting one:
//! 1. an expired state, of any policy in the shard, if there is one: a state whose
//!    `idle_at <= now` is identical to a fresh key, so evicting it loses nothing;
//! 2. else, in the policy with the most states in the shard, the state whose loss admits
//!    the fewest extra requests among 16 sampled after a moving hand: the one with the most
//!    `remaining` (a state back to full loses nothing; a client being limited loses the
//!    most), the one not recently used on a tie. A flood of unique keys, each with one
//!    request, therefore evicts its own keys and never a client being limited (unless the
//!    flood keys are spent as far as it is: the attacker then pays a full budget per key).
//!    The states of the request in progress are never evicted.
//!
//! `max_memory` ([`MemoryStore::with_max_memory`]) bounds the same states in bytes, split
//! over the shards the same way: cells, sliding-log entries and concurrency leases (each
//! table keeps a running count of its states' heap bytes) and running penalties. A shard
//! over its share makes room as above before tracking a new key, and after an admitted
//! request grew a log, evicts until it is within its share again (never the state of the
//! request in progress: a single log larger than a shard's share, up to `32 × limit`
//! bytes against `max_memory / shards`, is the one way past the bound).
//!
//! Expired state is also reclaimed without waiting for pressure: every operation moves a
//! sweep hand over two cells of each table it used, and drops the expired states it finds.
//! Each table keeps a lower bound of its states' expiry times, so a table with nothing
//! expired is skipped without looking. There is no stop-the-world sweep: the longest
//! pause is one shard scanning its own cells once, under its own lock.
//!
//! Because the bound is per shard, eviction can start before the whole store holds
//! `max_keys` states, when the fullest shard fills (at about 95% of a million), and never
//! after; offered exactly `max_keys` distinct keys, the store keeps about 99.4% of them.

#[cfg(test)]
mod fast_path_tests;
mod fingerprint;
mod key;
mod keyed;
mod persist;
mod raw;
mod registry;
mod shard;
mod siphash;
mod snapshot;
mod typed;

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::clock::{Clock, Micros, SystemClock};
use crate::decision::Decision;
use crate::overrides::Override;
use crate::policy::Policy;
use crate::store::{
    BoxFuture, CheckRequest, KeyedCheck, Lease, Settled, Settlement, Store, StoreError,
};
use crate::verdict::Verdict;
use crate::verdict::{PolicyArc, VerdictOf};

use fingerprint::{Fingerprint, KeyHasher};
use registry::{PolicyRef, Registry};
use shard::{Padded, StoreShard, Target, shard_cap, shard_count};

pub use key::Key;
pub use keyed::KeyedLimiter;
pub use snapshot::{SnapshotError, SnapshotInfo, SnapshotWriter};

/// Default bound on tracked keys.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// `max_memory` allows at most one tracked state per this many bytes: a cell of the largest
/// state (48 bytes) at the lowest load, after a growth step, takes about 82, so cells alone
/// stay within two thirds of the bound and the rest is for logs and leases.
const BYTES_PER_STATE: usize = 128;

/// Smallest share of `max_memory` a shard gets (the shard count shrinks to keep it).
const MIN_SHARD_BYTES: usize = 64 * 1024;

/// How a verdict that owns its policies holds `policy`: by the process's immortal copy
/// of it when there is one (no reference count), else by a clone of the caller's `Arc`.
#[inline(always)]
fn owned(policy: &Arc<Policy>, pinned: Option<&'static Arc<Policy>>) -> PolicyArc<'static> {
    match pinned {
        Some(copy) => PolicyArc::Borrowed(copy),
        None => PolicyArc::Owned(Arc::clone(policy)),
    }
}

/// The verdict of one policy whose check [`StoreShard::check_gcra`] declined: the
/// one-pass check of any algorithm ([`StoreShard::decide_declined`]), out of line.
#[inline(never)]
fn verdict_declined<'v>(
    shard: &mut StoreShard,
    target: Target<'_>,
    now: Micros,
    cost: u64,
    policy: PolicyArc<'v>,
) -> Result<VerdictOf<'v>, StoreError> {
    let decision = shard.decide_declined(target, now, cost);
    Ok(VerdictOf::one(policy, decision, now))
}

/// State for every policy in process memory.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
/// let store = MemoryStore::new(1000);
/// let policy = Arc::new(Policy::builder("p", AlgorithmKind::FixedWindow, 2, Duration::from_secs(60)).build().unwrap());
/// let policies = [policy];
/// let request = CheckRequest::new(&policies, "client", 1);
/// assert!(store.check_now(request).unwrap().allowed);
/// assert!(store.check_now(request).unwrap().allowed);
/// assert!(!store.check_now(request).unwrap().allowed);
/// assert_eq!(store.len(), 1);
/// ```
pub struct MemoryStore<C: Clock = SystemClock> {
    clock: C,
    max_keys: usize,
    max_memory: Option<usize>,
    hasher: KeyHasher,
    registry: Registry,
    shards: Box<[Padded<Mutex<StoreShard>>]>,
    /// Reservations settled, until they expire (id → expiry), at most `max_keys`.
    settled: Mutex<std::collections::HashMap<String, Micros>>,
}

impl MemoryStore<SystemClock> {
    /// A store on the wall clock tracking at most `max_keys` (policy, key) states.
    pub fn new(max_keys: usize) -> Self {
        Self::with_clock(max_keys, SystemClock)
    }
}

impl<C: Clock> MemoryStore<C> {
    /// A store reading time from `clock`. `max_keys` is at least 1.
    pub fn with_clock(max_keys: usize, clock: C) -> Self {
        let max_keys = max_keys.max(1);
        let n = shard_count(max_keys);
        MemoryStore {
            clock,
            max_keys,
            max_memory: None,
            hasher: KeyHasher::new(),
            registry: Registry::default(),
            shards: (0..n)
                .map(|i| {
                    let cap = shard_cap(max_keys, n, i);
                    Padded(Mutex::new(StoreShard::new(cap, usize::MAX)))
                })
                .collect(),
            settled: Mutex::default(),
        }
    }

    /// Bounds the bytes of all limiter state (`store.max_memory`): cells, sliding-log
    /// entries, leases and penalties, as [`MemoryStore::bytes`] counts them. Each shard keeps
    /// to its share, evicting as for `max_keys` (see the module documentation) when a new
    /// key or a longer log would go beyond it. The bound also caps the tracked states at
    /// `bytes / 128` (so that cells alone never fill it). Call it before the first check.
    pub fn with_max_memory(mut self, bytes: usize) -> Self {
        let max_keys = self.max_keys.min(bytes / BYTES_PER_STATE).max(1);
        // Fewer shards for a small bound: each share must hold a few long logs, or the log
        // being written would crowd every other state (a limited client's too) out of it.
        let most = (bytes / MIN_SHARD_BYTES).max(1);
        let n = shard_count(max_keys).min(1 << most.ilog2());
        self.max_memory = Some(bytes);
        self.shards = (0..n)
            .map(|i| {
                let cap = shard_cap(max_keys, n, i);
                let byte_cap = shard_cap(bytes, n, i);
                Padded(Mutex::new(StoreShard::new(cap, byte_cap)))
            })
            .collect();
        self
    }

    /// The bound in bytes, if any ([`MemoryStore::with_max_memory`]).
    pub fn max_memory(&self) -> Option<usize> {
        self.max_memory
    }

    /// Bytes of limiter state held: every shard's cells, the sliding logs' and leases'
    /// buffers and the running penalties (what `max_memory` bounds).
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes()).sum()
    }

    /// Drops the state of every policy not in `keep` (call it with the new policies before
    /// a reloaded configuration decides). A policy keeps its state when its counting is
    /// unchanged (same [`CountingKey`](crate::CountingKey): name, algorithm, limit, period,
    /// burst, calendar), whatever its mode, `max_delay`, `on_store_error` or `penalty`
    /// became; when only its limit, burst, period or calendar changed, every key keeps what
    /// it has used ([`Algorithm::rescale`](crate::algorithm::Algorithm::rescale), done shard
    /// by shard when each is next touched). Only a change of algorithm starts afresh.
    pub fn retain_policies(&self, keep: &[Arc<Policy>]) {
        let dropped = self.registry.retain(keep);
        if dropped.is_empty() {
            return;
        }
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            for r in &dropped {
                shard.drop_policy(r.index, r.id);
            }
        }
        self.registry.release(&dropped);
    }

    /// The clock the store decides with.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The bound on tracked (policy, key) states.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Decides synchronously (the store never waits on I/O).
    ///
    /// Inlined into the caller so that a request under one policy (the common one) calls
    /// nothing but the decision itself; several policies take [`MemoryStore::check_many`].
    /// Always, not left to rustc: with more than one caller it kept `check_now` out of
    /// line, and the verdict then went through memory once more (538 against 461
    /// instructions a gcra check, core.md's fifth pass); the one-policy path is small.
    ///
    /// The verdict owns its policy without touching the caller's `Arc`: it refers to the
    /// process's immortal copy of the policy (an equal one, kept for the store's registry:
    /// no reference count, no locked instruction), and clones the `Arc` only past the
    /// bound on such copies or for several policies.
    #[inline(always)]
    pub fn check_now(&self, request: CheckRequest<'_>) -> Result<Verdict, StoreError> {
        self.check_with(request, owned)
    }

    /// [`MemoryStore::check_now`] with a verdict that refers to the request's policies
    /// ([`PolicyArc`]) instead of cloning their `Arc`s: no reference count is touched, two
    /// locked instructions a decision fewer (an increment, and a decrement when the verdict
    /// is dropped). [`VerdictOf::into_owned`] keeps it longer.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
    /// let store = MemoryStore::new(1000);
    /// let policies = [Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(60)).build().unwrap())];
    /// let verdict = store.check_borrowed(CheckRequest::new(&policies, "client", 1)).unwrap();
    /// assert!(verdict.allowed);
    /// assert_eq!(Arc::strong_count(&policies[0]), 1);
    /// let owned = verdict.into_owned();
    /// assert_eq!(Arc::strong_count(&policies[0]), 2);
    /// assert!(!store.check_now(CheckRequest::new(&policies, "client", 1)).unwrap().allowed);
    /// ```
    #[inline(always)]
    pub fn check_borrowed<'a>(
        &self,
        request: CheckRequest<'a>,
    ) -> Result<VerdictOf<'a>, StoreError> {
        self.check_with(request, |policy, _| PolicyArc::Borrowed(policy))
    }

    /// The check, each decided policy held in the verdict as `hold` makes it (given the
    /// process's immortal copy of the policy, when there is one).
    #[inline(always)]
    fn check_with<'a, 'v>(
        &self,
        request: CheckRequest<'a>,
        hold: impl Fn(&'a Arc<Policy>, Option<&'static Arc<Policy>>) -> PolicyArc<'v> + Copy,
    ) -> Result<VerdictOf<'v>, StoreError> {
        if let [policy] = request.policies {
            // `CheckRequest::validate` for one policy (no duplicate possible).
            crate::store::check_key(request.key)?;
            crate::store::check_cost(policy, request.cost)?;
            let now = self.clock.now();
            return self.verdict_one(policy, request.key, request.cost, now, hold);
        }
        self.check_many(request, hold)
    }

    /// [`MemoryStore::check_now`] for any number of policies, out of line.
    #[inline(never)]
    fn check_many<'a, 'v>(
        &self,
        request: CheckRequest<'a>,
        hold: impl Fn(&'a Arc<Policy>, Option<&'static Arc<Policy>>) -> PolicyArc<'v> + Copy,
    ) -> Result<VerdictOf<'v>, StoreError> {
        request.validate()?;
        let items: Vec<KeyedCheck<'a>> = request
            .policies
            .iter()
            .map(|policy| KeyedCheck::new(policy, request.key, request.cost))
            .collect();
        Ok(self.decide(&items, hold))
    }

    /// [`Store::check_keyed`], synchronously: each policy under its own key and cost.
    pub fn check_keyed_now(&self, items: &[KeyedCheck<'_>]) -> Result<Verdict, StoreError> {
        KeyedCheck::validate_all(items)?;
        if let [item] = items {
            let now = self.clock.now();
            return self.verdict_one(item.policy, item.key, item.cost, now, owned);
        }
        Ok(self.decide(items, owned))
    }

    fn shard_of(&self, fp: Fingerprint) -> usize {
        fp.shard(self.shards.len())
    }

    /// The verdict of one policy, held as `hold` makes it ([`MemoryStore::check_with`]).
    ///
    /// One lock, one probe of the key's cells, no allocation. A gcra table (the algorithm
    /// to choose when unsure) is checked here, inlined whole, and its decision goes
    /// straight from registers into the verdict. Anything else (another algorithm, a
    /// shard holding overrides or bounded in bytes, a policy with a penalty, a reload, a
    /// new key in a full shard) takes [`verdict_declined`], out of line, which returns the
    /// whole verdict: the fast path's decision is then never merged in memory with one a
    /// call returned (which had it stored, copied into the verdict, and copied again).
    #[inline(always)]
    fn verdict_one<'a, 'v>(
        &self,
        policy: &'a Arc<Policy>,
        key: &str,
        cost: u64,
        now: Micros,
        hold: impl Fn(&'a Arc<Policy>, Option<&'static Arc<Policy>>) -> PolicyArc<'v>,
    ) -> Result<VerdictOf<'v>, StoreError> {
        // The place by `Registry::place`, cache or lookup, inlined here: taking an
        // out-of-line path of its own on a cache miss (so that the place need not go
        // through memory) saved 4 instructions and cost ~7 ns a check (core.md, eighth
        // pass).
        let placed = self.registry.place(policy);
        let fp = self.hasher.fingerprint(key);
        let target = Target {
            r: placed.r,
            policy,
            fp,
            numbers: None,
        };
        let mut shard = self.shards[self.shard_of(fp)].lock();
        if let Some((decision, _unswept)) = shard.check_gcra(&target, now, cost) {
            // The verdict is written as this function's value, then the table's sweep
            // steps run (dropping `_unswept`: they cannot change the verdict), then the
            // shard is unlocked: no value of the decision is kept across either call.
            return Ok(VerdictOf::one(hold(policy, placed.pinned), decision, now));
        }
        verdict_declined(&mut shard, target, now, cost, hold(policy, placed.pinned))
    }

    /// The all-or-nothing step over validated items (each policy at most once): lock the
    /// shards involved in ascending order, decide every item, consume from all or none.
    fn decide<'a, 'v>(
        &self,
        items: &[KeyedCheck<'a>],
        hold: impl Fn(&'a Arc<Policy>, Option<&'static Arc<Policy>>) -> PolicyArc<'v>,
    ) -> VerdictOf<'v> {
        let now = self.clock.now();
        let parts: Vec<(PolicyRef, Fingerprint, usize)> = items
            .iter()
            .map(|item| {
                let fp = self.hasher.fingerprint(item.key);
                (self.registry.get_or_add(item.policy), fp, self.shard_of(fp))
            })
            .collect();
        let mut order: Vec<usize> = parts.iter().map(|(_, _, s)| *s).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, StoreShard>> =
            order.iter().map(|&s| self.shards[s].lock()).collect();
        let guard = |shard: usize| order.partition_point(|&s| s < shard);
        // Keys' own numbers (overrides), in item order; left empty, with no allocation,
        // while no item has any (the common case: a shard without overrides answers at once).
        let mut numbers: Vec<Option<Arc<Policy>>> = Vec::new();
        for (i, (item, (r, fp, s))) in items.iter().zip(&parts).enumerate() {
            let target = Target {
                r: *r,
                policy: item.policy,
                fp: *fp,
                numbers: None,
            };
            if let Some(own) = guards[guard(*s)].resolve(&target, now) {
                numbers.resize_with(i, || None);
                numbers.push(Some(own));
            }
        }
        let numbers_of = |i: usize| numbers.get(i).and_then(|n| n.as_deref());

        let decided: Vec<(PolicyArc<'v>, Decision, u64)> = items
            .iter()
            .zip(&parts)
            .enumerate()
            .map(|(i, (item, (r, fp, s)))| {
                let target = Target {
                    r: *r,
                    policy: item.policy,
                    fp: *fp,
                    numbers: numbers_of(i),
                };
                let d = guards[guard(*s)].evaluate(target, now, item.cost);
                (hold(item.policy, None), d, item.cost)
            })
            .collect();
        let mut verdict = VerdictOf::combine_of(decided);
        verdict.at = now;
        let decided = verdict.decisions.iter().map(|d| &d.decision);
        for (i, ((item, (r, fp, s)), decision)) in items.iter().zip(&parts).zip(decided).enumerate()
        {
            if verdict.consumes(i) {
                let protected = |index: usize, f: Fingerprint| {
                    parts
                        .iter()
                        .any(|(pr, pf, ps)| ps == s && pr.index == index && *pf == f)
                };
                let target = Target {
                    r: *r,
                    policy: item.policy,
                    fp: *fp,
                    numbers: numbers_of(i),
                };
                guards[guard(*s)].commit(target, now, item.cost, decision, &protected);
            }
        }
        for (r, _, s) in &parts {
            guards[guard(*s)].sweep(r.index, now);
        }
        verdict
    }

    /// Tracked (policy, key) states over all policies.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().count()).sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes allocated for state cells (not counting the sliding log's per-key buffers).
    pub fn allocated_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.shards)
            + self
                .shards
                .iter()
                .map(|s| s.lock().allocated_bytes())
                .sum::<usize>()
    }

    fn refund_now(&self, policies: &[Arc<Policy>], key: &str, cost: u64) {
        let now = self.clock.now();
        let fp = self.hasher.fingerprint(key);
        let mut shard = self.shards[self.shard_of(fp)].lock();
        for policy in policies {
            if let Some(r) = self.registry.get(policy) {
                let mut target = Target {
                    r,
                    policy,
                    fp,
                    numbers: None,
                };
                let numbers = shard.resolve(&target, now);
                target.numbers = numbers.as_deref();
                shard.refund(target, now, cost);
            }
        }
    }

    /// Frees `leases` (see [`Store::release`]); returns how many were still held.
    pub fn release_now(&self, leases: &[Lease]) -> usize {
        let now = self.clock.now();
        let mut freed = 0;
        for lease in leases {
            let Some(r) = self.registry.get(&lease.policy) else {
                continue;
            };
            let fp = self.hasher.fingerprint(&lease.key);
            let mut target = Target {
                r,
                policy: &lease.policy,
                fp,
                numbers: None,
            };
            let mut shard = self.shards[self.shard_of(fp)].lock();
            let numbers = shard.resolve(&target, now);
            target.numbers = numbers.as_deref();
            if shard.release(target, now, lease.expires_at, lease.cost) {
                freed += 1;
            }
        }
        freed
    }

    /// [`Store::settle`], synchronously. The ids settled are kept until they expire, at
    /// most `max_keys` of them: when that many unexpired ones are kept, a new settle is
    /// refused (an outage, so the estimate stays charged) rather than forgetting an id,
    /// which would let it be replayed.
    pub fn settle_now(&self, s: Settlement<'_>) -> Result<Settled, StoreError> {
        CheckRequest::new(s.policies, s.key, 0).validate()?;
        if s.remaining.len() != s.policies.len() {
            return Err(StoreError::NoPolicy);
        }
        let now = self.clock.now();
        if now >= s.expires_at {
            return Ok(Settled::Expired);
        }
        // An empty id settles without a one-time marker (the caller settles once).
        if !s.id.is_empty() {
            let mut settled = self.settled.lock();
            if settled.get(s.id).is_some_and(|until| *until > now) {
                return Ok(Settled::Replayed);
            }
            if settled.len() >= self.max_keys {
                settled.retain(|_, until| *until > now);
                if settled.len() >= self.max_keys {
                    return Err(StoreError::Unavailable(
                        "too many reservations settled recently".into(),
                    ));
                }
            }
            settled.insert(s.id.to_owned(), s.expires_at);
        }
        let fp = self.hasher.fingerprint(s.key);
        let mut shard = self.shards[self.shard_of(fp)].lock();
        for (policy, &remaining) in s.policies.iter().zip(s.remaining) {
            let r = self.registry.get_or_add(policy);
            let mut target = Target {
                r,
                policy,
                fp,
                numbers: None,
            };
            // A key with its own limit settles under its own numbers.
            let numbers = shard.resolve(&target, now);
            target.numbers = numbers.as_deref();
            let admitted = crate::algorithm::Admitted {
                at: s.admitted_at,
                estimate: s.estimate,
                remaining,
            };
            shard.settle(target, now, admitted, s.real);
        }
        Ok(Settled::Done)
    }

    fn reset_now(&self, policy: &Policy, key: &str) {
        if let Some(r) = self.registry.get(policy) {
            let fp = self.hasher.fingerprint(key);
            let target = Target {
                r,
                policy,
                fp,
                numbers: None,
            };
            self.shards[self.shard_of(fp)]
                .lock()
                .remove(target, self.clock.now());
        }
    }

    /// [`Store::set_override`], synchronously: `key`'s own numbers under `policy` from the
    /// next decision on (`None` removes them); the key keeps what it has used. Overrides
    /// count against the store's bound: beyond a shard's share of `max_keys`, a new one is
    /// refused ([`StoreError::Unsupported`]).
    pub fn set_override_now(
        &self,
        policy: &Arc<Policy>,
        key: &str,
        value: Option<Override>,
    ) -> Result<(), StoreError> {
        crate::store::check_key(key)?;
        let r = self.registry.get_or_add(policy);
        let fp = self.hasher.fingerprint(key);
        let target = Target {
            r,
            policy,
            fp,
            numbers: None,
        };
        let kept =
            self.shards[self.shard_of(fp)]
                .lock()
                .set_override(&target, value, self.clock.now());
        if !kept {
            return Err(StoreError::Unsupported(
                "too many key overrides for this store's max_keys".into(),
            ));
        }
        Ok(())
    }

    /// [`Store::get_override`], synchronously.
    pub fn get_override_now(&self, policy: &Policy, key: &str) -> Option<Override> {
        let fp = self.hasher.fingerprint(key);
        self.shards[self.shard_of(fp)]
            .lock()
            .get_override(policy.name(), fp)
    }
}

impl<C: Clock> Store for MemoryStore<C> {
    fn check<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        let result = self.check_now(request);
        Box::pin(std::future::ready(result))
    }

    fn check_immediate(&self, request: CheckRequest<'_>) -> Option<Result<Verdict, StoreError>> {
        Some(self.check_now(request))
    }

    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        let result = self.check_keyed_now(items);
        Box::pin(std::future::ready(result))
    }

    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.refund_now(policies, key, cost);
        Box::pin(std::future::ready(Ok(())))
    }

    fn release<'a>(&'a self, leases: &'a [Lease]) -> BoxFuture<'a, Result<(), StoreError>> {
        self.release_now(leases);
        Box::pin(std::future::ready(Ok(())))
    }

    fn settle<'a>(&'a self, s: Settlement<'a>) -> BoxFuture<'a, Result<Settled, StoreError>> {
        Box::pin(std::future::ready(self.settle_now(s)))
    }

    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.reset_now(policy, key);
        Box::pin(std::future::ready(Ok(())))
    }

    fn set_override<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(
            self.set_override_now(policy, key, value),
        ))
    }

    fn get_override<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Override>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.get_override_now(policy, key))))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn tracked_keys(&self) -> Option<u64> {
        Some(self.len() as u64)
    }

    fn tracked_bytes(&self) -> Option<u64> {
        Some(self.bytes() as u64)
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}
