//! [`TypedTable`]: one policy's [`RawTable`] together with its algorithm, behind the
//! object-safe [`PolicyTable`], and [`AnyTable`], any of them by value, so that one store
//! shard can hold every policy's states.

use crate::AlgorithmKind;
use crate::algorithm::{
    Admitted, Algorithm, Concurrency, FixedWindow, Gcra, LeakyBucket, Quota, SlidingLog,
    SlidingWindow, TokenBucket,
};
use crate::clock::Micros;
use crate::decision::Decision;
use crate::policy::Policy;

use super::fingerprint::Fingerprint;
use super::persist::{Persist, put_u64};
use super::raw::RawTable;

/// One policy's states in one shard, whatever its algorithm.
pub(crate) trait PolicyTable: Send {
    /// Decides for `fp` without changing its state (a hit only marks it recently used).
    fn evaluate(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Decision;
    /// Whether `fp` is tracked.
    fn contains(&mut self, fp: Fingerprint) -> bool;
    /// Consumes `cost` (> 0) for `fp`, inserting it if new; returns whether it was inserted.
    /// `decided` is what [`PolicyTable::evaluate`] said at this `now`. The caller has made
    /// room for an insertion.
    fn commit(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        cost: u64,
        decided: &Decision,
    ) -> bool;
    /// Gives back `cost` for `fp`, if tracked.
    fn refund(&mut self, fp: Fingerprint, numbers: Numbers<'_>, now: Micros, cost: u64);
    /// Settles a request of `fp` admitted at `at` (see [`Algorithm::settle`]), inserting
    /// `fp` when a charge finds it untracked; returns whether it was inserted. The caller
    /// has made room for an insertion.
    fn settle(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        admitted: Admitted,
        real: u64,
    ) -> bool;
    /// Frees the lease `(expires_at, cost)` of `fp` (concurrency); returns whether it did.
    fn release(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        expires_at: Micros,
        cost: u64,
    ) -> bool;
    /// Carries every state but those `keep` names over to `to`'s numbers (same
    /// algorithm), keeping what each key has used; the table then decides with `to`.
    fn rescale_all(&mut self, to: &Policy, now: Micros, keep: &dyn Fn(Fingerprint) -> bool);
    /// Carries one key's state from the numbers `from` to `to` (see [`Numbers`]).
    fn rescale_key(&mut self, fp: Fingerprint, from: Numbers<'_>, to: Numbers<'_>, now: Micros);
    /// Forgets `fp`; returns whether it was tracked.
    fn remove(&mut self, fp: Fingerprint) -> bool;
    /// Entries held.
    fn len(&self) -> usize;
    /// A few incremental expiry steps; returns how many entries were dropped.
    /// `pinned` entries (keys with an override) are never dropped as expired.
    fn sweep(&mut self, now: Micros, steps: usize, pinned: &dyn Fn(Fingerprint) -> bool) -> usize;
    /// Drops one expired entry if there is any (never a `pinned` one).
    fn drop_expired(&mut self, now: Micros, pinned: &dyn Fn(Fingerprint) -> bool) -> bool;
    /// Drops the sampled state whose loss admits the fewest extra requests at `now`,
    /// sparing `protected` (see `RawTable::drop_cheapest`).
    fn drop_cheapest(&mut self, now: Micros, protected: &dyn Fn(Fingerprint) -> bool) -> bool;
    /// Bytes of cells allocated.
    fn allocated_bytes(&self) -> usize;
    /// Bytes held: the cells and what the states keep on the heap (sliding logs, leases).
    fn bytes(&self) -> usize;
    /// Appends every entry (fingerprint, state) to a snapshot; returns how many.
    fn save(&self, out: &mut Vec<u8>) -> u32;
    /// Makes room for `additional` more entries at once (before a snapshot's entries).
    fn reserve(&mut self, additional: usize);
    /// Reads one entry's state from a snapshot and keeps it under `fp` unless it expired by
    /// `now` (not asked for a `pinned` key, whose override's numbers date it), or the table
    /// is full, or `fp` is already there; `None` when the bytes are not a state of this
    /// algorithm.
    fn load_entry(
        &mut self,
        fp: Fingerprint,
        input: &mut &[u8],
        now: Micros,
        pinned: bool,
    ) -> Option<bool>;
}

/// The rest of a one-policy check ([`AnyTable::check`]): the time, the cost, the
/// policy's delay budget, the bound on the shard's states below which a new key may be
/// inserted without making room (`cap`; the shard's count is passed beside it), and the
/// keys the sweep must keep (those with an override: `P`, a closure known statically, so
/// that a shard without overrides passes one that keeps nothing, for free).
#[derive(Clone, Copy)]
pub(crate) struct OneCheck<P> {
    pub(crate) now: Micros,
    pub(crate) cost: u64,
    pub(crate) max_delay: Option<Micros>,
    pub(crate) cap: usize,
    pub(crate) pinned: P,
}

/// The numbers a key's state is kept and decided under: `None` for the table's own (its
/// policy's), `Some` for a key with an override (see [`crate::overrides`]).
pub(crate) type Numbers<'a> = Option<&'a Policy>;

/// A [`PolicyTable`] for one algorithm. `repr(C)`, the algorithm first and then the cells'
/// bookkeeping (whose hot fields lead): see `TableCell` in `shard.rs`.
#[repr(C)]
pub(crate) struct TypedTable<A: Algorithm> {
    alg: A,
    raw: RawTable<A::State>,
}

impl<A: Algorithm + From<Quota>> TypedTable<A> {
    pub(crate) fn new(alg: A, max_len: usize) -> Self {
        TypedTable {
            alg,
            raw: RawTable::with_heap(max_len, A::heap_bytes),
        }
    }

    /// [`AnyTable::check`] for this algorithm.
    #[inline(always)]
    pub(crate) fn check<P: Fn(Fingerprint) -> bool>(
        &mut self,
        fp: Fingerprint,
        c: OneCheck<P>,
        count: &mut usize,
        declined: &mut bool,
    ) -> Decision {
        let decision =
            self.check_unswept(fp, (c.now, c.cost, c.max_delay), &c.cap, count, declined);
        if !*declined {
            self.sweep_after_check(c.now, count, &c.pinned);
        }
        decision
    }

    /// [`TypedTable::check`] but for its sweep steps, which the caller then takes
    /// ([`TypedTable::sweep_after_check`]) unless `declined` is set (nothing changed);
    /// `(now, cost, max_delay)` and `cap` are a [`OneCheck`]'s fields (`cap` by reference:
    /// the shard's, read only on an insert's path).
    #[inline(always)]
    pub(crate) fn check_unswept(
        &mut self,
        fp: Fingerprint,
        (now, cost, max_delay): (Micros, u64, Option<Micros>),
        cap: &usize,
        count: &mut usize,
        declined: &mut bool,
    ) -> Decision {
        let alg = &self.alg;
        let (decision, at) = match self.raw.find(fp) {
            Some(i) => (
                alg.evaluate(self.raw.state(i), now, cost, max_delay),
                Some(i),
            ),
            None => (
                alg.evaluate(&A::State::default(), now, cost, max_delay),
                None,
            ),
        };
        if decision.allowed && cost > 0 {
            let i = match at {
                Some(i) => i,
                // Room for a new key without making any: compared here, on the insert's
                // path, so that the shard's count and bound are not loaded (and kept)
                // ahead of the probe on every check.
                None if *count < *cap => {
                    *count += 1;
                    self.raw.insert(fp)
                }
                None => {
                    *declined = true;
                    return decision;
                }
            };
            self.raw.update(i, |state| alg.consume(state, now, cost));
            self.raw
                .note_idle_at(now.saturating_add(decision.reset_after));
        }
        decision
    }

    /// The sweep steps of a one-policy check, keeping `count` (the shard's states).
    #[inline(always)]
    pub(crate) fn sweep_after_check(
        &mut self,
        now: Micros,
        count: &mut usize,
        pinned: &dyn Fn(Fingerprint) -> bool,
    ) {
        let alg = &self.alg;
        *count -= self
            .raw
            .sweep(now, super::shard::SWEEP_STEPS, |s| alg.idle_at(s), pinned);
    }
}

/// The algorithm for `numbers`: the table's own, or one built from an override's numbers
/// (a few words, no allocation).
macro_rules! alg_for {
    ($self:ident, $numbers:expr, $owned:ident) => {
        match $numbers {
            Some(p) => {
                $owned = A::from(Quota::from(p));
                &$owned
            }
            None => &$self.alg,
        }
    };
}

/// One policy's table held by value, whatever its algorithm: a shard holds these, not
/// `Box<dyn PolicyTable>`, so that a decision reaches the cells with one load fewer (the
/// box) and the one-policy check ([`AnyTable::check`]) is a branch on the algorithm and
/// an inlined call, not an indirect one. The rarer operations go through
/// [`PolicyTable`] as a trait object (`Deref`), written once for every algorithm.
// `repr(u8)`: the tag first, then the table, at an offset known to `TableCell`'s layout
// (by default the tag was a niche somewhere inside one of the tables).
#[repr(u8)]
pub(crate) enum AnyTable {
    FixedWindow(TypedTable<FixedWindow>),
    SlidingLog(TypedTable<SlidingLog>),
    SlidingWindow(TypedTable<SlidingWindow>),
    TokenBucket(TypedTable<TokenBucket>),
    LeakyBucket(TypedTable<LeakyBucket>),
    Gcra(TypedTable<Gcra>),
    Concurrency(TypedTable<Concurrency>),
}

/// `$body` with `$t` bound to the typed table inside `$table` (an [`AnyTable`]).
macro_rules! each_table {
    ($table:expr, |$t:ident| $body:expr) => {
        match $table {
            AnyTable::FixedWindow($t) => $body,
            AnyTable::SlidingLog($t) => $body,
            AnyTable::SlidingWindow($t) => $body,
            AnyTable::TokenBucket($t) => $body,
            AnyTable::LeakyBucket($t) => $body,
            AnyTable::Gcra($t) => $body,
            AnyTable::Concurrency($t) => $body,
        }
    };
}

impl AnyTable {
    /// [`PolicyTable::evaluate`] then, if admitted with a cost, [`PolicyTable::commit`],
    /// under the table's own numbers with one probe of the key, then
    /// [`PolicyTable::sweep`]: the one-policy path, in one call, dispatched statically.
    /// Returns the decision and keeps `count` (the shard's states) for an insertion and
    /// what the sweep dropped (a small return value, not a tuple through memory); `None`,
    /// having changed nothing, when `fp` is new, must be inserted and there is no room
    /// (the caller makes room first, on the general path).
    ///
    /// gcra, the algorithm to choose when unsure (docs/choosing-an-algorithm.md), is
    /// checked inline in the caller: its decision is built in registers and written
    /// straight into the verdict, with no call, no arguments through memory and no
    /// 64-byte copy of the decision out of a callee's frame. The other six share one
    /// out-of-line dispatch (inlining all seven made the caller slower: third pass).
    #[inline(always)]
    pub(crate) fn check<P: Fn(Fingerprint) -> bool>(
        &mut self,
        fp: Fingerprint,
        c: OneCheck<P>,
        count: &mut usize,
        declined: &mut bool,
    ) -> Decision {
        match self {
            AnyTable::Gcra(t) => t.check(fp, c, count, declined),
            // The check's fields one by one: a `OneCheck` passed whole was built in memory
            // before the branch, on gcra's path too.
            _ => self.check_other(
                fp,
                (c.now, c.cost, c.max_delay, c.cap),
                c.pinned,
                count,
                declined,
            ),
        }
    }

    /// [`AnyTable::check`] with every algorithm inlined (seven bodies): for a caller that
    /// is itself out of line, which then makes no second call.
    #[inline(always)]
    pub(crate) fn check_any<P: Fn(Fingerprint) -> bool>(
        &mut self,
        fp: Fingerprint,
        c: OneCheck<P>,
        count: &mut usize,
        declined: &mut bool,
    ) -> Decision {
        each_table!(self, |t| t.check(fp, c, count, declined))
    }

    /// [`AnyTable::check`] for the algorithms other than gcra; `(now, cost, max_delay,
    /// cap)` and `pinned` are a [`OneCheck`]'s fields.
    #[inline(never)]
    fn check_other<P: Fn(Fingerprint) -> bool>(
        &mut self,
        fp: Fingerprint,
        (now, cost, max_delay, cap): (Micros, u64, Option<Micros>, usize),
        pinned: P,
        count: &mut usize,
        declined: &mut bool,
    ) -> Decision {
        let c = OneCheck {
            now,
            cost,
            max_delay,
            cap,
            pinned,
        };
        each_table!(self, |t| t.check(fp, c, count, declined))
    }
}

impl AnyTable {
    /// Where the cells' bookkeeping starts, in bytes from the table (a layout test's view).
    #[cfg(test)]
    pub(crate) fn raw_offset(&self) -> usize {
        let start = self as *const AnyTable as usize;
        each_table!(self, |t| &t.raw as *const _ as usize - start)
    }
}

impl std::ops::Deref for AnyTable {
    type Target = dyn PolicyTable;
    fn deref(&self) -> &Self::Target {
        each_table!(self, |t| t as &dyn PolicyTable)
    }
}

impl std::ops::DerefMut for AnyTable {
    fn deref_mut(&mut self) -> &mut Self::Target {
        each_table!(self, |t| t as &mut dyn PolicyTable)
    }
}

/// A table for `policy`'s algorithm, holding at most `max_len` entries.
pub(crate) fn table_for(policy: &Policy, max_len: usize) -> AnyTable {
    let quota = Quota::from(policy);
    match policy.algorithm() {
        AlgorithmKind::FixedWindow => AnyTable::FixedWindow(TypedTable::new(quota.into(), max_len)),
        AlgorithmKind::SlidingLog => AnyTable::SlidingLog(TypedTable::new(quota.into(), max_len)),
        AlgorithmKind::SlidingWindow => {
            AnyTable::SlidingWindow(TypedTable::new(quota.into(), max_len))
        }
        AlgorithmKind::TokenBucket => AnyTable::TokenBucket(TypedTable::new(quota.into(), max_len)),
        AlgorithmKind::LeakyBucket => AnyTable::LeakyBucket(TypedTable::new(quota.into(), max_len)),
        AlgorithmKind::Gcra => AnyTable::Gcra(TypedTable::new(quota.into(), max_len)),
        AlgorithmKind::Concurrency => AnyTable::Concurrency(TypedTable::new(quota.into(), max_len)),
    }
}

impl<A: Algorithm + From<Quota>> PolicyTable for TypedTable<A>
where
    A::State: Persist,
{
    fn evaluate(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Decision {
        let owned;
        let alg = alg_for!(self, numbers, owned);
        match self.raw.find(fp) {
            Some(i) => alg.evaluate(self.raw.state(i), now, cost, max_delay),
            None => alg.evaluate(&A::State::default(), now, cost, max_delay),
        }
    }

    fn contains(&mut self, fp: Fingerprint) -> bool {
        self.raw.find(fp).is_some()
    }

    fn commit(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        cost: u64,
        decided: &Decision,
    ) -> bool {
        let owned;
        let alg = alg_for!(self, numbers, owned);
        let (i, inserted) = match self.raw.find(fp) {
            Some(i) => (i, false),
            None => (self.raw.insert(fp), true),
        };
        self.raw.update(i, |state| alg.consume(state, now, cost));
        self.raw
            .note_idle_at(now.saturating_add(decided.reset_after));
        inserted
    }

    fn refund(&mut self, fp: Fingerprint, numbers: Numbers<'_>, now: Micros, cost: u64) {
        let owned;
        let alg = alg_for!(self, numbers, owned);
        if let Some(i) = self.raw.find(fp) {
            let idle = self.raw.update(i, |state| {
                alg.refund(state, now, cost);
                alg.idle_at(state)
            });
            self.raw.note_idle_at(idle);
        }
    }

    fn settle(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        admitted: Admitted,
        real: u64,
    ) -> bool {
        let owned;
        let alg = alg_for!(self, numbers, owned);
        let (i, inserted) = match self.raw.find(fp) {
            Some(i) => (i, false),
            // An untracked key is a full one: nothing to give back, a charge starts it.
            None if real > admitted.estimate => (self.raw.insert(fp), true),
            None => return false,
        };
        let idle = self.raw.update(i, |state| {
            alg.settle(state, now, admitted, real);
            alg.idle_at(state)
        });
        self.raw.note_idle_at(idle);
        inserted
    }

    fn release(
        &mut self,
        fp: Fingerprint,
        numbers: Numbers<'_>,
        now: Micros,
        expires_at: Micros,
        cost: u64,
    ) -> bool {
        let owned;
        let alg = alg_for!(self, numbers, owned);
        let Some(i) = self.raw.find(fp) else {
            return false;
        };
        let (freed, idle) = self.raw.update(i, |state| {
            let freed = alg.release(state, now, expires_at, cost);
            (freed, alg.idle_at(state))
        });
        self.raw.note_idle_at(idle);
        freed
    }

    fn rescale_all(&mut self, to: &Policy, now: Micros, keep: &dyn Fn(Fingerprint) -> bool) {
        let new = A::from(Quota::from(to));
        let old = &self.alg;
        self.raw
            .update_all(keep, |state| *state = new.rescale(old, state, now));
        self.alg = new;
    }

    fn rescale_key(&mut self, fp: Fingerprint, from: Numbers<'_>, to: Numbers<'_>, now: Micros) {
        let (owned_from, owned_to);
        let old = alg_for!(self, from, owned_from);
        let new = alg_for!(self, to, owned_to);
        if let Some(i) = self.raw.find(fp) {
            let idle = self.raw.update(i, |state| {
                *state = new.rescale(old, state, now);
                new.idle_at(state)
            });
            self.raw.note_idle_at(idle);
        }
    }

    fn remove(&mut self, fp: Fingerprint) -> bool {
        let alg = &self.alg;
        self.raw.remove(fp, |s| alg.idle_at(s))
    }

    fn len(&self) -> usize {
        self.raw.len()
    }

    fn sweep(&mut self, now: Micros, steps: usize, pinned: &dyn Fn(Fingerprint) -> bool) -> usize {
        let alg = &self.alg;
        self.raw.sweep(now, steps, |s| alg.idle_at(s), pinned)
    }

    fn drop_expired(&mut self, now: Micros, pinned: &dyn Fn(Fingerprint) -> bool) -> bool {
        let alg = &self.alg;
        self.raw.drop_expired(now, |s| alg.idle_at(s), pinned)
    }

    fn drop_cheapest(&mut self, now: Micros, protected: &dyn Fn(Fingerprint) -> bool) -> bool {
        let alg = &self.alg;
        // What forgetting a state gives away: the budget it has used. Every state of one
        // table has the same capacity, so the fewest remaining is the most to lose.
        let loss = |s: &A::State| u64::MAX - alg.evaluate(s, now, 0, None).remaining;
        self.raw
            .drop_cheapest(EVICTION_SAMPLE, loss, protected, |s| alg.idle_at(s))
    }

    fn allocated_bytes(&self) -> usize {
        self.raw.allocated_bytes()
    }

    fn bytes(&self) -> usize {
        self.raw.bytes()
    }

    fn save(&self, out: &mut Vec<u8>) -> u32 {
        let mut n = 0;
        self.raw.for_each(|fp, state| {
            put_u64(out, fp.bits());
            state.put(out);
            n += 1;
        });
        n
    }

    fn reserve(&mut self, additional: usize) {
        self.raw.reserve(additional);
    }

    fn load_entry(
        &mut self,
        fp: Fingerprint,
        input: &mut &[u8],
        now: Micros,
        pinned: bool,
    ) -> Option<bool> {
        let state = A::State::take(input)?;
        let idle = if pinned {
            Micros::MAX
        } else {
            self.alg.idle_at(&state)
        };
        if idle <= now || self.raw.is_full() || self.raw.find(fp).is_some() {
            return Some(false);
        }
        let i = self.raw.insert(fp);
        self.raw.update(i, |cell| *cell = state);
        self.raw.note_idle_at(idle);
        Some(true)
    }
}

/// States looked at to choose one to evict. Larger samples choose better and cost more; a
/// client being limited loses its state only if every state sampled is as limited as it.
pub(crate) const EVICTION_SAMPLE: usize = 16;
