//! The JSON the page polls (`GET /dashboard/data`): [`Snapshot`].

use serde::Serialize;

/// Counts (or rates) per outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OutcomeCounts<T> {
    /// Admitted at once.
    pub allowed: T,
    /// Rejected.
    pub denied: T,
    /// Admitted after a wait.
    pub delayed: T,
    /// Admitted only because the policy is in shadow mode.
    pub shadow_denied: T,
    /// Decided by `on_store_error`.
    pub store_error: T,
}

impl<T: Copy> OutcomeCounts<T> {
    fn from_array(a: [T; 5]) -> Self {
        OutcomeCounts {
            allowed: a[0],
            denied: a[1],
            delayed: a[2],
            shadow_denied: a[3],
            store_error: a[4],
        }
    }
}

/// One policy's decisions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyRow {
    /// The policy's name.
    pub policy: String,
    /// Mean decisions per second over the last `rate_seconds`.
    pub per_second: OutcomeCounts<f64>,
    /// Decisions over the last `window_seconds`.
    pub last_window: OutcomeCounts<u64>,
    /// Decisions in each second of the window, oldest first (index `window_seconds - 1` is now).
    pub series: OutcomeCounts<Vec<u64>>,
    #[serde(skip)]
    rate_sum: [u64; 5],
    #[serde(skip)]
    totals: [u64; 5],
}

impl PolicyRow {
    pub(crate) fn new(policy: &str, window: usize) -> Self {
        PolicyRow {
            policy: policy.to_owned(),
            per_second: OutcomeCounts::default(),
            last_window: OutcomeCounts::default(),
            series: OutcomeCounts {
                allowed: vec![0; window],
                denied: vec![0; window],
                delayed: vec![0; window],
                shadow_denied: vec![0; window],
                store_error: vec![0; window],
            },
            rate_sum: [0; 5],
            totals: [0; 5],
        }
    }

    pub(crate) fn add(&mut self, offset: usize, counts: &[u64; 5], in_rate: bool) {
        let series = [
            &mut self.series.allowed,
            &mut self.series.denied,
            &mut self.series.delayed,
            &mut self.series.shadow_denied,
            &mut self.series.store_error,
        ];
        for (i, s) in series.into_iter().enumerate() {
            if let Some(cell) = s.get_mut(offset) {
                *cell += counts[i];
            }
            self.totals[i] += counts[i];
            if in_rate {
                self.rate_sum[i] += counts[i];
            }
        }
    }

    pub(crate) fn finish(&mut self, rate_seconds: u64) {
        self.last_window = OutcomeCounts::from_array(self.totals);
        self.per_second =
            OutcomeCounts::from_array(self.rate_sum.map(|n| n as f64 / rate_seconds as f64));
    }
}

/// A key limited often in the last `top_minutes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyRow {
    /// The policy that limited it.
    pub policy: String,
    /// The client key (cut to 256 bytes).
    pub key: String,
    /// Requests denied (or, in shadow mode, that would have been), never under the truth.
    pub limited: u64,
    /// How much `limited` may overstate (the sketch's error bound); 0 means exact.
    pub error: u64,
}

/// The store's health, as probed for this snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreHealth {
    /// `memory`, `redis`, …
    pub kind: String,
    /// Whether the store answered a ping within the probe's timeout.
    pub reachable: bool,
    /// Why not, when it did not.
    pub error: Option<String>,
    /// Keys tracked, where the store knows (the in-memory store).
    pub tracked_keys: Option<u64>,
    /// How long the ping took, milliseconds.
    pub ping_ms: f64,
}

/// Everything the page shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// Wall time of the snapshot, Unix milliseconds.
    pub generated_at_ms: u64,
    /// Seconds covered by `last_window` and `series`.
    pub window_seconds: u64,
    /// Seconds averaged into `per_second`.
    pub rate_seconds: u64,
    /// Minutes covered by `top_keys`.
    pub top_minutes: u64,
    /// Counters per minute in the top-keys sketch.
    pub sketch_capacity: usize,
    /// One row per policy seen in the window, by name.
    pub policies: Vec<PolicyRow>,
    /// The most limited keys, most first.
    pub top_keys: Vec<KeyRow>,
    /// The store's health, when a probe was given.
    pub store: Option<StoreHealth>,
    /// The pools (fair throttling), when a source was given; empty without pools.
    pub pools: Vec<PoolRow>,
    /// Concurrency policies with leases handed out recently, when a lease reader was given.
    pub leases: Vec<LeaseRow>,
    /// Settles and releases since the start.
    pub settles: SettleCounts,
}

/// One level of a pool, as it is now and since the pool started.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolLevelRow {
    /// The level's name (`default` in a pool without levels).
    pub level: String,
    /// Its shares.
    pub shares: u32,
    /// Requests holding a slot now.
    pub in_flight: u64,
    /// Requests waiting for a slot now.
    pub queued: u64,
    /// Requests that got a slot, since the pool started.
    pub admitted: u64,
    /// Refused because the queue was full (including those pushed out), since the start.
    pub rejected_queue_full: u64,
    /// Refused after waiting `max_wait`, since the start.
    pub rejected_timeout: u64,
    /// Left the queue because their client went away, since the start.
    pub cancelled: u64,
    /// Total wait of the admitted requests, seconds (`/ admitted`: the mean wait; the page
    /// shows the mean between two polls from the differences).
    pub waited_seconds: f64,
}

/// One `[[pools]]` pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolRow {
    /// The pool's name.
    pub pool: String,
    /// Requests that may hold a slot at once now.
    pub limit: u64,
    /// `Some((min, max))` when `concurrency = "adaptive"`.
    pub adaptive: Option<(u64, u64)>,
    /// The adaptive limit's latency floor, milliseconds, once measured.
    pub latency_floor_ms: Option<f64>,
    /// Its levels, in configuration order.
    pub levels: Vec<PoolLevelRow>,
}

/// One key's leases of a concurrency policy, read from the store at this snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseKeyRow {
    /// The client key (cut to 256 bytes).
    pub key: String,
    /// Slots its leases hold now.
    pub in_flight: u64,
    /// Its limit (an override's, where the key has one).
    pub limit: u64,
}

/// A concurrency policy: the slots held by the keys this process handed leases to, read
/// from the store at this snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseRow {
    /// The policy's name.
    pub policy: String,
    /// The policy's limit per key.
    pub limit: u64,
    /// Slots held now, summed over `keys_read`.
    pub in_flight: u64,
    /// Keys read: those given a lease whose newest lease has not expired (at most
    /// [`MAX_LEASE_KEYS`](crate::MAX_LEASE_KEYS) over all policies).
    pub keys_read: u64,
    /// The keys holding the most slots, most first (at most 10; none holding nothing).
    pub top_keys: Vec<LeaseKeyRow>,
}

/// What settles and releases did since the start, counted around the store: every path
/// (`POST /v1/settle` and `/v1/release`, routes' `settle`/`count`, the gateway's and the
/// middleware's lease release) goes through it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SettleCounts {
    /// Settles applied (the real cost replaced the estimate).
    pub settled: u64,
    /// Of those, the ones that gave cost back (real under the estimate).
    pub refunded: u64,
    /// Of those, the ones that charged more (real over the estimate).
    pub charged: u64,
    /// Refused: the reservation was settled before (a 409 `reservation_settled`).
    pub replayed: u64,
    /// Refused: the reservation had expired (a 409 `reservation_expired`).
    pub expired: u64,
    /// The store failed (the estimate stayed charged).
    pub failed: u64,
    /// Leases released (freed, or already free or expired).
    pub releases: u64,
}
