//! Shards: how `max_keys` is split, and the store's shard, which holds every policy's
//! states for the keys that hash to it, so that one lock covers all policies of one key.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::algorithm::{Admitted, Gcra};
use crate::clock::Micros;
use crate::decision::Decision;
use crate::overrides::Override;
use crate::policy::Policy;

use super::fingerprint::Fingerprint;
use super::persist::{put_str, put_u32, put_u64};
use super::registry::PolicyRef;
use super::snapshot::put_numbers;
use super::typed::{AnyTable, Numbers, OneCheck, TypedTable, table_for};

/// Most shards a store or limiter uses.
const MAX_SHARDS: usize = 256;
/// Keys per shard the sharding aims for, at least (a shard is evicted from on its own).
const KEYS_PER_SHARD: usize = 256;
/// Sweep steps each operation gives to the tables it touched.
pub(crate) const SWEEP_STEPS: usize = 2;

/// Shards for a bound of `max_keys`: a power of two, up to 256, each holding at least 256
/// keys where `max_keys` allows.
pub(crate) fn shard_count(max_keys: usize) -> usize {
    (max_keys / KEYS_PER_SHARD)
        .next_power_of_two()
        .clamp(1, MAX_SHARDS)
}

/// The bound of shard `i` of `shards`: `max_keys` split evenly, the remainder to the first.
/// The bounds add up to `max_keys` exactly.
pub(crate) fn shard_cap(max_keys: usize, shards: usize, i: usize) -> usize {
    max_keys / shards + usize::from(i < max_keys % shards)
}

/// Aligns a shard to its own cache lines (two, for adjacent-line prefetch), so that threads
/// working on neighbouring shards do not share a line.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Padded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// One policy's state of one key, as a shard sees it.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The policy's place in the registry.
    pub(crate) r: PolicyRef,
    /// The policy.
    pub(crate) policy: &'a Policy,
    /// The key.
    pub(crate) fp: Fingerprint,
    /// The key's own numbers when it has an override (from [`StoreShard::resolve`]).
    pub(crate) numbers: Numbers<'a>,
}

/// A gcra table whose one-policy check ([`StoreShard::check_gcra`]) is done but for its
/// sweep steps, which run when this is dropped (no override in the shard: no key to
/// keep).
///
/// On drop, not by a call: a function that returns its verdict as its value and holds
/// this then writes the verdict in place first, and sweeps after (its locals are dropped
/// once its value is written). Swept by a call before the verdict was returned, the
/// verdict was built in a local and copied out (14 instructions); swept before the
/// verdict was built, the decision was kept in spilled registers across the sweep's
/// out-of-line walk.
pub(crate) struct Unswept<'a> {
    table: &'a mut TypedTable<Gcra>,
    count: &'a mut usize,
    now: Micros,
}

impl Drop for Unswept<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.table
            .sweep_after_check(self.now, self.count, &|_| false);
    }
}

/// Running penalties of this shard's keys: (policy index, policy id, key) → end, µs.
type Penalties = HashMap<(usize, u64, Fingerprint), Micros, foldhash::fast::RandomState>;

/// A key's override under one policy, and the numbers its state is kept under. A removed
/// override stays (`value: None`) until the key's state is next touched and carried back
/// to the policy's numbers: carrying happens when a key is next decided, as on Redis,
/// so that both stores agree on when the new numbers start to count.
struct KeyOverride {
    /// The policy's name: an override outlives reloads that change the policy's numbers.
    policy: Box<str>,
    value: Option<Override>,
    /// The policy the effective numbers were made from, and those numbers (`None`: the
    /// override does not fit that policy, whose own numbers then apply).
    effective: Option<(Arc<Policy>, Option<Arc<Policy>>)>,
    /// The numbers the key's state is kept under (`None` only until first set).
    written: Option<Arc<Policy>>,
}

/// Overrides of this shard's keys, by key; a key rarely has more than one.
type Overrides = HashMap<Fingerprint, Vec<KeyOverride>, foldhash::fast::RandomState>;

/// One policy's table in a shard: the registry id of the version it holds, its lineage.
///
/// Laid out for the one-policy check, which reads `id`, the table's tag, its algorithm and
/// the front of its cells' bookkeeping: all in the cell's first two cache lines (its own
/// lines: aligned to 64 bytes), where by default `id` came after the table, on a third.
#[repr(C, align(64))]
struct TableCell {
    id: u64,
    table: AnyTable,
    lineage: u64,
}

/// One table per policy (by registry index) for the keys of this shard, and their count.
///
/// `repr(C)`, the fields a one-policy check reads first: with the mutex's byte in front
/// they fill the shard's first cache line, so a check loads one line of the shard, not
/// three (where the default layout put them).
#[repr(C)]
pub(crate) struct StoreShard {
    count: usize,
    cap: usize,
    /// This shard's share of `max_memory`, bytes (`usize::MAX`: no bound in bytes).
    byte_cap: usize,
    /// Whether a one-policy check must take the general steps whatever its policy: the
    /// shard holds overrides (kept with `overrides`) or has a bound in bytes. One flag on
    /// the first line, tested once (the map's own length is not on that line).
    general: bool,
    tables: Vec<Option<TableCell>>,
    /// Only keys some policy with a `penalty` denied; at most `cap` of them.
    penalties: Penalties,
    /// Keys with their own numbers (set by an administrator or the config, not by clients).
    overrides: Overrides,
}

/// Whether `fp` has an override under the policy named `name`.
fn overridden(overrides: &Overrides, name: &str, fp: Fingerprint) -> bool {
    !overrides.is_empty()
        && overrides
            .get(&fp)
            .is_some_and(|list| list.iter().any(|o| &*o.policy == name))
}

impl StoreShard {
    pub(crate) fn new(cap: usize, byte_cap: usize) -> Self {
        StoreShard {
            tables: Vec::new(),
            count: 0,
            cap: cap.max(1),
            byte_cap,
            general: byte_cap != usize::MAX,
            penalties: Penalties::default(),
            overrides: Overrides::default(),
        }
    }

    /// Keys tracked in this shard, over all policies.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Bytes of cells allocated, over all policies.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.tables
            .iter()
            .flatten()
            .map(|t| t.table.allocated_bytes())
            .sum()
    }

    /// Bytes held, over all policies: cells, sliding logs and leases, running penalties.
    pub(crate) fn bytes(&self) -> usize {
        let penalty = std::mem::size_of::<((usize, u64, Fingerprint), Micros)>() + 1;
        let tables: usize = self.tables.iter().flatten().map(|t| t.table.bytes()).sum();
        tables + self.penalties.capacity() * penalty
    }

    /// Keeps `general` after `overrides` changed.
    fn note_overrides(&mut self) {
        self.general = !self.overrides.is_empty() || self.byte_cap != usize::MAX;
    }

    #[inline]
    fn over_budget(&self) -> bool {
        self.byte_cap != usize::MAX && self.bytes() > self.byte_cap
    }

    /// The table of `r`, created on first use. A table of an older version of the same
    /// policy (a reload changed its limit, burst, period or calendar) is carried over to
    /// the new numbers here, keys with an override excepted (they keep theirs). `None` when
    /// `r` is stale: its policy was replaced by a reload while this request was on its way;
    /// such a request is decided on a fresh state and changes nothing.
    fn table(&mut self, r: &PolicyRef, policy: &Policy, now: Micros) -> Option<&mut AnyTable> {
        if self.tables.len() <= r.index {
            self.tables.resize_with(r.index + 1, || None);
        }
        let cell = &mut self.tables[r.index];
        match cell {
            Some(held) if held.id > r.id => return None,
            Some(held) if held.id < r.id && held.lineage == r.lineage => {
                let overrides = &self.overrides;
                let keep = |fp: Fingerprint| overridden(overrides, policy.name(), fp);
                held.table.rescale_all(policy, now, &keep);
                let old = (r.index, held.id);
                held.id = r.id;
                let moved: Vec<_> = self
                    .penalties
                    .extract_if(|(i, id, _), _| (*i, *id) == old)
                    .collect();
                for ((i, _, fp), end) in moved {
                    self.penalties.insert((i, r.id, fp), end);
                }
            }
            Some(held) if held.id < r.id => {
                self.count -= held.table.len();
                *cell = None;
            }
            _ => {}
        }
        let held = self.tables[r.index].get_or_insert_with(|| TableCell {
            id: r.id,
            lineage: r.lineage,
            table: table_for(policy, self.cap),
        });
        Some(&mut held.table)
    }

    /// The numbers `t`'s key is decided under: `None` for the policy's own, or the key's
    /// override applied to the policy. When they differ from those the key's state was
    /// kept under, the state is carried over first (keeping what the key has used).
    #[inline]
    pub(crate) fn resolve(&mut self, t: &Target<'_>, now: Micros) -> Option<Arc<Policy>> {
        if self.overrides.is_empty() {
            return None;
        }
        self.resolve_override(t, now)
    }

    /// [`StoreShard::resolve`] in a shard that holds overrides.
    fn resolve_override(&mut self, t: &Target<'_>, now: Micros) -> Option<Arc<Policy>> {
        let list = self.overrides.get_mut(&t.fp)?;
        let at = list.iter().position(|o| &*o.policy == t.policy.name())?;
        let entry = &mut list[at];
        let numbers = match entry.value {
            None => None,
            Some(value) => {
                let fresh = match &entry.effective {
                    Some((base, _)) => **base != *t.policy,
                    None => true,
                };
                if fresh {
                    let numbers = t.policy.with_override(&value).ok().map(Arc::new);
                    entry.effective = Some((Arc::new(t.policy.clone()), numbers));
                }
                entry.effective.as_ref().and_then(|(_, n)| n.clone())
            }
        };
        // A live entry names its numbers even when they are the policy's (an override that
        // does not fit it): the table may move on to other numbers without this key.
        let now_under = numbers
            .clone()
            .unwrap_or_else(|| Arc::new(t.policy.clone()));
        let written = entry.written.replace(now_under);
        if entry.value.is_none() {
            list.swap_remove(at);
            if list.is_empty() {
                self.overrides.remove(&t.fp);
                self.note_overrides();
            }
        }
        self.carry_key(t, written.as_deref(), numbers.as_deref(), now);
        numbers
    }

    /// Carries `t`'s key state from the numbers `from` to `to` (`None`: the table's own)
    /// when they count differently; across algorithms there is nothing to carry.
    fn carry_key(&mut self, t: &Target<'_>, from: Numbers<'_>, to: Numbers<'_>, now: Micros) {
        let key = |n: Numbers<'_>| n.unwrap_or(t.policy).counting_key();
        if key(from) == key(to) {
            return;
        }
        let same_alg = from.is_none_or(|p| p.algorithm() == t.policy.algorithm())
            && to.is_none_or(|p| p.algorithm() == t.policy.algorithm());
        if let Some(table) = self.table(&t.r, t.policy, now) {
            if same_alg {
                table.rescale_key(t.fp, from, to, now);
            } else if table.remove(t.fp) {
                self.count -= 1;
            }
        }
    }

    /// Sets (`Some`) or removes `t`'s key's override. The key keeps what it has used: its
    /// state is carried over to the new numbers when it is next decided.
    /// Returns false, changing nothing, when a new override would take the shard beyond
    /// its bound (`max_keys`' share: overrides are memory too).
    pub(crate) fn set_override(
        &mut self,
        t: &Target<'_>,
        value: Option<Override>,
        now: Micros,
    ) -> bool {
        let held: usize = self.overrides.values().map(Vec::len).sum();
        let new = !overridden(&self.overrides, t.policy.name(), t.fp);
        if value.is_some() && new && held >= self.cap {
            return false;
        }
        // Bring the table to its policy's current numbers first (overridden keys excepted).
        self.table(&t.r, t.policy, now);
        let name = t.policy.name();
        let list = self.overrides.entry(t.fp).or_default();
        match list.iter_mut().find(|o| &*o.policy == name) {
            Some(entry) => {
                entry.value = value;
                entry.effective = None;
            }
            None if value.is_some() => list.push(KeyOverride {
                policy: name.into(),
                value,
                effective: None,
                // Under the table's numbers now; named, as the table may move on without it.
                written: Some(Arc::new(t.policy.clone())),
            }),
            None => {}
        }
        if list.is_empty() {
            self.overrides.remove(&t.fp);
        }
        self.note_overrides();
        true
    }

    /// The override of `fp` under the policy named `name`.
    pub(crate) fn get_override(&self, name: &str, fp: Fingerprint) -> Option<Override> {
        self.overrides
            .get(&fp)?
            .iter()
            .find(|o| &*o.policy == name)
            .and_then(|o| o.value)
    }

    /// Decides one policy's part without changing the algorithm's state; a denial by a
    /// policy with a `penalty` starts the key's penalty (see [`crate::penalty`]).
    pub(crate) fn evaluate(&mut self, t: Target<'_>, now: Micros, cost: u64) -> Decision {
        let budget = t.policy.delay_budget();
        // The request was checked against the policy's capacity; a key's override may have
        // a smaller one. Such a request can never be admitted for this key: denied, with
        // the key's state as a read sees it.
        let never = t.numbers.is_some_and(|n| cost > n.capacity());
        let cost_now = if never { 0 } else { cost };
        let raw = match self.table(&t.r, t.policy, now) {
            Some(table) => table.evaluate(t.fp, t.numbers, now, cost_now, budget),
            None => table_for(t.policy, 1).evaluate(t.fp, t.numbers, now, cost_now, budget),
        };
        let raw = if never {
            Decision::deny(raw.limit, raw.remaining, raw.reset_after, raw.reset_after)
        } else {
            raw
        };
        // Without a penalty nothing is read: removing a policy's penalty lifts running ones.
        if t.policy.penalty() == 0 {
            return raw;
        }
        let id = (t.r.index, t.r.id, t.fp);
        let blocked_until = self.penalties.get(&id).copied().unwrap_or(0);
        let (decision, start) = crate::penalty::apply(t.policy, raw, blocked_until, now);
        if let Some(until) = start {
            self.start_penalty(id, until, now);
        }
        decision
    }

    /// One policy's whole decision in one pass, when nothing but its table is involved:
    /// evaluate, consume if admitted (one probe of the key's cells), then the table's
    /// sweep steps. Sets `declined`, having changed nothing (the decision returned is then
    /// meaningless), when the general path ([`StoreShard::decide_general`]) must decide:
    /// the shard holds overrides (the key
    /// may have its own numbers) or has a bound in bytes (`max_memory`: a sliding log may
    /// grow, and the shard shed), the policy has a penalty, its table is not there yet or
    /// holds another version of it (a reload), or a new key needs room made first.
    #[inline(always)]
    pub(crate) fn check_one(
        &mut self,
        t: &Target<'_>,
        now: Micros,
        cost: u64,
        declined: &mut bool,
    ) -> Decision {
        // The decision is returned by value with a `declined` flag, not as an `Option`:
        // one 64-byte copy fewer on the way out (the store's gcra path is
        // `check_gcra`; this is what it declines to, out of line).
        if self.general {
            *declined = true;
            return Decision::default();
        }
        // No overrides in the shard: the sweep has no key to keep.
        self.check_table::<true>(t, now, cost, self.cap, |_, _| false, declined)
    }

    /// [`StoreShard::check_one`] for a gcra table in a shard without overrides or a bound
    /// in bytes, but for its sweep steps, which run when the [`Unswept`] returned is
    /// dropped (after the caller built its verdict). `None`, having changed nothing, for every other case,
    /// any other algorithm included, which [`StoreShard::decide_declined`] then decides.
    /// Always inlined, into the store's one-policy check: its decision is built in
    /// registers.
    #[inline(always)]
    pub(crate) fn check_gcra(
        &mut self,
        t: &Target<'_>,
        now: Micros,
        cost: u64,
    ) -> Option<(Decision, Unswept<'_>)> {
        let table = match self.tables.get_mut(t.r.index) {
            Some(Some(TableCell {
                id,
                table: AnyTable::Gcra(table),
                ..
            })) if !self.general
                && *id == t.r.id
                && t.numbers.is_none()
                && t.policy.penalty() == 0 =>
            {
                table
            }
            _ => return None,
        };
        let mut declined = false;
        let check = (now, cost, t.policy.delay_budget());
        let decision = table.check_unswept(t.fp, check, &self.cap, &mut self.count, &mut declined);
        if declined {
            return None;
        }
        Some((
            decision,
            Unswept {
                table,
                count: &mut self.count,
                now,
            },
        ))
    }

    /// One policy's decision when [`StoreShard::check_gcra`] declined: the one-pass check
    /// of any algorithm ([`StoreShard::check_one`]), else the general steps
    /// ([`StoreShard::decide_general`]).
    #[inline]
    pub(crate) fn decide_declined(&mut self, t: Target<'_>, now: Micros, cost: u64) -> Decision {
        let mut declined = false;
        let decision = self.check_one(&t, now, cost, &mut declined);
        if declined {
            return self.decide_general(t, now, cost);
        }
        decision
    }

    /// [`StoreShard::check_one`] once the key's numbers are known (`t.numbers`), in a
    /// shard with or without a bound in bytes.
    fn check_resolved(&mut self, t: &Target<'_>, now: Micros, cost: u64) -> Option<Decision> {
        // Over its bytes, the shard makes room before any new key: as if full.
        let cap = if self.over_budget() { 0 } else { self.cap };
        let pinned = |overrides: &Overrides, fp| overrides.contains_key(&fp);
        let mut declined = false;
        let decision = self.check_table::<false>(t, now, cost, cap, pinned, &mut declined);
        if declined {
            return None;
        }
        if self.byte_cap != usize::MAX && decision.allowed && cost > 0 {
            // A sliding log may have grown.
            self.shed_after_check(t, now);
        }
        Some(decision)
    }

    /// The one-pass check in `t`'s table (`declined` as for [`StoreShard::check_one`]);
    /// `cap`: the count of states below which a new key may be inserted without making
    /// room first; `pinned`: the
    /// keys the sweep must keep, given the shard's overrides.
    /// `ANY`: every algorithm's check inlined here ([`AnyTable::check_any`], for the
    /// out-of-line callers of [`StoreShard::check_one`]), else gcra's alone
    /// ([`AnyTable::check`]).
    #[inline(always)]
    fn check_table<const ANY: bool>(
        &mut self,
        t: &Target<'_>,
        now: Micros,
        cost: u64,
        cap: usize,
        pinned: impl Fn(&Overrides, Fingerprint) -> bool,
        declined: &mut bool,
    ) -> Decision {
        let held = match self.tables.get_mut(t.r.index) {
            Some(Some(held))
                if held.id == t.r.id && t.numbers.is_none() && t.policy.penalty() == 0 =>
            {
                held
            }
            _ => {
                *declined = true;
                return Decision::default();
            }
        };
        let overrides = &self.overrides;
        let check = OneCheck {
            now,
            cost,
            max_delay: t.policy.delay_budget(),
            cap,
            pinned: |fp| pinned(overrides, fp),
        };
        if ANY {
            held.table.check_any(t.fp, check, &mut self.count, declined)
        } else {
            held.table.check(t.fp, check, &mut self.count, declined)
        }
    }

    /// [`StoreShard::shed`] after a one-policy check, out of the hot path.
    #[cold]
    #[inline(never)]
    fn shed_after_check(&mut self, t: &Target<'_>, now: Micros) {
        self.shed(*t, now, &|_, _| false);
    }

    /// One policy's decision when [`StoreShard::check_one`] declined: the key's numbers
    /// are resolved (an override, carried over if they changed), then the one-pass check
    /// is tried with them, else evaluate, commit if admitted (one policy consumes iff it
    /// admits: a shadow denial takes nothing), and sweep. Out of line: the one-policy
    /// hot path stays small.
    #[inline(never)]
    pub(crate) fn decide_general(&mut self, t: Target<'_>, now: Micros, cost: u64) -> Decision {
        let numbers = self.resolve(&t, now);
        let t = Target {
            numbers: numbers.as_deref(),
            ..t
        };
        if let Some(decision) = self.check_resolved(&t, now, cost) {
            return decision;
        }
        let decision = self.evaluate(t, now, cost);
        if decision.allowed {
            self.commit(t, now, cost, &decision, &|_, _| false);
        }
        self.sweep(t.r.index, now);
        decision
    }

    /// Keeps a penalty, within the shard's bound: expired penalties make room; when every
    /// one still runs, the new one is not kept (the key is still denied by its algorithm).
    fn start_penalty(&mut self, id: (usize, u64, Fingerprint), until: Micros, now: Micros) {
        if self.penalties.len() >= self.cap && !self.penalties.contains_key(&id) {
            self.penalties.retain(|_, end| *end > now);
            if self.penalties.len() >= self.cap {
                return;
            }
        }
        self.penalties.insert(id, until);
    }

    /// Consumes `cost` for one policy, making room first when the key is new and the shard
    /// full. `protected(index, fp)` names the entries of the request in progress, which
    /// must not be evicted to make room for each other.
    pub(crate) fn commit(
        &mut self,
        t: Target<'_>,
        now: Micros,
        cost: u64,
        decided: &Decision,
        protected: &dyn Fn(usize, Fingerprint) -> bool,
    ) {
        if cost == 0 {
            return;
        }
        let full = self.count >= self.cap || self.over_budget();
        let Some(table) = self.table(&t.r, t.policy, now) else {
            return;
        };
        if full && !table.contains(t.fp) && !self.make_room(now, protected) {
            // Every state here belongs to this very request (a bound below its number of
            // policies): the bound wins, this state is not tracked.
            return;
        }
        if let Some(table) = self.table(&t.r, t.policy, now)
            && table.commit(t.fp, t.numbers, now, cost, decided)
        {
            self.count += 1;
        }
        self.shed(t, now, protected);
    }

    /// Evicts until the shard is within its bytes again (a sliding log grows with every
    /// admitted request, not only with new keys), sparing the request in progress. The
    /// victims are chosen as for `max_keys` (see [`StoreShard::make_room`]).
    fn shed(&mut self, t: Target<'_>, now: Micros, protected: &dyn Fn(usize, Fingerprint) -> bool) {
        let spared = |index: usize, fp: Fingerprint| {
            (index == t.r.index && fp == t.fp) || protected(index, fp)
        };
        while self.over_budget() && self.count > 0 && self.make_room(now, &spared) {}
    }

    /// Evicts one entry: an expired one of any policy if there is one (it is identical to
    /// a fresh key, so nothing is lost), else, in the policy with the most keys in this
    /// shard, the sampled state whose loss admits the fewest extra requests (a state back to
    /// full before one being limited). Keys with an override are never evicted. Fails only
    /// if every entry belongs to the request in progress.
    fn make_room(&mut self, now: Micros, protected: &dyn Fn(usize, Fingerprint) -> bool) -> bool {
        let overrides = &self.overrides;
        let pinned = |fp: Fingerprint| overrides.contains_key(&fp);
        for held in self.tables.iter_mut().flatten() {
            if held.table.drop_expired(now, &pinned) {
                self.count -= 1;
                return true;
            }
        }
        let largest = self
            .tables
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|t| (t.table.len(), i)))
            .max();
        if let Some((_, index)) = largest
            && let Some(held) = &mut self.tables[index]
            && held
                .table
                .drop_cheapest(now, &|fp| pinned(fp) || protected(index, fp))
        {
            self.count -= 1;
            return true;
        }
        false
    }

    /// Gives back `cost` for one policy.
    pub(crate) fn refund(&mut self, t: Target<'_>, now: Micros, cost: u64) {
        if let Some(table) = self.table(&t.r, t.policy, now) {
            table.refund(t.fp, t.numbers, now, cost);
        }
    }

    /// Settles one policy's part of a reservation (see [`Algorithm::settle`]); a charge on
    /// an untracked key makes room for it like a commit.
    ///
    /// [`Algorithm::settle`]: crate::algorithm::Algorithm::settle
    pub(crate) fn settle(&mut self, t: Target<'_>, now: Micros, a: Admitted, real: u64) {
        let full = self.count >= self.cap || self.over_budget();
        let Some(table) = self.table(&t.r, t.policy, now) else {
            return;
        };
        let tracked = table.contains(t.fp);
        if !tracked && (real <= a.estimate || (full && !self.make_room(now, &|_, _| false))) {
            return;
        }
        if let Some(table) = self.table(&t.r, t.policy, now)
            && table.settle(t.fp, t.numbers, now, a, real)
        {
            self.count += 1;
        }
        // A charge may grow a sliding log.
        self.shed(t, now, &|_, _| false);
    }

    /// Frees one lease of one policy's state of a key (concurrency).
    pub(crate) fn release(
        &mut self,
        t: Target<'_>,
        now: Micros,
        expires_at: Micros,
        cost: u64,
    ) -> bool {
        self.table(&t.r, t.policy, now)
            .is_some_and(|table| table.release(t.fp, t.numbers, now, expires_at, cost))
    }

    /// Forgets one policy's state of a key, and its penalty (not its override).
    pub(crate) fn remove(&mut self, t: Target<'_>, now: Micros) {
        self.penalties.remove(&(t.r.index, t.r.id, t.fp));
        if let Some(table) = self.table(&t.r, t.policy, now)
            && table.remove(t.fp)
        {
            self.count -= 1;
        }
    }

    /// This shard's block of a snapshot (see `snapshot.rs`): its overrides, then per policy
    /// its numbers, states and running penalties. `current` are the registry's policies; a
    /// table of an older version is carried over to its current numbers first, one of a
    /// dropped policy is left out. Returns the states written.
    pub(crate) fn save(
        &mut self,
        current: &[(Arc<Policy>, PolicyRef)],
        now: Micros,
        out: &mut Vec<u8>,
    ) -> u64 {
        let overrides: Vec<(&Fingerprint, &KeyOverride)> = self
            .overrides
            .iter()
            .flat_map(|(fp, list)| list.iter().map(move |o| (fp, o)))
            .collect();
        put_u32(out, overrides.len() as u32);
        for (fp, o) in overrides {
            put_str(out, &o.policy);
            put_u64(out, fp.bits());
            match o.value {
                Some(v) => {
                    out.push(1);
                    put_u64(out, v.limit);
                    put_u64(out, v.burst.unwrap_or(0));
                    put_u64(out, v.period.unwrap_or(0));
                }
                None => out.push(0),
            }
            match &o.written {
                Some(p) => {
                    out.push(1);
                    put_numbers(out, p);
                }
                None => out.push(0),
            }
        }
        let mut saved = Vec::new();
        for index in 0..self.tables.len() {
            let Some(held) = &self.tables[index] else {
                continue;
            };
            let Some((policy, r)) = current.iter().find(|(_, r)| r.index == index) else {
                continue;
            };
            let same = held.id == r.id;
            let older = held.id < r.id && held.lineage == r.lineage;
            if (same || older) && self.table(r, policy, now).is_some() {
                saved.push((policy, *r));
            }
        }
        put_u32(out, saved.len() as u32);
        let mut states = 0;
        for (policy, r) in saved {
            put_numbers(out, policy);
            let at = out.len();
            put_u32(out, 0);
            let n = match &self.tables[r.index] {
                Some(held) => held.table.save(out),
                None => 0,
            };
            out[at..at + 4].copy_from_slice(&n.to_le_bytes());
            states += u64::from(n);
            let penalties: Vec<(Fingerprint, Micros)> = self
                .penalties
                .iter()
                .filter(|((i, id, _), _)| (*i, *id) == (r.index, r.id))
                .map(|((_, _, fp), end)| (*fp, *end))
                .collect();
            put_u32(out, penalties.len() as u32);
            for (fp, end) in penalties {
                put_u64(out, fp.bits());
                put_u64(out, end);
            }
        }
        states
    }

    /// Restores a key's override from a snapshot.
    pub(crate) fn restore_override(
        &mut self,
        fp: Fingerprint,
        policy: &str,
        value: Option<Override>,
        written: Option<Arc<Policy>>,
    ) {
        self.overrides.entry(fp).or_default().push(KeyOverride {
            policy: policy.into(),
            value,
            effective: None,
            written,
        });
        self.general = true;
    }

    /// Makes room in `r`'s table for `additional` states about to be restored (see
    /// `RawTable::reserve`: a snapshot's entries come in an order that a growing table
    /// handles in quadratic time).
    pub(crate) fn reserve(
        &mut self,
        r: &PolicyRef,
        policy: &Policy,
        now: Micros,
        additional: usize,
    ) {
        if let Some(table) = self.table(r, policy, now) {
            table.reserve(additional);
        }
    }

    /// Restores one state from a snapshot (see [`PolicyTable::load_entry`](super::typed::PolicyTable::load_entry)); `None` when
    /// the bytes are not one. Within the shard's bound.
    pub(crate) fn load_entry(
        &mut self,
        r: &PolicyRef,
        policy: &Policy,
        fp: Fingerprint,
        input: &mut &[u8],
        now: Micros,
    ) -> Option<bool> {
        let pinned = overridden(&self.overrides, policy.name(), fp);
        let full = self.count >= self.cap;
        let table = self.table(r, policy, now)?;
        if full {
            // Still read it, to move on to the next one.
            let mut scratch = table_for(policy, 1);
            return scratch.load_entry(fp, input, now, pinned).map(|_| false);
        }
        let kept = table.load_entry(fp, input, now, pinned)?;
        if kept {
            self.count += 1;
        }
        Some(kept)
    }

    /// Restores a running penalty from a snapshot (an ended one is dropped).
    pub(crate) fn restore_penalty(
        &mut self,
        r: &PolicyRef,
        fp: Fingerprint,
        end: Micros,
        now: Micros,
    ) {
        if end > now {
            self.start_penalty((r.index, r.id, fp), end, now);
        }
    }

    /// Incremental expiry on one policy's table.
    pub(crate) fn sweep(&mut self, index: usize, now: Micros) {
        let overrides = &self.overrides;
        let pinned = |fp: Fingerprint| overrides.contains_key(&fp);
        if let Some(Some(held)) = self.tables.get_mut(index) {
            self.count -= held.table.sweep(now, SWEEP_STEPS, &pinned);
        }
    }

    /// Drops the table at `index` if it still belongs to policy `id` (after a reload).
    pub(crate) fn drop_policy(&mut self, index: usize, id: u64) {
        self.penalties
            .retain(|(i, held, _), _| (*i, *held) != (index, id));
        if let Some(cell) = self.tables.get_mut(index)
            && matches!(cell, Some(held) if held.id == id)
            && let Some(held) = cell.take()
        {
            self.count -= held.table.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::AlgorithmKind;
    use crate::memory::fingerprint::KeyHasher;

    /// The layout the one-policy check relies on (see `StoreShard` and `TableCell`): the
    /// shard's hot fields on the line of its mutex; a gcra table's id, tag, algorithm and
    /// the front of its bookkeeping (48 bytes) within the cell's first two lines.
    #[test]
    fn a_one_policy_check_reads_one_line_of_the_shard_and_two_of_the_table() {
        use std::mem::{offset_of, size_of};
        let shard = Padded(parking_lot::Mutex::new(StoreShard::new(8, usize::MAX)));
        let data = &*shard.lock() as *const StoreShard as usize - &shard as *const _ as usize;
        let hot_end = offset_of!(StoreShard, tables) + size_of::<Vec<Option<TableCell>>>();
        assert!(
            data + hot_end <= 64,
            "hot fields end at byte {}",
            data + hot_end
        );

        let policy = Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(1))
            .build()
            .unwrap();
        let cell = TableCell {
            id: 1,
            table: table_for(&policy, 8),
            lineage: 1,
        };
        assert_eq!(offset_of!(TableCell, id), 0);
        let raw = offset_of!(TableCell, table) + cell.table.raw_offset();
        assert!(
            raw + 48 <= 128,
            "the table's bookkeeping starts at byte {raw}"
        );
        assert_eq!(cell.lineage, cell.id);
    }

    /// A full shard of 63 live states and one expired state: a new key evicts the expired
    /// one, although the CLOCK alone would almost surely pick a live one (every reference
    /// bit is set, so its victim is simply the first cell).
    #[test]
    fn make_room_takes_expired_state_first() {
        let t0 = 1_700_000_000_000_000;
        let policy = Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(10))
            .build()
            .unwrap();
        let hasher = KeyHasher::new();
        let mut shard = StoreShard::new(64, usize::MAX);
        let r = PolicyRef {
            index: 0,
            id: 1,
            lineage: 1,
        };
        let target = |key: &str| Target {
            r,
            policy: &policy,
            fp: hasher.fingerprint(key),
            numbers: None,
        };
        let add = |shard: &mut StoreShard, key: &str, now: Micros| {
            let d = shard.evaluate(target(key), now, 1);
            assert!(d.allowed);
            shard.commit(target(key), now, 1, &d, &|_, _| false);
        };
        add(&mut shard, "expired", t0 - 60_000_000);
        for i in 0..63 {
            add(&mut shard, &format!("live-{i}"), t0);
        }
        assert_eq!(shard.count(), 64);
        add(&mut shard, "new", t0);
        assert_eq!(shard.count(), 64);
        for i in 0..63 {
            let d = shard.evaluate(target(&format!("live-{i}")), t0, 0);
            assert_eq!(d.remaining, 0, "live-{i} was evicted");
        }
    }
}
