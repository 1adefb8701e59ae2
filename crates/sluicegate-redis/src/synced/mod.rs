//! [`SyncedStore`]: local-first Redis (`store.sync`). Each instance decides from its own
//! memory and exchanges window counts with Redis every sync interval, in batches, so a
//! decision costs no round trip and Redis does one small script call per interval (per hash
//! slot) instead of one per decision.
//!
//! **What is exchanged.** Per policy and client key, each window (fixed_window: the
//! current one; sliding_window: the current and the previous one) has a shared count in
//! Redis, `<state key>:sync:<period µs>:<window index>`. An exchange (`exchange.rs`,
//! `sync.lua`) adds to it what this instance admitted since the last one (`INCRBY`; a TTL of
//! two periods and a second when the count is created) and reads back the fleet's count,
//! which replaces the local view: local count = fleet count at the
//! last exchange + what this instance admitted since. Keys decided on in the last
//! `KEEP_FRESH` (10) exchanges take part; a key idle longer (or new here) is read first (one
//! round trip; concurrent requests' reads share one `MGET`, see `read.rs`), so no decision
//! uses a fleet count older than one interval while Redis answers.
//!
//! **Over-admission bound.** An instance admits only while its local count plus the cost
//! is within the limit, and its local count misses only what the other instances admitted
//! since its last read of Redis. So in one window the fleet admits at most
//! `limit + Σ (what each other instance admitted between this instance's last read and its
//! last admission)`: at most what the other `N − 1` instances admitted in one sync interval
//! (plus the exchange's round trip), and never more than `N × limit` (each instance alone
//! stays within the limit). Never under: an instance that denies has seen at least
//! `limit − cost + 1` admitted, all of them real.
//!
//! **Redis outage.** Decisions go on from the local counts (so at most `N × limit` per
//! window fleet-wide while Redis is down, each instance within the limit by itself); what
//! is admitted meanwhile stays pending (at most the limit per key and window, `max_keys`
//! keys) and is added to Redis when it answers again; pending counts of windows no decision
//! reads any more are dropped and counted (`sluicegate_store_sync_dropped_total`). `ping`
//! (`/readyz`) still reports Redis down. See docs/redis.md.

mod exchange;
mod read;
mod state;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use parking_lot::{Mutex, MutexGuard};
use redis::Script;
use sluicegate_core::store::check_key;
use sluicegate_core::{
    BoxFuture, CheckRequest, Clock, KeyedCheck, Micros, Policy, Store, StoreError, SystemClock,
    Verdict,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::config::{RedisConfig, RedisStoreError};
use crate::keys::{placed_state_key, push_placed_state_key};
use crate::link::LogEvery;
use crate::store::RedisStore;
use read::ReadJob;
use state::{Entry, Shard, StateKey, decide, read_windows};

/// The shortest `store.sync` interval: below it the exchange is a round trip per few
/// decisions again.
pub const SYNC_MIN: Duration = Duration::from_millis(10);
/// The longest `store.sync` interval: the over-admission bound grows with it.
pub const SYNC_MAX: Duration = Duration::from_secs(60);
/// Counter of unsent admissions dropped because their window is no longer read by any
/// decision (a Redis outage longer than a window).
pub const METRIC_SYNC_DROPPED: &str = "sluicegate_store_sync_dropped_total";
/// Counter of exchanges, labelled `result` = `ok` | `failed`.
pub const METRIC_SYNC: &str = "sluicegate_store_sync_total";

/// Shards of the local state (each its own lock).
const SHARDS: usize = 64;
/// Why a local-first store cannot decide `policy` (fixed_window and sliding_window without
/// a calendar or a penalty only), in the words of the configuration error; `Ok` when it can.
///
/// ```
/// # use std::time::Duration;
/// # use sluicegate_core::{AlgorithmKind, Policy};
/// let window = Policy::builder("w", AlgorithmKind::FixedWindow, 10, Duration::from_secs(1)).build().unwrap();
/// let bucket = Policy::builder("b", AlgorithmKind::TokenBucket, 10, Duration::from_secs(1)).build().unwrap();
/// assert!(sluicegate_redis::check_synced(&window).is_ok());
/// assert!(sluicegate_redis::check_synced(&bucket).is_err());
/// ```
pub fn check_synced(policy: &Policy) -> Result<(), &'static str> {
    match state::unsupported(policy) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// How a [`SyncedStore`] exchanges with Redis.
#[derive(Clone)]
pub struct SyncOptions {
    /// How often counts are exchanged (`store.sync`).
    pub interval: Duration,
    /// Bound on (policy, key) states held locally (`store.max_keys`).
    pub max_keys: usize,
    /// The clock windows are counted by (the instances' wall clocks must agree, as for any
    /// fleet counting aligned windows; NTP is enough for windows of a second and more).
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SyncOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncOptions")
            .field("interval", &self.interval)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl SyncOptions {
    /// Exchanges every `interval`, at most `max_keys` states, the system clock.
    pub fn new(interval: Duration, max_keys: usize) -> Self {
        SyncOptions {
            interval,
            max_keys,
            clock: Arc::new(SystemClock),
        }
    }
}

/// The local-first store: decides in memory, exchanges counts with Redis every interval.
/// See the module documentation for what is exchanged and the over-admission bound.
pub struct SyncedStore {
    inner: Arc<Synced>,
    /// The exchange loop and the read dispatcher.
    tasks: [JoinHandle<()>; 2],
}

struct Synced {
    redis: RedisStore,
    script: Script,
    shards: Box<[Mutex<Shard>]>,
    /// Exchange rounds completed; an entry read in an earlier round is refreshed before
    /// it decides again.
    completed: AtomicU64,
    /// One exchange at a time (the timer's and [`SyncedStore::sync_now`]'s), and its buffers.
    exchanging: tokio::sync::Mutex<exchange::Round>,
    clock: Arc<dyn Clock>,
    /// Picks an entry's shard (the fast hash: a decision hashes its key a few times).
    hasher: foldhash::fast::RandomState,
    log: LogEvery,
    /// Reads of stale keys, coalesced by the dispatcher (`read.rs`).
    reads: mpsc::Sender<ReadJob>,
}

/// One (policy, key) of a request.
struct Item<'a, K = String> {
    policy: &'a Arc<Policy>,
    /// The Redis state key, also the local map's key.
    base: K,
    shard: usize,
    cost: u64,
}

/// The shared count of `base`'s window `index` (see [`exchange::push_window_key`]).
fn window_key(base: &[u8], period: Micros, index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(base.len() + 40);
    exchange::push_window_key(&mut key, base, period, index);
    key
}

impl Drop for SyncedStore {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl std::fmt::Debug for SyncedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncedStore")
            .field("redis", &self.inner.redis)
            .finish_non_exhaustive()
    }
}

impl SyncedStore {
    /// Connects like [`RedisStore::connect`] (Redis being down is not an error) and starts
    /// the exchange every `options.interval`. Must be called within a Tokio runtime.
    pub async fn connect(
        config: RedisConfig,
        options: SyncOptions,
    ) -> Result<SyncedStore, RedisStoreError> {
        let redis = RedisStore::connect(config).await?;
        let per_shard = options.max_keys.div_ceil(SHARDS);
        let (reads, queue) = mpsc::channel(read::QUEUE_DEPTH);
        let inner = Arc::new(Synced {
            redis,
            script: Script::new(include_str!("../script/sync.lua")),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard::new(per_shard)))
                .collect(),
            completed: AtomicU64::new(0),
            exchanging: tokio::sync::Mutex::new(exchange::Round::default()),
            clock: options.clock,
            hasher: foldhash::fast::RandomState::default(),
            log: LogEvery::default(),
            reads,
        });
        let tasks = [
            tokio::spawn(exchange_loop(Arc::downgrade(&inner), options.interval)),
            tokio::spawn(read::dispatch(Arc::downgrade(&inner), queue)),
        ];
        Ok(SyncedStore { inner, tasks })
    }

    /// Exchanges now, without waiting for the interval: what was admitted here is added to
    /// Redis and the fleet's counts are read back. For shutdown (nothing admitted is left
    /// unsent) and tests. An error means Redis did not take part; nothing is lost.
    pub async fn sync_now(&self) -> Result<(), StoreError> {
        self.inner.exchange().await
    }

    /// The Redis store underneath (its keys, its connection state).
    pub fn redis(&self) -> &RedisStore {
        &self.inner.redis
    }
}

async fn exchange_loop(inner: Weak<Synced>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if let Err(e) = inner.exchange().await
            && inner.log.ready()
        {
            tracing::warn!(error = %e, "store.sync: exchange with Redis failed; deciding from local counts");
        }
    }
}

impl Synced {
    fn items<'a>(
        &self,
        parts: impl Iterator<Item = (&'a Arc<Policy>, &'a str, Option<&'a str>, u64)>,
    ) -> Result<Vec<Item<'a>>, StoreError> {
        let prefix = self.redis.key_prefix();
        parts
            .map(|(policy, key, placement, cost)| {
                if let Some(reason) = state::unsupported(policy) {
                    return Err(StoreError::Unsupported(format!(
                        "policy {:?}: {reason}",
                        policy.name()
                    )));
                }
                let base = placed_state_key(prefix, placement, key, policy);
                let shard = self.shard_of(&base);
                Ok(Item {
                    policy,
                    base,
                    shard,
                    cost,
                })
            })
            .collect()
    }

    /// Decides `items` all-or-nothing from the local counts, reading first those not
    /// refreshed by the last exchange.
    async fn check(&self, items: &[Item<'_>]) -> Result<Verdict, StoreError> {
        let now = self.clock.now();
        if let [item] = items
            && let Some(verdict) = self.decide_fresh(item, now)
        {
            return verdict;
        }
        let loaded = self.load_stale(items, now, false).await;
        if let Some(verdict) = self.decide_locked(items, &loaded, now)? {
            return Ok(verdict);
        }
        // An entry evicted between the freshness check and the decision: deciding on no
        // entry would count from zero and forget the fleet's count, so read every item.
        let loaded = self.load_stale(items, now, true).await;
        self.decide_locked(items, &loaded, now)?
            .ok_or_else(|| StoreError::Internal("store.sync: a read entry vanished".into()))
    }

    /// The common case, one item whose entry is fresh, decided under one lock and one
    /// lookup; `None` (nothing done) when the entry is missing or stale. The same rule as
    /// [`Synced::decide_locked`] with nothing to read.
    fn decide_fresh(
        &self,
        item: &Item<'_, impl AsRef<str>>,
        now: Micros,
    ) -> Option<Result<Verdict, StoreError>> {
        let mut shard = self.shards[item.shard].lock();
        // Read under the lock: an exchange applies a shard's answers under its lock before
        // it counts the round as completed, so a fresh entry is never seen as stale here.
        let completed = self.completed.load(Ordering::Acquire);
        let entry = shard.map.get_mut(item.base.as_ref().as_bytes())?;
        if entry.round < completed || entry.period != item.policy.period() {
            return None;
        }
        let decision = decide(item.policy, Some(entry), now, item.cost);
        let mut verdict = Verdict::combine_one(Arc::clone(item.policy), decision);
        verdict.at = now;
        // What `record` does for an entry that exists, without looking it up again.
        entry.used = completed;
        if verdict.consumes(0) && item.cost > 0 {
            let lost = entry.admit(now, item.cost);
            drop(shard);
            self.dropped(lost);
        } else {
            entry.touch(now);
        }
        Some(Ok(verdict))
    }

    /// A request under one policy whose entry is fresh, decided without building an
    /// [`Item`]: the state key is written into this thread's buffer instead of a new
    /// `String` (an allocation and a free per decision); `None` when it takes the general
    /// path (a stale or missing entry, a policy the store refuses).
    fn check_one(
        &self,
        policy: &Arc<Policy>,
        key: &str,
        cost: u64,
    ) -> Option<Result<Verdict, StoreError>> {
        thread_local! {
            static BASE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        if state::unsupported(policy).is_some() {
            return None;
        }
        BASE.with_borrow_mut(|base| {
            base.clear();
            push_placed_state_key(base, self.redis.key_prefix(), None, key, policy);
            let item = Item {
                policy,
                shard: self.shard_of(base),
                base: &**base,
                cost,
            };
            self.decide_fresh(&item, self.clock.now())
        })
    }

    fn shard_of(&self, base: &str) -> usize {
        (self.hasher.hash_one(base) % SHARDS as u64) as usize
    }

    /// For each item whose local state is missing or older than the last exchange, the
    /// fleet's counts read now (`Some`; empty when Redis did not answer: it then decides
    /// from what it has, as in an outage).
    async fn load_stale(
        &self,
        items: &[Item<'_>],
        now: Micros,
        all: bool,
    ) -> Vec<Option<Vec<(u64, u64)>>> {
        let completed = self.completed.load(Ordering::Acquire);
        let stale: Vec<usize> = (0..items.len())
            .filter(|&i| {
                let item = &items[i];
                if all {
                    return true;
                }
                let shard = self.shards[item.shard].lock();
                shard
                    .map
                    .get(item.base.as_bytes())
                    .is_none_or(|e| e.round < completed || e.period != item.policy.period())
            })
            .collect();
        let mut loaded: Vec<Option<Vec<(u64, u64)>>> = vec![None; items.len()];
        // A plain read, far cheaper for Redis than a script call; concurrent requests'
        // reads share one `MGET` (read.rs).
        let reads = stale.iter().map(|&i| self.read(&items[i], now));
        for (&i, counts) in stale.iter().zip(join_all(reads).await) {
            loaded[i] = Some(counts);
        }
        loaded
    }

    /// The fleet's counts of `item`'s windows at `now`; none when Redis does not answer.
    async fn read(&self, item: &Item<'_>, now: Micros) -> Vec<(u64, u64)> {
        let windows = read_windows(item.policy, now);
        let keys = windows
            .iter()
            .map(|&w| window_key(item.base.as_bytes(), item.policy.period(), w))
            .collect();
        let (reply, answer) = oneshot::channel();
        if self.reads.send(ReadJob { keys, reply }).await.is_err() {
            return Vec::new();
        }
        match answer.await {
            Ok(Some(values)) => windows.into_iter().zip(values).collect(),
            _ => Vec::new(),
        }
    }

    /// Locks the items' shards (in shard order, so concurrent requests cannot deadlock)
    /// and decides. `None`: an item that was not read has no entry any more (evicted
    /// since `load_stale`); read every item and decide again.
    fn decide_locked(
        &self,
        items: &[Item<'_>],
        loaded: &[Option<Vec<(u64, u64)>>],
        now: Micros,
    ) -> Result<Option<Verdict>, StoreError> {
        let mut order: Vec<usize> = items.iter().map(|i| i.shard).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> =
            order.iter().map(|&s| self.shards[s].lock()).collect();
        let at = |shard: usize| order.partition_point(|&s| s < shard);
        let completed = self.completed.load(Ordering::Acquire);
        let evicted = items.iter().zip(loaded).any(|(item, counts)| {
            counts.is_none()
                && !guards[at(item.shard)]
                    .map
                    .contains_key(item.base.as_bytes())
        });
        if evicted {
            return Ok(None);
        }
        let mut reads: Vec<Option<Entry>> = vec![None; items.len()];
        for (i, item) in items.iter().enumerate() {
            if let Some(counts) = &loaded[i] {
                let shard = &mut guards[at(item.shard)];
                match shard.map.get_mut(item.base.as_bytes()) {
                    Some(e) if e.period == item.policy.period() => {
                        self.dropped(e.refresh(counts, completed));
                    }
                    // A read (cost 0) of an unknown key is answered without keeping it.
                    _ if item.cost == 0 => {
                        reads[i] = Some(Entry::new(item.policy, now, counts, completed));
                    }
                    _ => {
                        shard.map.remove(item.base.as_bytes());
                        if !shard.room(now) {
                            return Err(full());
                        }
                        let entry = Entry::new(item.policy, now, counts, completed);
                        shard.map.insert(StateKey::new(&item.base), entry);
                    }
                }
            }
        }
        let decided = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let entry = reads[i]
                    .as_ref()
                    .or_else(|| guards[at(item.shard)].map.get(item.base.as_bytes()));
                let decision = decide(item.policy, entry, now, item.cost);
                (Arc::clone(item.policy), decision, item.cost)
            })
            .collect();
        let mut verdict = Verdict::combine(decided);
        verdict.at = now;
        for (i, item) in items.iter().enumerate() {
            let shard = &mut guards[at(item.shard)];
            self.record(shard, item, verdict.consumes(i), now, completed)?;
        }
        Ok(Some(verdict))
    }

    /// Counts an admission (or marks a read) in the item's entry.
    fn record(
        &self,
        shard: &mut Shard,
        item: &Item<'_>,
        consumed: bool,
        now: Micros,
        completed: u64,
    ) -> Result<(), StoreError> {
        let admitted = consumed && item.cost > 0;
        if !shard.map.contains_key(item.base.as_bytes()) {
            if !admitted {
                return Ok(());
            }
            // Evicted by another item of this request making room in the shard.
            if !shard.room(now) {
                return Err(full());
            }
            let entry = Entry::new(item.policy, now, &[], completed);
            shard.map.insert(StateKey::new(&item.base), entry);
        }
        if let Some(entry) = shard.map.get_mut(item.base.as_bytes()) {
            entry.used = completed;
            if admitted {
                self.dropped(entry.admit(now, item.cost));
            } else {
                entry.touch(now);
            }
        }
        Ok(())
    }

    fn dropped(&self, n: u64) {
        if n > 0 {
            metrics::counter!(METRIC_SYNC_DROPPED).increment(n);
        }
    }

    fn refund(&self, items: &[Item<'_>]) {
        let now = self.clock.now();
        for item in items {
            if let Some(entry) = self.shards[item.shard]
                .lock()
                .map
                .get_mut(item.base.as_bytes())
            {
                entry.refund(now, item.cost);
            }
        }
    }

    /// Forgets the key here and its shared counts of the current and previous window in
    /// Redis (other instances keep their view until their next exchange).
    async fn reset(&self, policy: &Policy, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let base = placed_state_key(self.redis.key_prefix(), None, key, policy);
        let shard = self.shard_of(&base);
        self.shards[shard].lock().map.remove(base.as_bytes());
        let window = self.clock.now() / policy.period();
        let keys: Vec<Vec<u8>> = [window.saturating_sub(1), window]
            .iter()
            .map(|&w| window_key(base.as_bytes(), policy.period(), w))
            .collect();
        self.redis
            .inner()
            .link
            .run(move |mut conn| async move {
                redis::cmd("DEL")
                    .arg(&keys)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }
}

fn full() -> StoreError {
    StoreError::Unavailable(
        "store.sync: every local state holds admissions Redis has not taken yet (max_keys reached)"
            .into(),
    )
}

impl Store for SyncedStore {
    fn check<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async move {
            request.validate()?;
            if let [policy] = request.policies
                && let Some(verdict) = self.inner.check_one(policy, request.key, request.cost)
            {
                return verdict;
            }
            let parts = request
                .policies
                .iter()
                .map(|p| (p, request.key, None, request.cost));
            let items = self.inner.items(parts)?;
            self.inner.check(&items).await
        })
    }

    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async move {
            KeyedCheck::validate_all(items)?;
            let parts = items.iter().map(|i| (i.policy, i.key, i.placement, i.cost));
            let items = self.inner.items(parts)?;
            self.inner.check(&items).await
        })
    }

    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            CheckRequest::new(policies, key, cost).validate()?;
            let items = self
                .inner
                .items(policies.iter().map(|p| (p, key, None, cost)))?;
            self.inner.refund(&items);
            Ok(())
        })
    }

    fn refund_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            KeyedCheck::validate_all(items)?;
            let parts = items.iter().map(|i| (i.policy, i.key, i.placement, i.cost));
            let items = self.inner.items(parts)?;
            self.inner.refund(&items);
            Ok(())
        })
    }

    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.reset(policy, key))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.redis.ping()
    }

    fn tracked_keys(&self) -> Option<u64> {
        let n: usize = self.inner.shards.iter().map(|s| s.lock().map.len()).sum();
        Some(n as u64)
    }

    fn kind(&self) -> &'static str {
        if self.inner.redis.inner().link.is_cluster() {
            "redis-cluster-sync"
        } else {
            "redis-sync"
        }
    }
}
