//! Opening the store the configuration names.

use crate::error::ServerError;
use std::sync::Arc;
use std::time::Instant;

use sluicegate_core::{
    BoxFuture, CheckRequest, KeyedCheck, MemoryStore, Policy, Store, StoreError, Verdict,
};
use sluicegate_redis::{RedisConfig, RedisStore, SyncOptions, SyncedStore};

use crate::config::{Backend, StoreConfig};
use crate::metrics::{STORE_DURATION, STORE_ERRORS};

/// An opened store; `memory` is set for the in-memory one (reloads prune it).
pub struct OpenedStore {
    /// The store every decision goes to.
    pub store: Arc<dyn Store>,
    /// The same store, typed, when it is in memory.
    pub memory: Option<Arc<MemoryStore>>,
    /// The same store, typed, when it is local-first Redis (`store.sync`): flushed to Redis
    /// on shutdown.
    pub synced: Option<Arc<SyncedStore>>,
}

/// Opens the configured store. A Redis that is merely down is not an error: decisions
/// follow `on_store_error` until it answers.
pub async fn open(config: &StoreConfig) -> Result<OpenedStore, ServerError> {
    match config.backend {
        Backend::Memory => {
            let fresh = || MemoryStore::new(config.max_keys).with_max_memory(config.max_memory);
            let memory = match &config.snapshot {
                Some(path) => crate::snapshot::restore(fresh(), path, fresh),
                None => fresh(),
            };
            let memory = Arc::new(memory);
            Ok(OpenedStore {
                store: Arc::new(Timed::new(Arc::clone(&memory))),
                memory: Some(memory),
                synced: None,
            })
        }
        Backend::Redis => {
            let mut redis = match (&config.url, config.cluster.is_empty()) {
                (_, false) => RedisConfig::cluster(config.cluster.clone()),
                (Some(url), true) => RedisConfig::standalone(url.clone()),
                (None, true) => {
                    return Err(ServerError::RedisWithoutUrl);
                }
            };
            redis.key_prefix = config.key_prefix.clone();
            redis.timeout = config.timeout;
            // The Redis store times its own calls (with the same metric names); the
            // local-first one decides in memory and is timed like the memory store.
            let (store, synced): (Arc<dyn Store>, _) = match config.sync {
                Some(interval) => {
                    let options = SyncOptions::new(interval, config.max_keys);
                    let synced = Arc::new(SyncedStore::connect(redis, options).await?);
                    (Arc::new(Timed::new(Arc::clone(&synced))), Some(synced))
                }
                None => (Arc::new(RedisStore::connect(redis).await?), None),
            };
            Ok(OpenedStore {
                store,
                memory: None,
                synced,
            })
        }
    }
}

/// A store [`Timed`] wraps: one that decides at once (the in-memory one) answers
/// [`Immediate::check_now`], and is timed without a second boxed future around its own.
trait Immediate: Store {
    /// The decision, when the store makes it on the caller's thread without waiting.
    fn check_now(&self, _request: CheckRequest<'_>) -> Option<Result<Verdict, StoreError>> {
        None
    }
}

impl Immediate for Arc<MemoryStore> {
    fn check_now(&self, request: CheckRequest<'_>) -> Option<Result<Verdict, StoreError>> {
        Some(MemoryStore::check_now(self, request))
    }
}

/// Local-first Redis decides in memory too, but may wait for a read of Redis first.
impl Immediate for Arc<SyncedStore> {}

/// Records `sluicegate_store_duration_seconds` and `sluicegate_store_errors_total` around a
/// store that does not record them itself (the in-memory one). The metric handles are
/// looked up once (the recorder is installed before any store is opened).
struct Timed<S> {
    inner: S,
    duration: metrics::Histogram,
    errors: metrics::Counter,
}

impl<S: Immediate> Timed<S> {
    fn new(inner: S) -> Self {
        let kind = inner.kind();
        Timed {
            duration: metrics::histogram!(STORE_DURATION, "store" => kind),
            errors: metrics::counter!(STORE_ERRORS, "store" => kind),
            inner,
        }
    }

    fn record<T>(&self, started: Instant, result: &Result<T, StoreError>) {
        self.duration.record(started.elapsed().as_secs_f64());
        if let Err(e) = result
            && !e.is_bad_request()
        {
            self.errors.increment(1);
        }
    }
}

impl<S: Immediate> Store for Timed<S> {
    fn check<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        let started = Instant::now();
        if let Some(result) = self.inner.check_now(request) {
            self.record(started, &result);
            return Box::pin(std::future::ready(result));
        }
        Box::pin(async move {
            let result = self.inner.check(request).await;
            self.record(started, &result);
            result
        })
    }
    fn check_immediate(&self, request: CheckRequest<'_>) -> Option<Result<Verdict, StoreError>> {
        let started = Instant::now();
        let result = self.inner.check_now(request)?;
        self.record(started, &result);
        Some(result)
    }
    fn check_batch<'a>(
        &'a self,
        requests: &'a [CheckRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<Verdict, StoreError>>> {
        Box::pin(async move {
            let started = Instant::now();
            let results = self.inner.check_batch(requests).await;
            let failed = match results.iter().find_map(|r| r.as_ref().err()) {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            };
            self.record(started, &failed);
            results
        })
    }
    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async move {
            let started = Instant::now();
            let result = self.inner.check_keyed(items).await;
            self.record(started, &result);
            result
        })
    }
    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.refund(policies, key, cost)
    }
    fn release<'a>(
        &'a self,
        leases: &'a [sluicegate_core::Lease],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release(leases)
    }
    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.reset(policy, key)
    }
    fn settle<'a>(
        &'a self,
        settlement: sluicegate_core::Settlement<'a>,
    ) -> BoxFuture<'a, Result<sluicegate_core::Settled, StoreError>> {
        self.inner.settle(settlement)
    }
    fn set_override<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        value: Option<sluicegate_core::Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.set_override(policy, key, value)
    }
    fn set_override_placed<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        placement: &'a str,
        value: Option<sluicegate_core::Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner
            .set_override_placed(policy, key, placement, value)
    }
    fn get_override<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<sluicegate_core::Override>, StoreError>> {
        self.inner.get_override(policy, key)
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.ping()
    }
    fn tracked_keys(&self) -> Option<u64> {
        self.inner.tracked_keys()
    }
    fn tracked_bytes(&self) -> Option<u64> {
        self.inner.tracked_bytes()
    }
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
}
