//! [`DashboardObserver`]: sees every verdict and keeps, in fixed memory, what the page
//! shows: decisions per second by policy and outcome over the last minute, and the most
//! limited keys of the last few minutes (one space-saving sketch per minute).
//!
//! Every decision of every thread is counted here, so the counts are sharded: a thread
//! records into its own shard (an uncontended lock on a cache line of its own), and the
//! page's reads, a few a second, merge the shards. One process-wide lock taken per decision
//! was a point every worker thread met at high rates.

use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};
use sluicegate_core::{Clock, Micros, Outcome, Policy, SystemClock, VerdictObserver};

use crate::leases::{LeaseItem, LeaseKeys, MAX_LEASE_KEYS, SettleActivity};
use crate::sketch::SpaceSaving;
use crate::snapshot::{KeyRow, PolicyRow, Snapshot};

/// The outcomes in the order the counters keep them.
pub const OUTCOMES: [Outcome; 5] = [
    Outcome::Allowed,
    Outcome::Denied,
    Outcome::Delayed,
    Outcome::ShadowDenied,
    Outcome::StoreError,
];

fn column(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Allowed => 0,
        Outcome::Denied => 1,
        Outcome::Delayed => 2,
        Outcome::ShadowDenied => 3,
        Outcome::StoreError => 4,
    }
}

/// Longest key kept for display, in bytes; longer keys are cut (at a character boundary).
pub const MAX_DISPLAY_KEY: usize = 256;

/// Most distinct policy names counted per second; more (a config churning through names)
/// are counted under `(other)`.
pub const MAX_POLICIES: usize = 256;

/// How much the observer keeps, per shard (twice as many as cores). Memory is bounded by
/// these numbers and the shard count alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DashboardConfig {
    /// Seconds of per-second counts kept (the page's series and totals).
    pub window_seconds: u64,
    /// Seconds averaged into the rate shown as "per second".
    pub rate_seconds: u64,
    /// Minutes of top-key sketches kept.
    pub top_minutes: u64,
    /// Counters per minute sketch.
    pub sketch_capacity: usize,
    /// Keys listed on the page.
    pub top_keys: usize,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        DashboardConfig {
            window_seconds: 60,
            rate_seconds: 10,
            top_minutes: 5,
            sketch_capacity: 128,
            top_keys: 15,
        }
    }
}

type PolicyName = Arc<str>;
type Item = (PolicyName, Arc<str>);

struct Second {
    at: u64,
    counts: Vec<(PolicyName, [u64; 5])>,
}

struct Minute {
    at: u64,
    sketch: SpaceSaving<Item>,
}

#[derive(Default)]
struct Inner {
    seconds: VecDeque<Second>,
    minutes: VecDeque<Minute>,
    names: HashMap<Box<str>, PolicyName>,
    leases: LeaseKeys,
    /// The policy seen last and its interned name: the usual decision names the same policy
    /// as the one before, found by pointer without hashing its name. Holding the `Arc` keeps
    /// the pointer from being reused by another policy.
    last: Option<(Arc<Policy>, PolicyName)>,
}

/// One shard of the counts, alone on its cache lines (a neighbour's lock word written by
/// another thread would bounce the line between cores all the same).
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<Inner>);

/// How many shards: twice the cores, so that the runtime's worker threads (one per core)
/// rarely share one; the round-robin numbering of threads spreads them.
fn shard_count() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .saturating_mul(2)
        .clamp(2, 64)
}

/// Numbers threads in the order they first record; a thread's shard is its number modulo
/// the shard count.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_NUMBER: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// A [`VerdictObserver`] for the dashboard; hand it to the server's observer list, and the
/// same `Arc` to [`Dashboard::new`](crate::Dashboard::new).
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Policy, VerdictObserver};
/// use sluicegate_dashboard::DashboardObserver;
///
/// let clock = ManualClock::new(1_000_000_000_000);
/// let observer = DashboardObserver::with_clock(Default::default(), Arc::new(clock.clone()));
/// let store = MemoryStore::with_clock(1000, clock);
/// let policies = [Arc::new(Policy::builder("api", AlgorithmKind::FixedWindow, 1, Duration::from_secs(60)).build()?)];
/// for _ in 0..3 {
///     let verdict = store.check_now(CheckRequest::new(&policies, "alice", 1))?;
///     observer.observe("alice", &verdict);
/// }
/// let snapshot = observer.snapshot();
/// assert_eq!(snapshot.policies[0].last_window.denied, 2);
/// assert_eq!((snapshot.top_keys[0].key.as_str(), snapshot.top_keys[0].limited), ("alice", 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DashboardObserver {
    config: DashboardConfig,
    clock: Arc<dyn Clock>,
    shards: Box<[Shard]>,
    settles: SettleActivity,
}

impl std::fmt::Debug for DashboardObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardObserver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for DashboardObserver {
    fn default() -> Self {
        Self::new(DashboardConfig::default())
    }
}

impl DashboardObserver {
    /// An observer on the wall clock.
    pub fn new(config: DashboardConfig) -> Self {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// An observer reading time from `clock` (tests use a `ManualClock`).
    pub fn with_clock(config: DashboardConfig, clock: Arc<dyn Clock>) -> Self {
        let config = DashboardConfig {
            window_seconds: config.window_seconds.max(1),
            rate_seconds: config.rate_seconds.clamp(1, config.window_seconds.max(1)),
            top_minutes: config.top_minutes.max(1),
            sketch_capacity: config.sketch_capacity.max(1),
            top_keys: config.top_keys,
        };
        DashboardObserver {
            config,
            clock,
            shards: (0..shard_count()).map(|_| Shard::default()).collect(),
            settles: SettleActivity::default(),
        }
    }

    /// The settle and release counters (the server records into them around its store).
    pub fn settles(&self) -> &SettleActivity {
        &self.settles
    }

    /// The `(policy, key)` pairs given a lease whose newest lease has not expired yet: at
    /// most [`MAX_LEASE_KEYS`], those expiring last, sorted.
    pub fn lease_items(&self) -> Vec<LeaseItem> {
        let now = self.clock.now();
        let mut until: HashMap<LeaseItem, Micros> = HashMap::new();
        for shard in &self.shards {
            for (item, expires_at) in shard.0.lock().leases.live_until(now) {
                let newest = until.entry(item).or_default();
                *newest = (*newest).max(expires_at);
            }
        }
        let mut items: Vec<(LeaseItem, Micros)> = until.into_iter().collect();
        if items.len() > MAX_LEASE_KEYS {
            items.sort_by_key(|(_, expires_at)| Reverse(*expires_at));
            items.truncate(MAX_LEASE_KEYS);
        }
        let mut items: Vec<LeaseItem> = items.into_iter().map(|(item, _)| item).collect();
        items.sort();
        items
    }

    /// The calling thread's shard.
    fn shard(&self) -> MutexGuard<'_, Inner> {
        let n = THREAD_NUMBER.with(|n| *n) % self.shards.len();
        self.shards[n].0.lock()
    }

    /// Every shard, locked (the page's reads; a decision takes one lock only, so taking
    /// them all in order cannot deadlock with it).
    fn all_shards(&self) -> Vec<MutexGuard<'_, Inner>> {
        self.shards.iter().map(|s| s.0.lock()).collect()
    }

    /// What the observer keeps.
    pub fn config(&self) -> DashboardConfig {
        self.config
    }

    fn now_second(&self) -> u64 {
        self.clock.now() / 1_000_000
    }

    /// The page's data as of now.
    pub fn snapshot(&self) -> Snapshot {
        let now_us = self.clock.now();
        let now = now_us / 1_000_000;
        let shards = self.all_shards();
        let policies = self.policy_rows(&shards, now);
        let top_keys = self.top_keys(&shards, now);
        drop(shards);
        Snapshot {
            generated_at_ms: now_us / 1_000,
            window_seconds: self.config.window_seconds,
            rate_seconds: self.config.rate_seconds,
            top_minutes: self.config.top_minutes,
            sketch_capacity: self.config.sketch_capacity,
            policies,
            top_keys,
            store: None,
            pools: Vec::new(),
            leases: Vec::new(),
            settles: self.settles.counts(),
        }
    }

    /// Counts by policy over the window ending at second `now`, summed over the shards.
    fn policy_rows(&self, shards: &[MutexGuard<'_, Inner>], now: u64) -> Vec<PolicyRow> {
        let window = self.config.window_seconds;
        let first = (now + 1).saturating_sub(window);
        let rate_first = (now + 1).saturating_sub(self.config.rate_seconds);
        let mut policies: Vec<PolicyRow> = Vec::new();
        let mut rows: HashMap<&str, usize> = HashMap::new();
        let seconds = shards.iter().flat_map(|inner| inner.seconds.iter());
        for second in seconds.filter(|s| s.at >= first && s.at <= now) {
            let offset = (second.at - first) as usize;
            for (name, counts) in &second.counts {
                let row = *rows.entry(name).or_insert_with(|| {
                    policies.push(PolicyRow::new(name, window as usize));
                    policies.len() - 1
                });
                policies[row].add(offset, counts, second.at >= rate_first);
            }
        }
        for row in &mut policies {
            row.finish(self.config.rate_seconds);
        }
        policies.sort_by(|a, b| a.policy.cmp(&b.policy));
        policies
    }

    /// The most limited keys of the last `top_minutes`: each minute's shard sketches
    /// merged into one, then the minutes added up as before sharding.
    fn top_keys(&self, shards: &[MutexGuard<'_, Inner>], now: u64) -> Vec<KeyRow> {
        let oldest_minute = (now / 60 + 1).saturating_sub(self.config.top_minutes);
        let mut by_minute: HashMap<u64, Vec<&SpaceSaving<Item>>> = HashMap::new();
        let minutes = shards.iter().flat_map(|inner| inner.minutes.iter());
        for minute in minutes.filter(|m| m.at >= oldest_minute) {
            by_minute.entry(minute.at).or_default().push(&minute.sketch);
        }
        let mut merged: HashMap<&Item, (u64, u64)> = HashMap::new();
        for sketches in by_minute.values() {
            for (item, (count, error)) in merge_sketches(sketches) {
                let entry = merged.entry(item).or_default();
                entry.0 += count;
                entry.1 += error;
            }
        }
        let mut top_keys: Vec<KeyRow> = merged
            .into_iter()
            .map(|((policy, key), (limited, error))| KeyRow {
                policy: policy.to_string(),
                key: key.to_string(),
                limited,
                error,
            })
            .collect();
        top_keys.sort_by(|a, b| {
            b.limited
                .cmp(&a.limited)
                .then_with(|| a.policy.cmp(&b.policy))
                .then_with(|| a.key.cmp(&b.key))
        });
        top_keys.truncate(self.config.top_keys);
        top_keys
    }
}

impl Inner {
    /// The interned name of `policy`.
    fn name_of(&mut self, policy: &Arc<Policy>) -> PolicyName {
        if let Some((last, name)) = &self.last
            && Arc::ptr_eq(last, policy)
        {
            return Arc::clone(name);
        }
        let name = self.name(policy.name());
        self.last = Some((Arc::clone(policy), Arc::clone(&name)));
        name
    }

    fn name(&mut self, name: &str) -> PolicyName {
        if let Some(n) = self.names.get(name) {
            return Arc::clone(n);
        }
        if self.names.len() >= MAX_POLICIES * 4 {
            // Names from old configs; the buckets keep their own Arcs.
            self.names.clear();
        }
        let n: PolicyName = Arc::from(name);
        self.names.insert(name.into(), Arc::clone(&n));
        n
    }

    fn second(&mut self, at: u64, window: u64) -> &mut Second {
        if self.seconds.back().is_none_or(|s| s.at < at) {
            self.seconds.push_back(Second {
                at,
                counts: Vec::new(),
            });
        }
        while self.seconds.front().is_some_and(|s| s.at + window <= at) {
            self.seconds.pop_front();
        }
        // A clock that stepped back counts into the newest second.
        let last = self.seconds.len() - 1;
        &mut self.seconds[last]
    }

    fn minute(&mut self, at: u64, keep: u64, capacity: usize) -> &mut SpaceSaving<Item> {
        if self.minutes.back().is_none_or(|m| m.at < at) {
            self.minutes.push_back(Minute {
                at,
                sketch: SpaceSaving::new(capacity),
            });
        }
        while self.minutes.front().is_some_and(|m| m.at + keep <= at) {
            self.minutes.pop_front();
        }
        let last = self.minutes.len() - 1;
        &mut self.minutes[last].sketch
    }
}

/// One minute's sketches of several shards as one: `(count, error)` by item. An item a full
/// sketch does not hold may still have been seen there up to that sketch's smallest count,
/// which is added to both its count and its error; so, as in one sketch, a count is never
/// under the truth and overstates it by at most its error. (An item a sketch with room
/// does not hold was not seen there.)
fn merge_sketches<'s>(sketches: &[&'s SpaceSaving<Item>]) -> HashMap<&'s Item, (u64, u64)> {
    let floor = |sketch: &SpaceSaving<Item>| {
        if sketch.len() < sketch.capacity() {
            return 0;
        }
        sketch.counters().map(|c| c.count).min().unwrap_or(0)
    };
    let floors: u64 = sketches.iter().map(|s| floor(s)).sum();
    // Per item: count, error, and the floors of the sketches that hold it.
    let mut merged: HashMap<&Item, (u64, u64, u64)> = HashMap::new();
    for sketch in sketches {
        let held_floor = floor(sketch);
        for counter in sketch.counters() {
            let entry = merged.entry(&counter.item).or_default();
            entry.0 += counter.count;
            entry.1 += counter.error;
            entry.2 += held_floor;
        }
    }
    merged
        .into_iter()
        .map(|(item, (count, error, held))| {
            let missing = floors - held;
            (item, (count + missing, error + missing))
        })
        .collect()
}

pub(crate) fn display_key(key: &str) -> &str {
    if key.len() <= MAX_DISPLAY_KEY {
        return key;
    }
    let mut end = MAX_DISPLAY_KEY;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

impl VerdictObserver for DashboardObserver {
    fn observe(&self, key: &str, verdict: &sluicegate_core::VerdictOf<'_>) {
        let now = self.now_second();
        let mut inner = self.shard();
        let mut key_arc: Option<Arc<str>> = None;
        for decision in &verdict.decisions {
            let name = inner.name_of(&decision.policy);
            let second = inner.second(now, self.config.window_seconds);
            let index = match second.counts.iter().position(|(n, _)| *n == name) {
                Some(i) => i,
                None if second.counts.len() < MAX_POLICIES => {
                    second.counts.push((Arc::clone(&name), [0; 5]));
                    second.counts.len() - 1
                }
                None => {
                    let other: PolicyName = Arc::from("(other)");
                    match second.counts.iter().position(|(n, _)| *n == other) {
                        Some(i) => i,
                        None => {
                            second.counts.push((other, [0; 5]));
                            second.counts.len() - 1
                        }
                    }
                }
            };
            second.counts[index].1[column(decision.outcome)] += 1;
            if decision.decision.lease != 0
                && verdict.allowed
                && decision.outcome == Outcome::Allowed
            {
                // A lease handed out: its key is read from the store at the next polls.
                let item = (Arc::clone(&name), Arc::from(key));
                inner.leases.note(item, decision.decision.lease);
            }
            if matches!(decision.outcome, Outcome::Denied | Outcome::ShadowDenied) {
                let key = key_arc
                    .get_or_insert_with(|| Arc::from(display_key(key)))
                    .clone();
                inner
                    .minute(
                        now / 60,
                        self.config.top_minutes,
                        self.config.sketch_capacity,
                    )
                    .add((name, key), 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_shards_never_count_under_the_truth() {
        let item = |k: &str| -> Item { (Arc::from("p"), Arc::from(k)) };
        let mut a = SpaceSaving::new(2);
        let mut b = SpaceSaving::new(2);
        // x is denied 8 times: 5 in shard a, 3 in shard b, where y and z then evict it.
        a.add(item("x"), 5);
        b.add(item("x"), 3);
        b.add(item("y"), 4);
        b.add(item("z"), 4);
        let (count, error) = merge_sketches(&[&a, &b])[&item("x")];
        assert!(count >= 8 && count - error <= 8, "{count} ± {error}");
        // A shard with room left did not see what it does not hold.
        let empty = SpaceSaving::new(4);
        assert_eq!(merge_sketches(&[&a, &empty])[&item("x")], (5, 0));
    }

    #[test]
    fn long_keys_are_cut_at_a_char_boundary() {
        let key = "é".repeat(200);
        let cut = display_key(&key);
        assert!(cut.len() <= MAX_DISPLAY_KEY);
        assert!(key.starts_with(cut));
        assert_eq!(display_key("short"), "short");
    }
}

#[cfg(test)]
mod window_tests {
    use std::time::Duration;

    use sluicegate_core::{AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Mode, Policy};

    use super::*;

    const START: u64 = 1_796_000_000_000_000;

    fn setup(config: DashboardConfig) -> (ManualClock, DashboardObserver) {
        let clock = ManualClock::new(START);
        let observer = DashboardObserver::with_clock(config, Arc::new(clock.clone()));
        (clock, observer)
    }

    fn policy(name: &str, limit: u64, mode: Mode) -> Arc<Policy> {
        Arc::new(
            Policy::builder(
                name,
                AlgorithmKind::FixedWindow,
                limit,
                Duration::from_secs(3600),
            )
            .mode(mode)
            .build()
            .unwrap(),
        )
    }

    #[test]
    fn counts_by_policy_and_outcome_and_age_out() {
        let (clock, observer) = setup(DashboardConfig::default());
        let store = MemoryStore::with_clock(1000, clock.clone());
        let strict = [policy("strict", 2, Mode::Reject)];
        let shadow = [policy("trial", 1, Mode::Shadow)];
        for _ in 0..5 {
            observer.observe(
                "k",
                &store.check_now(CheckRequest::new(&strict, "k", 1)).unwrap(),
            );
            observer.observe(
                "k",
                &store.check_now(CheckRequest::new(&shadow, "k", 1)).unwrap(),
            );
        }
        clock.advance(Duration::from_secs(1));
        observer.observe(
            "j",
            &store.check_now(CheckRequest::new(&strict, "j", 1)).unwrap(),
        );
        let s = observer.snapshot();
        let names: Vec<&str> = s.policies.iter().map(|p| p.policy.as_str()).collect();
        assert_eq!(names, ["strict", "trial"]);
        assert_eq!(s.policies[0].last_window.allowed, 3);
        assert_eq!(s.policies[0].last_window.denied, 3);
        assert_eq!(s.policies[1].last_window.allowed, 1);
        assert_eq!(s.policies[1].last_window.shadow_denied, 4);
        assert_eq!(s.policies[0].series.denied[58], 3);
        assert_eq!(s.policies[0].series.allowed[59], 1);
        assert!((s.policies[0].per_second.denied - 0.3).abs() < 1e-9);
        let keys: Vec<(&str, &str, u64)> = s
            .top_keys
            .iter()
            .map(|k| (k.policy.as_str(), k.key.as_str(), k.limited))
            .collect();
        assert_eq!(keys, [("trial", "k", 4), ("strict", "k", 3)]);

        // A minute later the per-second counts are gone, the limited keys are not.
        clock.advance(Duration::from_secs(60));
        let s = observer.snapshot();
        assert!(s.policies.is_empty());
        assert_eq!(s.top_keys.len(), 2);
        // Five minutes later, neither.
        clock.advance(Duration::from_secs(300));
        assert!(observer.snapshot().top_keys.is_empty());
    }

    #[test]
    fn a_flood_of_unique_keys_keeps_memory_fixed_and_finds_the_heavy_hitter() {
        let config = DashboardConfig {
            sketch_capacity: 16,
            ..Default::default()
        };
        let (clock, observer) = setup(config);
        let store = MemoryStore::with_clock(10, clock.clone());
        let policies = [policy("p", 1, Mode::Reject)];
        // The store is bounded too; only the verdicts matter here.
        let denied = {
            store
                .check_now(CheckRequest::new(&policies, "x", 1))
                .unwrap();
            store
                .check_now(CheckRequest::new(&policies, "x", 1))
                .unwrap()
        };
        assert!(!denied.allowed);
        for i in 0..60_000u64 {
            if i % 5 == 0 {
                observer.observe("attacker", &denied);
            } else {
                observer.observe(&format!("spoofed-{i}"), &denied);
            }
            if i % 15_000 == 0 {
                clock.advance(Duration::from_secs(61));
            }
        }
        for inner in observer.all_shards() {
            assert!(inner.minutes.len() <= 5);
            assert!(inner.minutes.iter().all(|m| m.sketch.len() <= 16));
            assert!(inner.seconds.len() <= 60);
        }
        let s = observer.snapshot();
        assert_eq!(s.top_keys[0].key, "attacker");
        assert!(s.top_keys[0].limited >= 12_000);
        assert!(s.top_keys.len() <= DashboardConfig::default().top_keys);
    }

    #[test]
    fn policy_names_are_bounded_per_second() {
        let (clock, observer) = setup(DashboardConfig::default());
        let store = MemoryStore::with_clock(10_000, clock);
        for i in 0..(MAX_POLICIES + 50) {
            let p = [policy(&format!("p{i}"), 5, Mode::Reject)];
            observer.observe(
                "k",
                &store.check_now(CheckRequest::new(&p, "k", 1)).unwrap(),
            );
        }
        let s = observer.snapshot();
        assert_eq!(s.policies.len(), MAX_POLICIES + 1);
        let other = s.policies.iter().find(|p| p.policy == "(other)").unwrap();
        assert_eq!(other.last_window.allowed, 50);
    }
}
