//! [`RedisStore`]: the [`Store`] whose state lives in Redis.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::Script;
use redis::cluster_routing::Slot;
use sluicegate_core::store::check_key;
use sluicegate_core::{
    BoxFuture, CheckRequest, KeyedCheck, Lease, Micros, Override, Policy, Settled, Settlement,
    Store, StoreError, Verdict,
};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::cache::DenyCache;
use crate::coalesce::{Job, QUEUE_DEPTH, dispatch};
use crate::config::{RedisConfig, RedisStoreError};
use crate::conn::Target;
use crate::keys::{
    override_key, placed_override_key, placed_state_key, settle_marker_key, state_key,
};
use crate::link::{Link, unavailable};
use crate::overrides;
use crate::range::params;
use crate::script::{
    Item, Op, entry_script, invocation, settle_invocation, settle_script, verdicts,
};

/// The key health probes write, `<prefix>:probe` (a one-second TTL).
fn probe_key(prefix: &str) -> String {
    format!("{prefix}:probe")
}

/// How often a background task retries a lost connection or probes an open circuit.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// Requests per script call in [`Store::check_batch`]: large enough to amortise the call,
/// small enough that one script never blocks Redis for long.
pub const BATCH_CHUNK: usize = 64;

/// How much longer than the timeout a coalesced decision may take, for its time in the
/// queue; its script call alone is bounded by the timeout.
const QUEUE_SLACK: Duration = Duration::from_millis(10);

/// Histogram of store call durations, seconds (the name is core's, shared by every store).
pub const METRIC_DURATION: &str = sluicegate_core::store::metric::STORE_DURATION;
/// Counter of failed store calls, labelled `error` = `timeout` | `unavailable` |
/// `circuit_open` (outages) | `internal` (an error reply that is not an outage).
pub const METRIC_ERRORS: &str = sluicegate_core::store::metric::STORE_ERRORS;

/// The rate-limit store on Redis or Redis Cluster. See the crate documentation.
///
/// One value serves the whole process: it holds one multiplexed connection, shared by all
/// concurrent calls, and a background task that reconnects and probes. Dropping it stops
/// that task.
pub struct RedisStore {
    inner: Arc<Inner>,
    probe: JoinHandle<()>,
    dispatcher: Option<JoinHandle<()>>,
    /// Standalone only: settles the override flag once (`overrides::index`).
    indexer: Option<JoinHandle<()>>,
}

pub(crate) struct Inner {
    pub(crate) link: Link,
    prefix: String,
    script: Script,
    /// Reserve then settle (`settle.lua`).
    settle_script: Script,
    cache: Option<DenyCache>,
    /// Standalone only: single decisions go through the coalescing dispatcher.
    queue: Option<mpsc::Sender<Job>>,
    /// Standalone only: the override flag's key, sent with every decision (overrides.rs).
    override_flag: Option<String>,
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.probe.abort();
        for task in [&self.dispatcher, &self.indexer].into_iter().flatten() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("kind", &self.inner.kind())
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.link.timeout())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Validates `config` and starts the store. It tries to connect once, but Redis being
    /// down is not an error: the store starts, answers `StoreError::Unavailable` (so callers
    /// apply `on_store_error`) and keeps reconnecting every [`PROBE_INTERVAL`] in the
    /// background. Fails only on an invalid configuration (URL, prefix, timeout).
    ///
    /// Must be called within a Tokio runtime.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use sluicegate_redis::{RedisConfig, RedisStore};
    /// let store = RedisStore::connect(RedisConfig::standalone("redis://127.0.0.1:6379/0")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(config: RedisConfig) -> Result<RedisStore, RedisStoreError> {
        config.validate()?;
        let target = Target::open(&config)?;
        // On a cluster, concurrent requests mostly live in different hash slots and could not
        // share a script call; they go straight out.
        let (queue, queued) = if target.is_cluster() {
            (None, None)
        } else {
            let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
            (Some(sender), Some(receiver))
        };
        let override_flag = (!target.is_cluster()).then(|| overrides::flag_key(&config.key_prefix));
        let inner = Arc::new(Inner {
            link: Link::new(target, config.timeout, probe_key(&config.key_prefix)),
            prefix: config.key_prefix.clone(),
            script: entry_script(),
            settle_script: settle_script(),
            cache: config.local_cache.then(DenyCache::default),
            queue,
            override_flag,
        });
        if !inner.link.probe_once(&inner.script).await {
            tracing::warn!(
                store = inner.kind(),
                "Redis is not reachable yet; decisions follow on_store_error until it is"
            );
        }
        let probe = tokio::spawn(probe_loop(Arc::downgrade(&inner), inner.link.waker()));
        let dispatcher =
            queued.map(|queued| tokio::spawn(dispatch(Arc::downgrade(&inner), queued)));
        let indexer = inner
            .override_flag
            .is_some()
            .then(|| tokio::spawn(index_loop(Arc::downgrade(&inner))));
        Ok(RedisStore {
            inner,
            probe,
            dispatcher,
            indexer,
        })
    }

    /// The Redis key holding `policy`'s state for `client_key` under this store's prefix.
    pub fn state_key(&self, policy: &Policy, client_key: &str) -> String {
        state_key(&self.inner.prefix, client_key, policy)
    }

    /// The shared connection and settings (for the local-first store built on this one).
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Whether a connection is up and the circuit closed (no round trip; see
    /// [`Store::ping`] for one).
    pub fn is_connected(&self) -> bool {
        self.inner.link.is_connected()
    }

    #[cfg(feature = "test-util")]
    /// Test hook (`test-util` feature only): [`Store::check`] with the script's clock set to `now` (µs) instead of the
    /// Redis server's `TIME`, for deterministic comparisons with the in-memory store.
    #[doc(hidden)]
    pub async fn check_at(
        &self,
        request: CheckRequest<'_>,
        now: Micros,
    ) -> Result<Verdict, StoreError> {
        self.inner.check(request, Some(now)).await
    }

    #[cfg(feature = "test-util")]
    /// Test hook (`test-util` feature only): [`Store::check_keyed`] at `now` (µs).
    #[doc(hidden)]
    pub async fn check_keyed_at(
        &self,
        items: &[KeyedCheck<'_>],
        now: Micros,
    ) -> Result<Verdict, StoreError> {
        self.inner.check_keyed(items, Some(now)).await
    }

    #[cfg(feature = "test-util")]
    /// Test hook (`test-util` feature only): [`Store::check_batch`] at `now` (µs).
    #[doc(hidden)]
    pub async fn check_batch_at(
        &self,
        requests: &[CheckRequest<'_>],
        now: Micros,
    ) -> Vec<Result<Verdict, StoreError>> {
        self.inner.check_batch(requests, Some(now)).await
    }

    #[cfg(feature = "test-util")]
    /// Test hook (`test-util` feature only): [`Store::settle`] at `now` (µs).
    #[doc(hidden)]
    pub async fn settle_at(
        &self,
        settlement: Settlement<'_>,
        now: Micros,
    ) -> Result<Settled, StoreError> {
        self.inner.settle(settlement, Some(now)).await
    }

    #[cfg(feature = "test-util")]
    /// Test hook (`test-util` feature only): [`Store::refund`] at `now` (µs).
    #[doc(hidden)]
    pub async fn refund_at(
        &self,
        policies: &[Arc<Policy>],
        key: &str,
        cost: u64,
        now: Micros,
    ) -> Result<(), StoreError> {
        self.inner.refund(policies, key, cost, Some(now)).await
    }
}

async fn probe_loop(inner: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        let healthy = match inner.upgrade() {
            Some(inner) => inner.link.probe_once(&inner.script).await,
            None => return,
        };
        if healthy {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(PROBE_INTERVAL) => {}
            }
        } else {
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }
}

/// Settles the override flag (`overrides::index`), retrying until Redis answers.
async fn index_loop(inner: Weak<Inner>) {
    loop {
        let done = match inner.upgrade() {
            Some(inner) => match &inner.override_flag {
                Some(flag) => overrides::index(&inner.link, &inner.prefix, flag)
                    .await
                    .is_ok(),
                None => true,
            },
            None => return,
        };
        if done {
            return;
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

impl Inner {
    fn kind(&self) -> &'static str {
        self.link.kind()
    }

    fn items<'p>(
        &self,
        parts: impl IntoIterator<Item = (&'p Arc<Policy>, &'p str, u64)>,
    ) -> Result<Vec<Item>, StoreError> {
        parts
            .into_iter()
            .map(|(policy, key, cost)| {
                Ok(Item {
                    policy: Arc::clone(policy),
                    key: state_key(&self.prefix, key, policy),
                    cost,
                    params: params(policy).map_err(|e| StoreError::Unsupported(e.to_string()))?,
                })
            })
            .collect()
    }

    /// The items of a keyed check, each under its key and placement.
    fn keyed_items(&self, items: &[KeyedCheck<'_>]) -> Result<Vec<Item>, StoreError> {
        items
            .iter()
            .map(|item| {
                Ok(Item {
                    policy: Arc::clone(item.policy),
                    key: placed_state_key(&self.prefix, item.placement, item.key, item.policy),
                    cost: item.cost,
                    params: params(item.policy).map_err(|e| unavailable(e.to_string()))?,
                })
            })
            .collect()
    }

    /// One script call deciding `requests`.
    pub(crate) async fn decide(
        &self,
        requests: &[&[Item]],
        now: Option<Micros>,
    ) -> Result<Vec<Verdict>, StoreError> {
        let invocation = invocation(
            &self.script,
            now,
            Op::Check,
            requests,
            self.override_flag.as_deref(),
        );
        let reply: Vec<i64> = self
            .link
            .run(move |mut conn| async move { invocation.invoke_async(&mut conn).await })
            .await?;
        verdicts(requests, &reply)
    }

    fn cache_key(items: &[Item]) -> String {
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        keys.join("\n")
    }

    async fn check(
        &self,
        request: CheckRequest<'_>,
        now: Option<Micros>,
    ) -> Result<Verdict, StoreError> {
        request.validate()?;
        let items = self.items(
            request
                .policies
                .iter()
                .map(|p| (p, request.key, request.cost)),
        )?;
        let cache_key = self.cache.as_ref().map(|_| Self::cache_key(&items));
        if let (Some(cache), Some(key)) = (&self.cache, &cache_key)
            && let Some(verdict) = cache.lookup(key, request.cost, request.policies)
        {
            return Ok(verdict);
        }
        let verdict =
            match (&self.queue, now) {
                (Some(queue), None) => self.coalesced(queue, items).await?,
                _ => self.decide(&[&items], now).await?.pop().ok_or_else(|| {
                    StoreError::Internal("empty reply from the Redis script".into())
                })?,
            };
        if let (Some(cache), Some(key)) = (&self.cache, cache_key) {
            cache.remember(key, request.cost, &verdict);
        }
        Ok(verdict)
    }

    /// Decides one request through the coalescing dispatcher.
    async fn coalesced(
        &self,
        queue: &mpsc::Sender<Job>,
        items: Vec<Item>,
    ) -> Result<Verdict, StoreError> {
        // An open circuit or a missing connection fails here, without queueing.
        self.link.ready()?;
        let (reply, answer) = oneshot::channel();
        let decided = async {
            queue
                .send(Job { items, reply })
                .await
                .map_err(|_| unavailable("the Redis store is shutting down"))?;
            answer
                .await
                .map_err(|_| unavailable("the Redis store is shutting down"))?
        };
        // The script call has its own timeout; this one also bounds the wait in the queue.
        match tokio::time::timeout(self.link.timeout() + QUEUE_SLACK, decided).await {
            Ok(result) => result,
            Err(_) => {
                self.link.count_error("timeout");
                Err(StoreError::Timeout)
            }
        }
    }

    async fn check_keyed(
        &self,
        items: &[KeyedCheck<'_>],
        now: Option<Micros>,
    ) -> Result<Verdict, StoreError> {
        KeyedCheck::validate_all(items)?;
        let prepared = self.keyed_items(items)?;
        // A script touches one hash slot only. Callers that check several keys at once on a
        // cluster give them one placement (the Envoy service: its domain), so this refusal
        // is for a caller that did not: better no answer than a non-atomic one.
        if self.link.is_cluster() {
            let slot = Slot::for_key(&prepared[0].key);
            if prepared.iter().any(|i| Slot::for_key(&i.key) != slot) {
                return Err(StoreError::Unsupported(
                    "Redis Cluster cannot decide keys in different hash slots in one atomic step; give them one placement"
                        .into(),
                ));
            }
        }
        self.decide(&[&prepared], now)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Internal("empty reply from the Redis script".into()))
    }

    async fn check_batch(
        &self,
        requests: &[CheckRequest<'_>],
        now: Option<Micros>,
    ) -> Vec<Result<Verdict, StoreError>> {
        let mut results: Vec<Option<Result<Verdict, StoreError>>> = vec![None; requests.len()];
        // (request index, items, cache key) of the requests Redis must decide.
        let mut pending = Vec::with_capacity(requests.len());
        for (i, request) in requests.iter().enumerate() {
            let items = request.validate().and_then(|()| {
                self.items(
                    request
                        .policies
                        .iter()
                        .map(|p| (p, request.key, request.cost)),
                )
            });
            match items {
                Err(e) => results[i] = Some(Err(e)),
                Ok(items) => {
                    let cache_key = self.cache.as_ref().map(|_| Self::cache_key(&items));
                    let hit = match (&self.cache, &cache_key) {
                        (Some(cache), Some(key)) => {
                            cache.lookup(key, request.cost, request.policies)
                        }
                        _ => None,
                    };
                    match hit {
                        Some(verdict) => results[i] = Some(Ok(verdict)),
                        None => pending.push((i, items, cache_key)),
                    }
                }
            }
        }
        let groups = batch_groups(
            self.link.is_cluster(),
            pending.iter().map(|(_, items, _)| items[0].key.as_str()),
        );
        let pending = &pending;
        let calls = groups.iter().map(|group| async move {
            let requests: Vec<&[Item]> = group.iter().map(|&j| pending[j].1.as_slice()).collect();
            (group, self.decide(&requests, now).await)
        });
        for (group, outcome) in join_all(calls).await {
            match outcome {
                Ok(verdicts) => {
                    for (&j, verdict) in group.iter().zip(verdicts) {
                        let (i, _, cache_key) = &pending[j];
                        if let (Some(cache), Some(key)) = (&self.cache, cache_key) {
                            cache.remember(key.clone(), requests[*i].cost, &verdict);
                        }
                        results[*i] = Some(Ok(verdict));
                    }
                }
                Err(e) => {
                    for &j in group {
                        results[pending[j].0] = Some(Err(e.clone()));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(StoreError::Internal("no reply for this request".into())))
            })
            .collect()
    }

    async fn refund(
        &self,
        policies: &[Arc<Policy>],
        key: &str,
        cost: u64,
        now: Option<Micros>,
    ) -> Result<(), StoreError> {
        CheckRequest::new(policies, key, cost).validate()?;
        let items = self.items(policies.iter().map(|p| (p, key, cost)))?;
        if let Some(cache) = &self.cache {
            for item in &items {
                cache.forget(&item.key);
            }
        }
        if cost == 0 {
            return Ok(());
        }
        let flag = self.override_flag.as_deref();
        let invocation = invocation(&self.script, now, Op::Refund, &[&items], flag);
        self.link.run(
            move |mut conn| async move { invocation.invoke_async::<redis::Value>(&mut conn).await },
        )
        .await
        .map(|_| ())
    }

    /// One script call (`settle.lua`): the marker `SET NX` and every policy's settle, in
    /// the client key's hash slot.
    async fn settle(&self, s: Settlement<'_>, now: Option<Micros>) -> Result<Settled, StoreError> {
        CheckRequest::new(s.policies, s.key, 0).validate()?;
        if s.remaining.len() != s.policies.len() {
            return Err(StoreError::NoPolicy);
        }
        let items = self.items(s.policies.iter().map(|p| (p, s.key, 0)))?;
        if let Some(cache) = &self.cache {
            for item in &items {
                cache.forget(&item.key);
            }
        }
        let items: Vec<(Item, u64)> = items.into_iter().zip(s.remaining.iter().copied()).collect();
        let marker = settle_marker_key(&self.prefix, s.key, s.id);
        let invocation = settle_invocation(&self.settle_script, now, &marker, &items, &s);
        let reply: i64 = self
            .link
            .run(move |mut conn| async move { invocation.invoke_async(&mut conn).await })
            .await?;
        match reply {
            0 => Ok(Settled::Done),
            1 => Ok(Settled::Replayed),
            2 => Ok(Settled::Expired),
            other => Err(StoreError::Internal(format!(
                "unexpected reply from the settle script: {other}"
            ))),
        }
    }

    /// Frees each lease with one `ZREM` of its member (see `concurrency.lua`): atomic on
    /// its own, from any instance, and a no-op for a lease already freed or expired.
    async fn release(&self, leases: &[Lease]) -> Result<(), StoreError> {
        for lease in leases {
            check_key(&lease.key)?;
            let state = state_key(&self.prefix, &lease.key, &lease.policy);
            let member = format!("{}:{}", lease.expires_at, lease.cost);
            self.link
                .run(move |mut conn| async move {
                    redis::cmd("ZREM")
                        .arg(&state)
                        .arg(&member)
                        .query_async::<()>(&mut conn)
                        .await
                })
                .await?;
        }
        Ok(())
    }

    async fn refund_keyed(
        &self,
        items: &[KeyedCheck<'_>],
        now: Option<Micros>,
    ) -> Result<(), StoreError> {
        KeyedCheck::validate_all(items)?;
        let prepared: Vec<Item> = self
            .keyed_items(items)?
            .into_iter()
            .filter(|item| item.cost > 0)
            .collect();
        if let Some(cache) = &self.cache {
            for item in &prepared {
                cache.forget(&item.key);
            }
        }
        // One script call per slot: a refund needs no atomicity across keys.
        let mut groups: Vec<(Slot, Vec<Item>)> = Vec::new();
        for item in prepared {
            let slot = Slot::for_key(&item.key);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(item),
                None => groups.push((slot, vec![item])),
            }
        }
        for (_, group) in groups {
            let flag = self.override_flag.as_deref();
            let invocation = invocation(&self.script, now, Op::Refund, &[&group], flag);
            self.link
                .run(move |mut conn| async move {
                    invocation.invoke_async::<redis::Value>(&mut conn).await
                })
                .await?;
        }
        Ok(())
    }

    async fn reset(&self, policy: &Policy, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let state = state_key(&self.prefix, key, policy);
        if let Some(cache) = &self.cache {
            cache.forget(&state);
        }
        self.link
            .run(move |mut conn| async move {
                redis::cmd("DEL")
                    .arg(&state)
                    .arg(format!("{state}:penalty"))
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }

    async fn set_override(
        &self,
        policy: &Policy,
        key: &str,
        placement: Option<&str>,
        value: Option<Override>,
    ) -> Result<(), StoreError> {
        check_key(key)?;
        if let Some(value) = &value {
            // The script must decide the key's numbers exactly, like a configured policy's.
            let numbers = policy
                .with_override(value)
                .map_err(|e| StoreError::Unsupported(e.to_string()))?;
            params(&numbers).map_err(|e| StoreError::Unsupported(e.to_string()))?;
            // Before the override exists, so no decision after it is written skips it.
            if let Some(flag) = &self.override_flag {
                overrides::mark(&self.link, flag).await?;
            }
        }
        // The placed copy first: the unplaced one is what `get_override` reads back, so a
        // failure in between leaves an override the caller is told was not set.
        if let Some(placement) = placement {
            self.write_override(policy, key, Some(placement), value)
                .await?;
        }
        self.write_override(policy, key, None, value).await
    }

    /// Writes (or deletes) the override beside `key`'s states under `placement`: the key
    /// the decision script reads with those states.
    async fn write_override(
        &self,
        policy: &Policy,
        key: &str,
        placement: Option<&str>,
        value: Option<Override>,
    ) -> Result<(), StoreError> {
        let target = placed_override_key(&self.prefix, placement, key, policy);
        if let Some(cache) = &self.cache {
            cache.forget(&placed_state_key(&self.prefix, placement, key, policy));
        }
        self.link
            .run(move |mut conn| async move {
                match value {
                    // An administrator's or the config's contract: kept until removed (the
                    // one key without a TTL; clients cannot create such keys).
                    Some(v) => {
                        redis::cmd("SET")
                            .arg(&target)
                            .arg(format!(
                                "{} {} {}",
                                v.limit,
                                v.burst.unwrap_or(0),
                                v.period.unwrap_or(0)
                            ))
                            .query_async::<()>(&mut conn)
                            .await
                    }
                    None => {
                        redis::cmd("DEL")
                            .arg(&target)
                            .query_async::<()>(&mut conn)
                            .await
                    }
                }
            })
            .await
    }

    async fn get_override(
        &self,
        policy: &Policy,
        key: &str,
    ) -> Result<Option<Override>, StoreError> {
        check_key(key)?;
        let target = override_key(&self.prefix, key, policy);
        let text: Option<String> = self
            .link
            .run(move |mut conn| async move {
                redis::cmd("GET").arg(&target).query_async(&mut conn).await
            })
            .await?;
        Ok(text.and_then(|t| parse_override(&t)))
    }

    /// A write, not a `PING`: a server that answers but refuses writes (OOM, READONLY,
    /// MASTERDOWN…) cannot decide, so it is not ready.
    async fn ping(&self) -> Result<(), StoreError> {
        let probe = self.link.probe_command();
        self.link
            .run(|mut conn| async move { probe.query_async::<()>(&mut conn).await })
            .await
    }
}

impl Store for RedisStore {
    fn check<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(self.inner.check(request, None))
    }

    fn check_batch<'a>(
        &'a self,
        requests: &'a [CheckRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<Verdict, StoreError>>> {
        Box::pin(self.inner.check_batch(requests, None))
    }

    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(self.inner.check_keyed(items, None))
    }

    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.refund(policies, key, cost, None))
    }

    fn release<'a>(&'a self, leases: &'a [Lease]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.release(leases))
    }

    fn refund_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.refund_keyed(items, None))
    }

    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.reset(policy, key))
    }

    fn settle<'a>(&'a self, s: Settlement<'a>) -> BoxFuture<'a, Result<Settled, StoreError>> {
        Box::pin(self.inner.settle(s, None))
    }

    fn set_override<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.set_override(policy, key, None, value))
    }

    /// Also writes the override beside the key's placed states, which the decision script
    /// reads with them (an unplaced override is in another Cluster slot).
    fn set_override_placed<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        placement: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.set_override(policy, key, Some(placement), value))
    }

    fn get_override<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Override>, StoreError>> {
        Box::pin(self.inner.get_override(policy, key))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.inner.ping())
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
}

/// An override as the script reads it: "limit burst period" (0: the policy's own).
fn parse_override(text: &str) -> Option<Override> {
    let mut numbers = text.split(' ').map(|n| n.parse::<u64>().ok());
    let (limit, burst, period) = (numbers.next()??, numbers.next()??, numbers.next()??);
    Some(Override {
        limit,
        burst: (burst > 0).then_some(burst),
        period: (period > 0).then_some(period),
    })
}

/// The requests of a batch (by their first key) in the groups one script call each decides:
/// standalone, everything in order, in chunks of `BATCH_CHUNK`; on a cluster one group per
/// hash slot first, since a script may only touch keys of one slot.
fn batch_groups<'a>(cluster: bool, first_keys: impl Iterator<Item = &'a str>) -> Vec<Vec<usize>> {
    let chunks = |group: Vec<usize>| -> Vec<Vec<usize>> {
        group.chunks(BATCH_CHUNK).map(<[usize]>::to_vec).collect()
    };
    if !cluster {
        return chunks(first_keys.enumerate().map(|(j, _)| j).collect());
    }
    let mut by_slot: Vec<(Slot, Vec<usize>)> = Vec::new();
    for (j, key) in first_keys.enumerate() {
        let slot = Slot::for_key(key);
        match by_slot.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(j),
            None => by_slot.push((slot, vec![j])),
        }
    }
    by_slot
        .into_iter()
        .flat_map(|(_, group)| chunks(group))
        .collect()
}
