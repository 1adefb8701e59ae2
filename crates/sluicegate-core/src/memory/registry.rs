//! Which policies a store knows: each gets a small index (its table's place in every shard)
//! and an id that is never reused, so that a table left by a dropped policy is never
//! mistaken for the state of a newer one that reuses its index.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::{Mutex, RwLock};

use crate::policy::{CountingKey, Policy};

/// A policy's place in the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyRef {
    /// Index of its table in every shard.
    pub(crate) index: usize,
    /// Unique over the store's life.
    pub(crate) id: u64,
    /// The id of the first version of this policy (same name and algorithm): a table of an
    /// older version of the same lineage is carried over to the newer numbers, keeping
    /// what each key has used, rather than dropped (see [`Registry::retain`]).
    pub(crate) lineage: u64,
}

/// Most `Arc<Policy>` allocations remembered by address (see [`Registry::get_or_add`]).
const MAX_REMEMBERED: usize = 4096;

/// Most distinct policies the process keeps a copy of for its whole life ([`pinned`]).
const MAX_PINNED: usize = 1024;

/// A policy's place, and the process's immortal copy of it when there is one ([`pinned`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    pub(crate) r: PolicyRef,
    pub(crate) pinned: Option<&'static Arc<Policy>>,
}

/// The process's copies of the policies its stores decided, by content.
static PINNED: LazyLock<Mutex<HashMap<Policy, &'static Arc<Policy>>>> =
    LazyLock::new(Mutex::default);

/// A copy of `policy` that lives as long as the process, equal to it, shared by every
/// store and thread; `None` once [`MAX_PINNED`] distinct policies are kept.
///
/// Why: a verdict that owns its policy ([`MemoryStore::check_now`], what the server calls)
/// cloned the caller's `Arc` into it, and the caller dropped it: two locked instructions a
/// decision, on a line every thread shares, which cost as much as the rest of a one-policy
/// check on a virtual machine (core.md, fourth pass). A reference to an immortal copy is
/// `'static` without a reference count. The copy is a new allocation, not a clone of the
/// caller's `Arc`, so the caller's counts are untouched; equal policies share one copy,
/// so a configuration reloaded unchanged adds nothing, and the bound caps what a caller
/// making ever new policies can keep alive (≈ 1,024 policies, a few hundred KB), past
/// which verdicts clone the `Arc` as before.
///
/// [`MemoryStore::check_now`]: super::MemoryStore::check_now
fn pinned(policy: &Policy) -> Option<&'static Arc<Policy>> {
    let mut pinned = PINNED.lock();
    if let Some(copy) = pinned.get(policy) {
        return Some(*copy);
    }
    if pinned.len() >= MAX_PINNED {
        return None;
    }
    let copy: &'static Arc<Policy> = Box::leak(Box::new(Arc::new(policy.clone())));
    pinned.insert(policy.clone(), copy);
    Some(copy)
}

#[derive(Debug, Default)]
struct Inner {
    by_policy: HashMap<CountingKey, PolicyRef>,
    /// By the address of the caller's `Arc<Policy>`: a lookup without hashing the whole
    /// policy. The `Weak` keeps the allocation, so the address cannot be reused by another
    /// policy while it is here.
    by_address: HashMap<usize, (Weak<Policy>, Placed), foldhash::fast::RandomState>,
    free: Vec<usize>,
    next_index: usize,
    next_id: u64,
}

/// The policies of a store. A policy's state is identified by its [`CountingKey`] (name,
/// algorithm, limit, period, burst): a policy whose counting changes is a new policy with
/// fresh state; one whose mode, `max_delay`, `on_store_error` or `penalty` changes keeps
/// its state, as it does on Redis.
///
/// Looking a policy up is on every decision's path, so each thread keeps the places it
/// found last ([`CACHE`]): a hit reads two words and the registry's epoch, with no lock
/// and no write to memory other threads share (a read lock is two atomic writes to one
/// cache line every thread contends for).
#[derive(Debug)]
pub(crate) struct Registry {
    inner: RwLock<Inner>,
    /// Moves on whenever a remembered address is forgotten or a place changes (only under
    /// the write lock): a cached place is good while the epoch it was read at is current.
    /// Drawn from [`next_epoch`], so an epoch also names this registry among the
    /// process's: a cached place is compared with it alone, not with a registry tag too.
    epoch: AtomicU64,
}

/// A value no registry of the process has had as its epoch, nor will have (the thread
/// caches' empty entries hold 0).
fn next_epoch() -> u64 {
    static EPOCHS: AtomicU64 = AtomicU64::new(1);
    EPOCHS.fetch_add(1, Ordering::Relaxed)
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            inner: RwLock::default(),
            epoch: AtomicU64::new(next_epoch()),
        }
    }
}

/// One thread's memory of a lookup: the `Arc<Policy>`'s address, the epoch of the
/// registry when it was found (which names the registry too), and the place.
///
/// 64 bytes (48 of them used), aligned: an entry is one cache line, and its offset in the
/// cache is the address's slot bits shifted, one shift and one mask (48-byte entries took
/// a multiply by three besides).
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
struct Cached {
    address: usize,
    epoch: u64,
    placed: Placed,
}

/// Places cached per thread, by address (direct-mapped: a route's few policies fit).
const CACHED: usize = 8;

thread_local! {
    /// Why this is sound: an entry is used only while its registry's epoch is unchanged,
    /// and until the epoch moves the registry keeps a `Weak` of the entry's `Arc`
    /// allocation in `by_address`, so the address still names the same policy (an
    /// allocation cannot be reused while a `Weak` holds it). A place that became stale
    /// meanwhile is what a lookup just before a reload returns too: the shards refuse it.
    static CACHE: [Cell<Cached>; CACHED] = const {
        [const {
            Cell::new(Cached {
                address: 0,
                epoch: 0,
                placed: Placed {
                    r: PolicyRef {
                        index: 0,
                        id: 0,
                        lineage: 0,
                    },
                    pinned: None,
                },
            })
        }; CACHED]
    };
}

/// The cache entry of an address (allocations are at least 8-byte aligned).
#[inline]
fn slot(address: usize) -> usize {
    (address >> 4) % CACHED
}

impl Registry {
    /// The place of `policy`, registering it on first use. Callers keep their policies in
    /// `Arc`s for the life of a configuration, so the address of the `Arc` is remembered
    /// and the next lookup costs one pointer hash instead of hashing the whole policy; the
    /// thread's cache answers before that.
    #[inline]
    pub(crate) fn get_or_add(&self, policy: &Arc<Policy>) -> PolicyRef {
        self.place(policy).r
    }

    /// [`Registry::get_or_add`], with the process's immortal copy of the policy ([`pinned`])
    /// when its address is remembered (a copy found while the epoch is unchanged is of the
    /// same policy: the address still names it).
    #[inline]
    pub(crate) fn place(&self, policy: &Arc<Policy>) -> Placed {
        let address = Arc::as_ptr(policy) as usize;
        let epoch = self.epoch.load(Ordering::Acquire);
        let cached = CACHE.with(|c| c[slot(address)].get());
        if cached.address == address && cached.epoch == epoch {
            return cached.placed;
        }
        self.lookup(policy, address)
    }

    /// [`Registry::place`] without the thread's cache; fills it.
    fn lookup(&self, policy: &Arc<Policy>, address: usize) -> Placed {
        let remember = |epoch: u64, placed: Placed| {
            let entry = Cached {
                address,
                epoch,
                placed,
            };
            CACHE.with(|c| c[slot(address)].set(entry));
        };
        {
            let inner = self.inner.read();
            if let Some((_, placed)) = inner.by_address.get(&address) {
                // The epoch moves only under the write lock: it is the one of this answer.
                remember(self.epoch.load(Ordering::Acquire), *placed);
                return *placed;
            }
        }
        let mut inner = self.inner.write();
        let counting = policy.counting_key();
        let r = match inner.by_policy.get(&counting) {
            Some(r) => *r,
            None => {
                let index = match inner.free.pop() {
                    Some(index) => index,
                    None => {
                        inner.next_index += 1;
                        inner.next_index - 1
                    }
                };
                inner.next_id += 1;
                let r = PolicyRef {
                    index,
                    id: inner.next_id,
                    lineage: inner.next_id,
                };
                inner.by_policy.insert(counting, r);
                r
            }
        };
        if inner.by_address.len() >= MAX_REMEMBERED {
            // Callers that make a new `Arc` per request: forget the dead ones; if that is
            // not enough, stop remembering (lookups stay correct, only slower).
            inner
                .by_address
                .retain(|_, (weak, _)| weak.strong_count() > 0);
            self.epoch.store(next_epoch(), Ordering::Release);
        }
        if let Some((_, held)) = inner.by_address.get(&address) {
            // Another thread remembered it meanwhile.
            let held = *held;
            remember(self.epoch.load(Ordering::Acquire), held);
            return held;
        }
        if inner.by_address.len() < MAX_REMEMBERED {
            // Only for a remembered address: a caller making a new `Arc` per request is
            // not copied per request.
            let placed = Placed {
                r,
                pinned: pinned(policy),
            };
            inner
                .by_address
                .insert(address, (Arc::downgrade(policy), placed));
            remember(self.epoch.load(Ordering::Acquire), placed);
            return placed;
        }
        Placed { r, pinned: None }
    }

    /// The place of `policy` if it is registered.
    pub(crate) fn get(&self, policy: &Policy) -> Option<PolicyRef> {
        self.inner
            .read()
            .by_policy
            .get(&policy.counting_key())
            .copied()
    }

    /// Unregisters every policy not in `keep`; returns their places, whose tables the caller
    /// drops before calling [`Registry::release`]. A policy of `keep` that is not registered
    /// but continues a dropped one (same name and algorithm: its limit, burst, period or
    /// calendar changed) takes over the dropped one's place as a newer version, so the
    /// shards carry its tables over to the new numbers when they next touch them.
    pub(crate) fn retain(&self, keep: &[Arc<Policy>]) -> Vec<PolicyRef> {
        let mut inner = self.inner.write();
        // Every thread's cached places are checked against the registry again.
        self.epoch.store(next_epoch(), Ordering::Release);
        let mut dropped: Vec<(CountingKey, PolicyRef)> = Vec::new();
        let keep: Vec<CountingKey> = keep.iter().map(|k| k.counting_key()).collect();
        inner.by_policy.retain(|counting, r| {
            let kept = keep.contains(counting);
            if !kept {
                dropped.push((counting.clone(), *r));
            }
            kept
        });
        for counting in keep {
            if inner.by_policy.contains_key(&counting) {
                continue;
            }
            if let Some(i) = dropped
                .iter()
                .position(|(old, _)| old.same_lineage(&counting))
            {
                let (_, old) = dropped.swap_remove(i);
                inner.next_id += 1;
                let r = PolicyRef {
                    index: old.index,
                    id: inner.next_id,
                    lineage: old.lineage,
                };
                inner.by_policy.insert(counting, r);
            }
        }
        let dropped: Vec<PolicyRef> = dropped.into_iter().map(|(_, r)| r).collect();
        let current: Vec<PolicyRef> = inner.by_policy.values().copied().collect();
        inner
            .by_address
            .retain(|_, (weak, placed)| weak.strong_count() > 0 && current.contains(&placed.r));
        dropped
    }

    /// Every registered policy's numbers and place (for a snapshot).
    pub(crate) fn refs(&self) -> Vec<(CountingKey, PolicyRef)> {
        let inner = self.inner.read();
        inner
            .by_policy
            .iter()
            .map(|(k, r)| (k.clone(), *r))
            .collect()
    }

    /// Makes the indices of dropped policies available again.
    pub(crate) fn release(&self, dropped: &[PolicyRef]) {
        self.inner
            .write()
            .free
            .extend(dropped.iter().map(|r| r.index));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::AlgorithmKind;

    fn policy(limit: u64) -> Policy {
        Policy::builder("p", AlgorithmKind::Gcra, limit, Duration::from_secs(1))
            .build()
            .unwrap()
    }

    #[test]
    fn equal_policies_share_a_place_whatever_their_arc() {
        let registry = Registry::default();
        let first = registry.get_or_add(&Arc::new(policy(5)));
        // A caller that makes a new Arc per request: same place, bounded memory.
        for _ in 0..3 * MAX_REMEMBERED {
            assert_eq!(registry.get_or_add(&Arc::new(policy(5))), first);
        }
        assert!(registry.inner.read().by_address.len() <= MAX_REMEMBERED);
        let other = registry.get_or_add(&Arc::new(policy(6)));
        assert_ne!(other.id, first.id);
    }

    #[test]
    fn retain_forgets_dropped_policies_and_their_addresses() {
        let registry = Registry::default();
        let (a, b) = (Arc::new(policy(5)), Arc::new(policy(6)));
        let ra = registry.get_or_add(&a);
        let rb = registry.get_or_add(&b);
        let dropped = registry.retain(std::slice::from_ref(&a));
        assert_eq!(dropped, vec![rb]);
        registry.release(&dropped);
        assert_eq!(registry.get_or_add(&a), ra);
        // b comes back as a new policy: new id, its old index reused.
        let again = registry.get_or_add(&b);
        assert_eq!(again.index, rb.index);
        assert!(again.id > rb.id);
    }
}
