//! The local state of a [`SyncedStore`](super::SyncedStore): per policy and client key, the
//! counts of its two latest windows, each split into what the fleet had at the last
//! exchange with Redis and what this instance admitted since. Pure (no I/O, time passed
//! in): the decision is core's window algorithm on these counts, and the exchange's
//! bookkeeping is unit-tested here.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use sluicegate_core::algorithm::fixed_window::FixedWindowState;
use sluicegate_core::algorithm::sliding_window::SlidingWindowState;
use sluicegate_core::algorithm::{Algorithm, FixedWindow, SlidingWindow};
use sluicegate_core::{AlgorithmKind, Decision, Micros, Policy};

/// One window's count as this instance sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Window {
    /// `now / period`.
    pub(crate) index: u64,
    /// The fleet's count as Redis returned it at the last exchange (this instance's sent
    /// admissions included).
    pub(crate) global: u64,
    /// Admitted here since, not sent yet.
    pub(crate) pending: u64,
    /// Sent in the exchange under way, not acknowledged yet.
    pub(crate) sending: u64,
}

impl Window {
    fn count(&self) -> u64 {
        self.global
            .saturating_add(self.pending)
            .saturating_add(self.sending)
    }

    fn unsent(&self) -> u64 {
        self.pending.saturating_add(self.sending)
    }
}

/// One (policy, client key) state.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The period its windows are counted in: a reload that changes it starts afresh.
    pub(crate) period: Micros,
    /// A sliding window also reads (so exchanges) the previous window.
    sliding: bool,
    windows: [Window; 2],
    /// The last decision's time: the entry is dropped two periods later, once nothing is
    /// left unsent (a sliding window still reads it during the next window).
    touched: Micros,
    /// Decided on since the last exchange: the next exchange refreshes it.
    pub(crate) dirty: bool,
    /// Exchanges completed when it was last decided on: exchanges keep refreshing it for a
    /// while after (see `KEEP_FRESH`), so a key in steady use never waits for Redis.
    pub(crate) used: u64,
    /// The exchange round whose fleet counts it holds (see `SyncedStore`'s freshness rule).
    pub(crate) round: u64,
}

/// A window an exchange carries: its index and what this instance adds to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Carried {
    pub(crate) index: u64,
    pub(crate) delta: u64,
}

/// Whether the local-first mode can decide `policy`, and if not, why (the words of the
/// configuration error).
pub(crate) fn unsupported(policy: &Policy) -> Option<&'static str> {
    match policy.algorithm() {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow => {}
        AlgorithmKind::Concurrency => {
            return Some(
                "concurrency leases are freed one by one and cannot be counted locally: use store.sync only with fixed_window or sliding_window",
            );
        }
        _ => {
            return Some(
                "store.sync exchanges window counts, which only fixed_window and sliding_window keep (a bucket's level is not a sum of per-instance deltas)",
            );
        }
    }
    if policy.calendar().is_some() {
        return Some("calendar windows are not supported with store.sync");
    }
    if policy.penalty() > 0 {
        return Some("penalties are not supported with store.sync");
    }
    None
}

/// What `policy`'s window algorithm decides for `cost` at `now` on `entry`'s counts
/// (`None`: a key with no count). The caller checked the policy with [`unsupported`].
pub(crate) fn decide(policy: &Policy, entry: Option<&Entry>, now: Micros, cost: u64) -> Decision {
    let period = policy.period();
    let window = now / period;
    let entry = entry.filter(|e| e.period == period);
    let count = |index: u64| entry.map_or(0, |e| e.count(index));
    if policy.algorithm() == AlgorithmKind::SlidingWindow {
        let state = SlidingWindowState {
            window,
            previous: window.checked_sub(1).map_or(0, count),
            current: count(window),
        };
        SlidingWindow::new(policy.limit(), period).evaluate(&state, now, cost, None)
    } else {
        let state = FixedWindowState {
            window,
            count: count(window),
        };
        FixedWindow::new(policy.limit(), period).evaluate(&state, now, cost, None)
    }
}

/// The windows an exchange reads for `policy` at `now`: the current one, and for a sliding
/// window the previous one too.
pub(crate) fn read_windows(policy: &Policy, now: Micros) -> Vec<u64> {
    let window = now / policy.period();
    match (policy.algorithm(), window.checked_sub(1)) {
        (AlgorithmKind::SlidingWindow, Some(previous)) => vec![previous, window],
        _ => vec![window],
    }
}

impl Entry {
    /// A state for `policy` holding the fleet's `counts` (window index, count) as read in
    /// exchange `round`.
    pub(crate) fn new(policy: &Policy, now: Micros, counts: &[(u64, u64)], round: u64) -> Entry {
        let mut entry = Entry {
            period: policy.period(),
            sliding: policy.algorithm() == AlgorithmKind::SlidingWindow,
            windows: [Window::default(); 2],
            touched: now,
            dirty: false,
            used: round,
            round,
        };
        entry.refresh(counts, round);
        entry
    }

    /// Takes the fleet's `counts` read outside an exchange (a key seen again after a
    /// round it was not part of), keeping what this instance has not sent.
    ///
    /// The read raced with exchanges, so it is merged, not assigned. A shared count only
    /// grows within its window, so a read lower than `global` was taken before an exchange
    /// this entry has already applied: assigning it would forget admissions this instance
    /// sent (and let it admit past the limit by itself). A read taken while an exchange is
    /// in flight may or may not include what is `sending`; subtracting it never counts
    /// this instance's admissions twice, and the maximum keeps what is already known.
    pub(crate) fn refresh(&mut self, counts: &[(u64, u64)], round: u64) -> u64 {
        let mut dropped = 0;
        for &(index, total) in counts {
            let (slot, lost) = self.slot(index);
            dropped += lost;
            let w = &mut self.windows[slot];
            w.global = w.global.max(total.saturating_sub(w.sending));
        }
        self.round = round;
        dropped
    }

    /// The count of window `index`: the fleet's at the last exchange plus what this
    /// instance admitted since.
    pub(crate) fn count(&self, index: u64) -> u64 {
        self.windows
            .iter()
            .find(|w| w.index == index)
            .map_or(0, Window::count)
    }

    /// The slot of window `index`, replacing the older of the two if neither is it.
    /// Returns what the replaced window had not sent: it is dropped (no decision reads a
    /// window older than the previous one).
    fn slot(&mut self, index: u64) -> (usize, u64) {
        if let Some(i) = self.windows.iter().position(|w| w.index == index) {
            return (i, 0);
        }
        let oldest = usize::from(self.windows[1].index < self.windows[0].index);
        let lost = self.windows[oldest].unsent();
        self.windows[oldest] = Window {
            index,
            ..Window::default()
        };
        (oldest, lost)
    }

    /// Records `cost` admitted at `now`; returns what it dropped (see [`Entry::slot`]).
    pub(crate) fn admit(&mut self, now: Micros, cost: u64) -> u64 {
        let (slot, lost) = self.slot(now / self.period);
        let window = &mut self.windows[slot];
        window.pending = window.pending.saturating_add(cost);
        self.touched = self.touched.max(now);
        self.dirty = true;
        lost
    }

    /// Marks the key as read at `now` (a zero-cost check): the next exchange refreshes it.
    pub(crate) fn touch(&mut self, now: Micros) {
        self.touched = self.touched.max(now);
        self.dirty = true;
    }

    /// Gives back what a cancelled request took, from what is not sent yet: an admission
    /// already added to the fleet's count stays counted (the safe side).
    pub(crate) fn refund(&mut self, now: Micros, cost: u64) {
        let index = now / self.period;
        if let Some(w) = self.windows.iter_mut().find(|w| w.index == index) {
            w.pending = w.pending.saturating_sub(cost);
        }
    }

    /// Starts an exchange at `now`: each window to send (what is pending moves to
    /// `sending`) and to read goes to `carry`. Returns what was dropped (unsent counts of
    /// windows no decision reads any more).
    pub(crate) fn take_each(&mut self, now: Micros, mut carry: impl FnMut(Carried)) -> u64 {
        let current = now / self.period;
        let (_, mut dropped) = self.slot(current);
        let previous = current.saturating_sub(1);
        let sliding = self.sliding;
        for w in &mut self.windows {
            let wanted = w.index == current
                || (w.index == previous && (sliding || w.pending > 0) && current > 0);
            if wanted {
                carry(Carried {
                    index: w.index,
                    delta: w.pending,
                });
                w.sending = w.sending.saturating_add(w.pending);
                w.pending = 0;
            } else if w.index < previous {
                dropped += w.pending;
                w.pending = 0;
            }
        }
        self.dirty = false;
        dropped
    }

    /// [`Entry::take_each`], collected.
    #[cfg(test)]
    pub(crate) fn take(&mut self, now: Micros) -> (Vec<Carried>, u64) {
        let mut carried = Vec::with_capacity(2);
        let dropped = self.take_each(now, |c| carried.push(c));
        (carried, dropped)
    }

    /// The exchange of `round` answered: window `index`, to which `sent` was added, now
    /// counts `total` fleet-wide (`sent` included).
    pub(crate) fn apply(&mut self, index: u64, sent: u64, total: u64, round: u64) {
        if let Some(w) = self.windows.iter_mut().find(|w| w.index == index) {
            w.sending = w.sending.saturating_sub(sent);
            w.global = total;
        }
        self.round = self.round.max(round);
    }

    /// The exchange failed: what was sent goes back to pending, to be sent again.
    pub(crate) fn restore(&mut self, index: u64, sent: u64) {
        if let Some(w) = self.windows.iter_mut().find(|w| w.index == index) {
            w.sending = w.sending.saturating_sub(sent);
            w.pending = w.pending.saturating_add(sent);
        }
    }

    /// Nothing left to send and unread for two periods: it can go.
    pub(crate) fn idle(&self, now: Micros) -> bool {
        self.windows.iter().all(|w| w.unsent() == 0)
            && now >= self.touched.saturating_add(self.period.saturating_mul(2))
    }

    fn unsent(&self) -> u64 {
        self.windows.iter().map(Window::unsent).sum()
    }

    /// Holds admissions Redis has not taken yet.
    pub(crate) fn has_unsent(&self) -> bool {
        self.unsent() > 0
    }
}

/// Bytes of a state key kept inline in the map's bucket: most keys (prefix, client key,
/// policy name) fit, and the bucket holds the whole entry.
const INLINE: usize = 54;

/// A state key as the local map holds it: inline when short, so a lookup compares it in
/// the bucket it already loaded. With a `String`, every decision on one of many keys took
/// one more cache miss following the pointer (the largest single cost of a local
/// decision at 10,000 keys).
#[derive(Debug, Clone)]
pub(crate) enum StateKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl StateKey {
    pub(crate) fn new(key: &str) -> StateKey {
        let source = key.as_bytes();
        if source.len() > INLINE {
            return StateKey::Heap(source.into());
        }
        let mut bytes = [0; INLINE];
        bytes[..source.len()].copy_from_slice(source);
        StateKey::Inline {
            len: source.len() as u8,
            bytes,
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            StateKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            StateKey::Heap(bytes) => bytes,
        }
    }
}

// Looked up by `&[u8]`: hash and equality are the bytes' own, as `Borrow` requires.
impl Borrow<[u8]> for StateKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Hash for StateKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for StateKey {
    fn eq(&self, other: &StateKey) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for StateKey {}

/// One shard of the local state, behind its own lock.
#[derive(Debug)]
pub(crate) struct Shard {
    /// Entries by their Redis state key (which names the policy, the algorithm and the
    /// escaped client key: unique per state).
    pub(crate) map: HashMap<StateKey, Entry, foldhash::fast::RandomState>,
    capacity: usize,
}

impl Shard {
    /// An empty shard holding at most `capacity` entries.
    pub(crate) fn new(capacity: usize) -> Shard {
        Shard {
            map: HashMap::default(),
            capacity: capacity.max(1),
        }
    }

    /// Makes room for one more entry: drops idle ones, then (still full) the least
    /// recently used entry with nothing unsent, whose count is safe in Redis. False when
    /// every entry holds unsent admissions (then the decision fails as an outage).
    pub(crate) fn room(&mut self, now: Micros) -> bool {
        if self.map.len() < self.capacity {
            return true;
        }
        self.map.retain(|_, e| !e.idle(now));
        if self.map.len() < self.capacity {
            return true;
        }
        let victim = self
            .map
            .iter()
            .filter(|(_, e)| e.unsent() == 0)
            .min_by_key(|(_, e)| e.touched)
            .map(|(k, _)| k.clone());
        match victim {
            Some(key) => {
                self.map.remove(&key);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy(kind: AlgorithmKind) -> Policy {
        Policy::builder("p", kind, 10, Duration::from_secs(1))
            .build()
            .unwrap()
    }

    const S: Micros = 1_000_000;

    #[test]
    fn decides_on_fleet_count_plus_own() {
        let p = policy(AlgorithmKind::FixedWindow);
        let now = 100 * S;
        let mut e = Entry::new(&p, now, &[(100, 7)], 1);
        assert!(decide(&p, Some(&e), now, 3).allowed);
        e.admit(now, 3);
        assert_eq!(e.count(100), 10);
        assert!(!decide(&p, Some(&e), now, 1).allowed);
        // The next window starts from zero.
        assert!(decide(&p, Some(&e), now + S, 10).allowed);
    }

    #[test]
    fn exchange_moves_pending_through_sending_to_global() {
        let p = policy(AlgorithmKind::FixedWindow);
        let now = 100 * S;
        let mut e = Entry::new(&p, now, &[], 0);
        e.admit(now, 4);
        let (carried, dropped) = e.take(now);
        assert_eq!(
            carried,
            vec![Carried {
                index: 100,
                delta: 4
            }]
        );
        assert_eq!(dropped, 0);
        e.admit(now, 1);
        assert_eq!(e.count(100), 5, "sent but unacknowledged still counts");
        e.apply(100, 4, 9, 1); // the fleet had 5 more
        assert_eq!(e.count(100), 10);
        assert_eq!(e.round, 1);
        let (carried, _) = e.take(now);
        e.restore(100, carried[0].delta);
        assert_eq!(e.count(100), 10, "a failed exchange keeps the count");
        assert_eq!(
            e.take(now).0,
            vec![Carried {
                index: 100,
                delta: 1
            }]
        );
    }

    #[test]
    fn a_read_racing_an_exchange_neither_forgets_nor_doubles() {
        let p = policy(AlgorithmKind::FixedWindow);
        let now = 100 * S;
        let mut e = Entry::new(&p, now, &[(100, 0)], 0);
        e.admit(now, 6);
        let (carried, _) = e.take(now);
        e.apply(100, carried[0].delta, 6, 1);
        // A read issued before that exchange answers after it: 0, not 6.
        e.refresh(&[(100, 0)], 1);
        assert_eq!(e.count(100), 6, "the sent admissions stay counted");
        // A read taken after the next exchange's INCRBY, applied before its answer.
        e.admit(now, 2);
        let (carried, _) = e.take(now);
        e.refresh(&[(100, 9)], 1); // 6 + our 2 + 1 from another instance
        assert_eq!(e.count(100), 9, "our 2 in flight are not counted twice");
        e.apply(100, carried[0].delta, 9, 2);
        assert_eq!(e.count(100), 9);
        // A read from before that INCRBY: 7 (6 + the other's 1) without our 2.
        e.admit(now, 1);
        let (carried, _) = e.take(now);
        e.refresh(&[(100, 7)], 2);
        assert_eq!(e.count(100), 10, "9 known + 1 in flight");
        e.restore(100, carried[0].delta);
        assert_eq!(e.count(100), 10);
    }

    #[test]
    fn sliding_window_reads_and_keeps_previous() {
        let p = policy(AlgorithmKind::SlidingWindow);
        let now = 100 * S;
        let mut e = Entry::new(&p, now, &[(99, 0), (100, 0)], 0);
        e.admit(now, 10);
        assert!(
            !decide(&p, Some(&e), now + S, 1).allowed,
            "previous weighs fully"
        );
        let (carried, _) = e.take(now + S);
        let mut carried: Vec<(u64, u64)> = carried.iter().map(|c| (c.index, c.delta)).collect();
        carried.sort_unstable();
        assert_eq!(carried, vec![(100, 10), (101, 0)]);
        assert_eq!(read_windows(&p, now), vec![99, 100]);
    }

    #[test]
    fn unsent_counts_of_old_windows_are_dropped_and_reported() {
        let p = policy(AlgorithmKind::FixedWindow);
        let mut e = Entry::new(&p, 100 * S, &[], 0);
        e.admit(100 * S, 3);
        assert_eq!(e.admit(101 * S, 1), 0);
        assert_eq!(e.admit(102 * S, 1), 3, "window 100 replaced with 3 unsent");
        assert!(!e.idle(105 * S));
        let _ = e.take(104 * S);
        e.windows.iter_mut().for_each(|w| w.sending = 0);
        assert!(e.idle(105 * S));
    }

    #[test]
    fn full_shard_evicts_only_what_is_safe_in_redis() {
        let p = policy(AlgorithmKind::FixedWindow);
        let mut shard = Shard::new(1);
        let mut e = Entry::new(&p, 0, &[], 0);
        e.admit(0, 1);
        shard.map.insert(StateKey::new("a"), e);
        assert!(!shard.room(0), "its admission is not in Redis yet");
        let (carried, _) = shard.map.get_mut(&b"a"[..]).unwrap().take(0);
        shard
            .map
            .get_mut(&b"a"[..])
            .unwrap()
            .apply(0, carried[0].delta, 1, 1);
        assert!(shard.room(0));
        assert!(shard.map.is_empty());
    }

    #[test]
    fn state_keys_short_and_long_are_found_by_their_bytes() {
        let mut shard = Shard::new(4);
        let short = "p:{client}:p:fw".to_owned();
        let long = format!("p:{{{}}}:p:fw", "x".repeat(100));
        let e = Entry::new(&policy(AlgorithmKind::FixedWindow), 0, &[], 0);
        shard.map.insert(StateKey::new(&short), e.clone());
        shard.map.insert(StateKey::new(&long), e);
        assert!(matches!(StateKey::new(&short), StateKey::Inline { .. }));
        assert!(matches!(StateKey::new(&long), StateKey::Heap(_)));
        assert!(shard.map.contains_key(short.as_bytes()));
        assert!(shard.map.contains_key(long.as_bytes()));
        assert!(!shard.map.contains_key(&long.as_bytes()[..INLINE]));
        assert!(!shard.map.contains_key(&short.as_bytes()[..3]));
    }

    #[test]
    fn refuses_what_it_cannot_count() {
        for kind in [
            AlgorithmKind::TokenBucket,
            AlgorithmKind::Gcra,
            AlgorithmKind::LeakyBucket,
            AlgorithmKind::SlidingLog,
        ] {
            assert!(unsupported(&policy(kind)).is_some(), "{kind}");
        }
        assert!(unsupported(&policy(AlgorithmKind::FixedWindow)).is_none());
        let penalised = Policy::builder("p", AlgorithmKind::FixedWindow, 1, Duration::from_secs(1))
            .penalty(Duration::from_secs(5))
            .build()
            .unwrap();
        assert!(unsupported(&penalised).is_some());
    }
}
