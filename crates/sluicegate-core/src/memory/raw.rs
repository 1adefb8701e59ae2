//! [`RawTable`]: one policy's states in one shard, an open-addressing table of
//! `(fingerprint, state)` cells with linear probing and backward-shift deletion (no
//! tombstones), so a tracked key costs `8 + size_of::<State>()` bytes over the load factor.
//!
//! Two hands walk the cells, each a few steps at a time:
//! - the sweep hand drops expired state (`idle_at <= now`, identical to a fresh key) and
//!   keeps `min_idle`, a lower bound of every entry's `idle_at`, so that "is anything
//!   expired here?" is usually answered without looking;
//! - the clock hand picks the victim when live state must go: it samples the next few
//!   entries and takes the one whose loss admits the fewest extra requests (a state back to
//!   full before a client being limited), the one not recently used on a tie (each hit sets
//!   a cell's reference bit, the hand clears bits as it passes).

use crate::clock::Micros;

use super::fingerprint::Fingerprint;

/// Cells are at most this full (7/8) before the table grows.
const LOAD_NUM: usize = 7;
const LOAD_DEN: usize = 8;
/// Smallest non-empty table.
const MIN_CELLS: usize = 8;

/// Reference bit in a cell's tag.
const REFERENCED: u64 = 1;

/// One cell; `tag == 0` is empty, else the fingerprint with bit 0 as the reference bit.
#[derive(Debug, Default, Clone)]
struct Cell<S> {
    tag: u64,
    state: S,
}

/// The cells of one policy in one shard. Every method that may drop or move entries takes
/// `idle_at`, the algorithm's expiry function, to keep `min_idle` a valid lower bound.
///
/// `repr(C)` keeps the fields every decision touches (the cells, `len`, the expiry
/// bounds, `heap_of`) in declaration order at the front: behind a shard's mutex byte they
/// share its first cache line, so a decision loads one line of the shard, not two.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct RawTable<S> {
    cells: Box<[Cell<S>]>,
    len: usize,
    /// No entry has `idle_at < min_idle`.
    min_idle: Micros,
    /// Smallest `idle_at` seen since the sweep hand last passed cell 0.
    pending_min: Micros,
    /// Heap bytes one state holds (`Algorithm::heap_bytes`); `None` for states that
    /// cannot hold any (nothing to drop), which then skip the count on every update.
    heap_of: Option<fn(&S) -> usize>,
    /// Most entries this table may ever hold (the shard's bound); caps growth.
    max_len: usize,
    sweep: usize,
    clock: usize,
    /// Heap bytes of every entry's state, as `heap_of` measures them.
    heap: usize,
}

/// Cells needed to hold `len` entries within the load factor.
fn cells_for(len: usize) -> usize {
    (len * LOAD_DEN).div_ceil(LOAD_NUM).max(MIN_CELLS)
}

impl<S: Default> RawTable<S> {
    /// An empty table (no allocation) that will hold at most `max_len` entries, of states
    /// with nothing on the heap.
    pub(crate) fn new(max_len: usize) -> Self {
        Self::with_heap(max_len, |_| 0)
    }

    /// An empty table whose states hold `heap_of(state)` bytes on the heap each.
    pub(crate) fn with_heap(max_len: usize, heap_of: fn(&S) -> usize) -> Self {
        // A state that holds heap memory must free it: one with nothing to drop holds none.
        let heap_of = std::mem::needs_drop::<S>().then_some(heap_of);
        RawTable {
            cells: Box::default(),
            len: 0,
            max_len,
            sweep: 0,
            clock: 0,
            min_idle: Micros::MAX,
            pending_min: Micros::MAX,
            heap: 0,
            heap_of,
        }
    }

    /// Bytes this table holds: its cells and what its states keep on the heap.
    pub(crate) fn bytes(&self) -> usize {
        self.allocated_bytes() + self.heap
    }

    /// Changes the state in cell `i` with `f`, keeping the count of heap bytes.
    #[inline(always)]
    pub(crate) fn update<R>(&mut self, i: usize, f: impl FnOnce(&mut S) -> R) -> R {
        let state = &mut self.cells[i].state;
        // Known from the type: such a state has no `heap_of` (`with_heap`), and the
        // one-policy path then tests nothing here.
        if !std::mem::needs_drop::<S>() {
            return f(state);
        }
        let Some(heap_of) = self.heap_of else {
            return f(state);
        };
        let before = heap_of(state);
        let result = f(state);
        let after = heap_of(state);
        self.heap = self.heap + after - before;
        result
    }

    /// Heap bytes of `state` (0 for states that cannot hold any).
    #[inline]
    fn heap_of(&self, state: &S) -> usize {
        self.heap_of.map_or(0, |heap_of| heap_of(state))
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds its bound of entries.
    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.max_len
    }

    /// Bytes of cells allocated.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<Cell<S>>()
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.cells.len() { 0 } else { i + 1 }
    }

    /// The cell of `fp`, marking it recently used.
    #[inline(always)]
    pub(crate) fn find(&mut self, fp: Fingerprint) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        // A key is most often in its home cell or the next one, and which of the two is a
        // coin toss that a branch on the first comparison loses: in callgrind's branch
        // simulation it mispredicted on 42 % of its executions, 0.37–0.44 times a check
        // at 1k keys (docs/benchmarks/core.md, ninth pass). Both tags are read and the cell picked without a branch;
        // only a key further on (or absent) branches away. The cell found is the one the
        // plain probe finds (`find_is_the_linear_probe`).
        let i = fp.home(self.cells.len());
        let j = self.next(i);
        let (home, next) = (self.cells[i].tag, self.cells[j].tag);
        // (If the next cell holds `fp`, the home cell is not empty: a key sits in the run
        // that starts at its home, and removals shift runs back, leaving no gap.)
        // `select_unpredictable`: LLVM turned a plain `if` back into the two branches.
        let in_home = home & !REFERENCED == fp.bits();
        let (hit, tag) = std::hint::select_unpredictable(in_home, (i, home), (j, next));
        if tag & !REFERENCED == fp.bits() {
            self.cells[hit].tag = tag | REFERENCED;
            return Some(hit);
        }
        if home == 0 || next == 0 {
            return None;
        }
        self.find_from(fp, self.next(j))
    }

    /// [`RawTable::find`] from cell `i` on (the home cell and the next one held neither
    /// `fp` nor an empty cell).
    #[inline]
    fn find_from(&mut self, fp: Fingerprint, mut i: usize) -> Option<usize> {
        loop {
            let tag = self.cells[i].tag;
            if tag == 0 {
                return None;
            }
            if tag & !REFERENCED == fp.bits() {
                self.cells[i].tag = tag | REFERENCED;
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// The state in cell `i` (from [`RawTable::find`] or [`RawTable::insert`]).
    #[inline(always)]
    pub(crate) fn state(&self, i: usize) -> &S {
        &self.cells[i].state
    }

    /// The state in cell `i`, to change it; `idle_at` is its expiry after the change. Only
    /// for tables made with [`RawTable::new`] (nothing on the heap to count); others change
    /// states through [`RawTable::update`].
    #[inline]
    pub(crate) fn state_mut(&mut self, i: usize) -> &mut S {
        &mut self.cells[i].state
    }

    /// Records that an entry now expires at `idle_at` (after a change to its state), or at
    /// least not before. After an admitted request, `now + reset_after` is exactly the
    /// state's `idle_at` (or less, if the clock stepped back), which saves computing it.
    #[inline(always)]
    pub(crate) fn note_idle_at(&mut self, idle_at: Micros) {
        self.min_idle = self.min_idle.min(idle_at);
        self.pending_min = self.pending_min.min(idle_at);
    }

    /// Every entry, to change its state in place (a carry-over to new numbers); `keep`
    /// says which to leave alone. The expiry bound is restarted, as every state may expire
    /// at another time afterwards.
    pub(crate) fn update_all(
        &mut self,
        keep: impl Fn(Fingerprint) -> bool,
        mut update: impl FnMut(&mut S),
    ) {
        let counted = self.heap_of;
        let heap_of = |s: &S| counted.map_or(0, |heap_of| heap_of(s));
        for cell in self.cells.iter_mut().filter(|s| s.tag != 0) {
            if !keep(Fingerprint::from_tag(cell.tag)) {
                let before = heap_of(&cell.state);
                update(&mut cell.state);
                self.heap = self.heap + heap_of(&cell.state) - before;
            }
        }
        self.min_idle = 0;
        self.pending_min = Micros::MAX;
        self.sweep = 0;
    }

    /// Visits every entry (for a snapshot).
    pub(crate) fn for_each(&self, mut visit: impl FnMut(Fingerprint, &S)) {
        for cell in self.cells.iter().filter(|s| s.tag != 0) {
            visit(Fingerprint::from_tag(cell.tag), &cell.state);
        }
    }

    /// Inserts `fp` (not present) with a fresh state; the caller made room (`len < max_len`).
    pub(crate) fn insert(&mut self, fp: Fingerprint) -> usize {
        debug_assert!(self.len < self.max_len.max(1));
        if (self.len + 1) * LOAD_DEN > self.cells.len() * LOAD_NUM {
            self.grow();
        }
        let mut i = fp.home(self.cells.len());
        while self.cells[i].tag != 0 {
            i = self.next(i);
        }
        self.cells[i] = Cell {
            tag: fp.bits() | REFERENCED,
            state: S::default(),
        };
        self.len += 1;
        i
    }

    /// Grows by half (not doubling: the load stays between 7/12 and 7/8, so memory per key
    /// stays within 1.5× of the minimum), never beyond what `max_len` entries need.
    fn grow(&mut self) {
        let wanted = (self.cells.len() + self.cells.len() / 2).max(MIN_CELLS);
        let size = wanted
            .min(cells_for(self.max_len))
            .max(cells_for(self.len + 1));
        self.resize(size);
    }

    /// Makes room for `additional` more entries (within `max_len`) at once, before a bulk
    /// load. Why: a snapshot lists a table's entries in cell order, that is sorted by home
    /// cell; inserted one by one into a table that grows as it goes, the first of them all
    /// have their homes at the start of the small table and pile into one probe run, so the
    /// load turns quadratic (minutes for a million keys). In a table of its final size the
    /// order does not matter: linear probing's total displacement does not depend on it.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let size = cells_for(self.len.saturating_add(additional).min(self.max_len));
        if size > self.cells.len() {
            self.resize(size);
        }
    }

    /// Moves every entry into `size` cells (at least `len / load factor`).
    fn resize(&mut self, size: usize) {
        let old = std::mem::replace(
            &mut self.cells,
            std::iter::repeat_with(Cell::default).take(size).collect(),
        );
        for cell in old.into_vec() {
            if cell.tag != 0 {
                let mut i = Fingerprint::from_tag(cell.tag).home(size);
                while self.cells[i].tag != 0 {
                    i = self.next(i);
                }
                self.cells[i] = cell;
            }
        }
        // Positions changed: restart both walks; `min_idle` is still a valid bound.
        self.sweep = 0;
        self.clock = 0;
        self.pending_min = self.min_idle;
    }

    /// Removes the entry in cell `i`, shifting the probe run behind it back.
    pub(crate) fn remove_at(&mut self, mut i: usize, idle_at: impl Fn(&S) -> Micros) {
        self.heap -= self.heap_of(&self.cells[i].state);
        self.cells[i] = Cell::default();
        self.len -= 1;
        let n = self.cells.len();
        let mut j = self.next(i);
        while self.cells[j].tag != 0 {
            let home = Fingerprint::from_tag(self.cells[j].tag).home(n);
            // Entry j may move to i if i lies on its probe path [home, j).
            if (j + n - home) % n >= (j + n - i) % n {
                self.cells.swap(i, j);
                // It may have jumped over the sweep hand: keep it in the bound.
                let t = idle_at(&self.cells[i].state);
                self.pending_min = self.pending_min.min(t);
                i = j;
            }
            j = self.next(j);
        }
    }

    /// Removes `fp` if present.
    pub(crate) fn remove(&mut self, fp: Fingerprint, idle_at: impl Fn(&S) -> Micros) -> bool {
        match self.find(fp) {
            Some(i) => {
                self.remove_at(i, idle_at);
                true
            }
            None => false,
        }
    }

    /// Advances the sweep hand by up to `steps` cells, dropping expired entries. Returns how
    /// many were dropped. Does nothing while `now < min_idle` (nothing can be expired).
    #[inline]
    pub(crate) fn sweep(
        &mut self,
        now: Micros,
        steps: usize,
        idle_at: impl Fn(&S) -> Micros + Copy,
        pinned: &dyn Fn(Fingerprint) -> bool,
    ) -> usize {
        // Answered inline on every decision; the walk itself is out of line.
        if self.len == 0 || now < self.min_idle {
            return 0;
        }
        self.sweep_steps(now, steps, idle_at, pinned)
    }

    /// [`RawTable::sweep`]'s walk, when something may have expired.
    #[inline(never)]
    fn sweep_steps(
        &mut self,
        now: Micros,
        steps: usize,
        idle_at: impl Fn(&S) -> Micros + Copy,
        pinned: &dyn Fn(Fingerprint) -> bool,
    ) -> usize {
        let mut dropped = 0;
        for _ in 0..steps {
            if self.step(now, idle_at, pinned) {
                dropped += 1;
            }
        }
        dropped
    }

    /// Drops one expired entry if there is any (scanning up to a full turn). Returns whether
    /// one was dropped. A full turn without one refreshes `min_idle`, so the next call
    /// answers at once until some entry can have expired.
    pub(crate) fn drop_expired(
        &mut self,
        now: Micros,
        idle_at: impl Fn(&S) -> Micros + Copy,
        pinned: &dyn Fn(Fingerprint) -> bool,
    ) -> bool {
        if self.len == 0 || now < self.min_idle {
            return false;
        }
        for _ in 0..self.cells.len() {
            if self.step(now, idle_at, pinned) {
                return true;
            }
        }
        false
    }

    /// One sweep step; returns whether it dropped an entry (the hand then stays, as the
    /// next entry shifted into its cell). A `pinned` entry (a key with an override, whose
    /// state the table's own numbers cannot date) is never dropped as expired.
    fn step(
        &mut self,
        now: Micros,
        idle_at: impl Fn(&S) -> Micros + Copy,
        pinned: &dyn Fn(Fingerprint) -> bool,
    ) -> bool {
        let i = self.sweep;
        let tag = self.cells[i].tag;
        if tag != 0 && !pinned(Fingerprint::from_tag(tag)) {
            let t = idle_at(&self.cells[i].state);
            if t <= now {
                self.remove_at(i, idle_at);
                return true;
            }
            self.pending_min = self.pending_min.min(t);
        }
        self.sweep = self.next(i);
        if self.sweep == 0 {
            self.min_idle = self.pending_min;
            self.pending_min = Micros::MAX;
        }
        false
    }

    /// Drops the entry whose loss admits the fewest extra requests, among the next `sample`
    /// unprotected entries after the clock hand: the one with the lowest `loss` (for a rate
    /// limit, the budget it has used: a state back to full loses nothing), on a tie the one
    /// that would be back to full soonest (`idle_at`), then the one not recently used. The hand moves past the sample, clearing reference bits, so
    /// successive evictions look at different entries. A client being limited therefore
    /// outlives any number of fresh keys: each of them is cheaper to lose. Returns whether
    /// one was dropped (false only when every entry is protected).
    pub(crate) fn drop_cheapest(
        &mut self,
        sample: usize,
        loss: impl Fn(&S) -> u64,
        protected: impl Fn(Fingerprint) -> bool,
        idle_at: impl Fn(&S) -> Micros,
    ) -> bool {
        let mut best: Option<((u64, Micros, bool), usize)> = None;
        let mut seen = 0;
        for _ in 0..self.cells.len() {
            let i = self.clock;
            self.clock = self.next(i);
            let tag = self.cells[i].tag;
            if tag == 0 || protected(Fingerprint::from_tag(tag)) {
                continue;
            }
            let state = &self.cells[i].state;
            let key = (loss(state), idle_at(state), tag & REFERENCED != 0);
            self.cells[i].tag = tag & !REFERENCED;
            if best.is_none_or(|(b, _)| key < b) {
                best = Some((key, i));
            }
            seen += 1;
            if seen == sample {
                break;
            }
        }
        match best {
            Some((_, i)) => {
                self.remove_at(i, idle_at);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A well-spread fingerprint for entry `i` (SplitMix64's finaliser; bit 0 clear, not 0).
    fn fp(i: u64) -> Fingerprint {
        let mut z = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Fingerprint::from_bits((z ^ (z >> 31)) & !1 | 2).expect("bit 0 clear, not 0")
    }

    proptest::proptest! {
        /// `find` (two cells read at once) finds the cell a plain linear probe from the
        /// home cell finds, and marks the same cell, in tables crowded enough for runs to
        /// wrap past the end and keys to sit beyond their home's neighbour, after removals
        /// (backward shifts) too; half the keys looked up are absent.
        #[test]
        fn find_is_the_linear_probe(
            ids in proptest::collection::vec(0u64..400, 1..200),
            removed in proptest::collection::vec(0u64..400, 0..60),
            looked in proptest::collection::vec(0u64..800, 1..100),
        ) {
            let idle_at = |_: &u64| 0;
            let mut fast = RawTable::<u64>::new(1000);
            let mut plain = RawTable::<u64>::new(1000);
            for id in ids {
                if fast.find(fp(id)).is_none() {
                    fast.insert(fp(id));
                    plain.insert(fp(id));
                }
            }
            for id in removed {
                fast.remove(fp(id), idle_at);
                plain.remove(fp(id), idle_at);
            }
            for id in looked {
                let expected = if plain.len == 0 {
                    None
                } else {
                    let home = fp(id).home(plain.cells.len());
                    plain.find_from(fp(id), home)
                };
                proptest::prop_assert_eq!(fast.find(fp(id)), expected);
                let tags = |t: &RawTable<u64>| t.cells.iter().map(|c| c.tag).collect::<Vec<_>>();
                proptest::prop_assert_eq!(tags(&fast), tags(&plain));
            }
        }
    }

    /// A big table loaded the way a restore loads it (entries in another table's cell
    /// order, after `reserve`), then every operation on it: finding, removal with backward
    /// shifts, the sweep, eviction, the snapshot's walk and the drop.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_reserved_table_loaded_in_cell_order_keeps_every_operation_exact() {
        let n: u64 = 300_000;
        let idle_at = |s: &u64| *s;
        let mut source = RawTable::<u64>::new(n as usize);
        for i in 0..n {
            let at = source.insert(fp(i));
            *source.state_mut(at) = i;
        }
        let mut table = RawTable::<u64>::new(n as usize);
        table.reserve(n as usize);
        let reserved = table.allocated_bytes();
        assert_eq!(reserved, cells_for(n as usize) * 16);
        source.for_each(|f, &i| {
            let at = table.insert(f);
            *table.state_mut(at) = i;
            table.note_idle_at(i);
        });
        // Room for all of them: no growth while loading.
        assert_eq!(
            (table.len(), table.allocated_bytes()),
            (n as usize, reserved)
        );
        for i in 0..n {
            let at = table.find(fp(i)).expect("inserted");
            assert_eq!(*table.state(at), i);
        }
        // Remove every third entry: the runs behind them shift back, the rest stay found.
        for i in (0..n).step_by(3) {
            assert!(table.remove(fp(i), idle_at));
        }
        for i in 0..n {
            assert_eq!(
                table.find(fp(i)).map(|at| *table.state(at)),
                (i % 3 != 0).then_some(i)
            );
        }
        let left = table.len();
        // Entries whose idle_at (their index) is below 1000 have expired at 999.
        let expired = (0..1000).filter(|i| i % 3 != 0).count();
        let none = |_: Fingerprint| false;
        let mut dropped = 0;
        while table.drop_expired(999, idle_at, &none) {
            dropped += 1;
        }
        assert_eq!((dropped, table.len()), (expired, left - expired));
        // Eviction drops one entry of its sample.
        assert!(table.drop_cheapest(16, |s| u64::MAX - s, |_| false, idle_at));
        let mut seen = 0;
        table.for_each(|f, s| {
            assert_eq!(f, fp(*s));
            seen += 1;
        });
        assert_eq!(seen, left - expired - 1);
        // Reserving less than is held, or past the bound, changes nothing.
        table.reserve(0);
        assert_eq!(table.allocated_bytes(), reserved);
    }
}
