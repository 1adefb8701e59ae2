//! [`Pool`]: a `[[pools]]` table at run time — the async waiting and the slot guard over
//! `sluicegate-throttle`'s pure [`Scheduler`], which decides everything.
//!
//! A request [`acquire`](Pool::acquire)s a [`PoolPermit`] (at once, or after waiting in the
//! queue without holding a thread) and holds it while the upstream works, usually inside a
//! [`PermitBody`] until the response has been sent; freeing it (completed, or dropped when
//! the request was cut short) hands the slot to the next waiting request. A waiting request
//! whose future is dropped (its client went away) leaves the queue at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use metrics::{Counter, Gauge, Histogram};
use sluicegate_throttle::scheduler::{Released, RequestId, Withdraw};
use sluicegate_throttle::{Arrival, Rejected, Scheduler, ValidPool};
use tokio::sync::oneshot;

use crate::headers::{RejectionBody, ceil_secs, json_response};

/// `sluicegate_pool_in_flight{pool, level}`: requests holding a slot.
pub const IN_FLIGHT: &str = "sluicegate_pool_in_flight";
/// `sluicegate_pool_queued{pool, level}`: requests waiting for a slot.
pub const QUEUED: &str = "sluicegate_pool_queued";
/// `sluicegate_pool_wait_seconds{pool, level}` (histogram): how long admitted requests waited.
pub const WAIT_SECONDS: &str = "sluicegate_pool_wait_seconds";
/// `sluicegate_pool_rejections_total{pool, level, reason}`, reason `queue_full` | `timeout`.
pub const REJECTIONS: &str = "sluicegate_pool_rejections_total";
/// `sluicegate_pool_cancelled_total{pool, level}`: waiting requests whose client went away.
pub const CANCELLED: &str = "sluicegate_pool_cancelled_total";
/// `sluicegate_pool_limit{pool}`: the current concurrency (moves when adaptive).
pub const LIMIT: &str = "sluicegate_pool_limit";
/// `sluicegate_pool_latency_floor_seconds{pool}`: the adaptive limit's latency floor.
pub const FLOOR: &str = "sluicegate_pool_latency_floor_seconds";

/// A pool shared by every request of the routes that name it (and every gateway worker).
pub struct Pool {
    spec: ValidPool,
    origin: Instant,
    inner: Mutex<Inner>,
    metrics: Vec<LevelMetrics>,
    limit_gauge: Gauge,
    floor_gauge: Gauge,
}

struct Inner {
    scheduler: Scheduler,
    /// The waiting requests' wake-ups: `Ok` = your slot, `Err` = pushed out.
    waiters: HashMap<RequestId, oneshot::Sender<Result<(), Rejected>>>,
}

struct LevelMetrics {
    in_flight: Gauge,
    queued: Gauge,
    wait: Histogram,
    full: Counter,
    timeout: Counter,
    cancelled: Counter,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// A pool's state at one moment ([`Pool::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    /// Requests that may hold a slot at once now.
    pub limit: u32,
    /// `(min_concurrency, max_concurrency)` when adaptive.
    pub adaptive: Option<(u32, u32)>,
    /// The adaptive limit's latency floor, once measured.
    pub latency_floor: Option<Duration>,
    /// Each level's counters, in configuration order.
    pub levels: Vec<sluicegate_throttle::LevelStats>,
}

/// A refused request: the pool's queue was full, or it waited `max_wait`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRejected {
    /// The pool's name.
    pub pool: String,
    /// Why.
    pub reason: Rejected,
    /// When to try again.
    pub retry_after: Duration,
}

impl PoolRejected {
    /// `Retry-After` in whole seconds, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after.as_micros().min(u128::from(u64::MAX)) as u64).max(1)
    }

    /// The contract's 429: JSON body (its `policy` is the pool's name), `Retry-After`,
    /// `Cache-Control: no-store`.
    pub fn response(&self) -> Response<Full<Bytes>> {
        let retry = self.retry_after_secs();
        let message = match self.reason {
            Rejected::QueueFull => format!(
                "Pool \"{}\" is busy and its queue is full; retry in {retry} s.",
                self.pool
            ),
            Rejected::Timeout => format!(
                "Pool \"{}\" is busy: no slot came within its max_wait; retry in {retry} s.",
                self.pool
            ),
        };
        let body = RejectionBody::with(self.pool.clone(), message, retry).to_json();
        let mut response = json_response(StatusCode::TOO_MANY_REQUESTS, Bytes::from(body));
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry));
        response
    }
}

impl std::fmt::Display for PoolRejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pool {:?} refused the request: {:?}",
            self.pool, self.reason
        )
    }
}

impl std::error::Error for PoolRejected {}

impl Pool {
    /// A pool for a validated `[[pools]]` table. Its metrics are registered with the
    /// recorder installed now (install yours first).
    pub fn new(spec: ValidPool) -> Arc<Pool> {
        let name = spec.name().to_owned();
        let metrics = spec
            .spec()
            .levels
            .iter()
            .map(|(level, _)| {
                let labels = [("pool", name.clone()), ("level", level.clone())];
                let reason = |r: &'static str| {
                    let mut l = labels.to_vec();
                    l.push(("reason", r.to_owned()));
                    metrics::counter!(REJECTIONS, &l)
                };
                LevelMetrics {
                    in_flight: metrics::gauge!(IN_FLIGHT, &labels),
                    queued: metrics::gauge!(QUEUED, &labels),
                    wait: metrics::histogram!(WAIT_SECONDS, &labels),
                    full: reason("queue_full"),
                    timeout: reason("timeout"),
                    cancelled: metrics::counter!(CANCELLED, &labels),
                }
            })
            .collect();
        let scheduler = Scheduler::new(&spec);
        let pool = Pool {
            limit_gauge: metrics::gauge!(LIMIT, "pool" => name.clone()),
            floor_gauge: metrics::gauge!(FLOOR, "pool" => name),
            spec,
            origin: Instant::now(),
            inner: Mutex::new(Inner {
                scheduler,
                waiters: HashMap::new(),
            }),
            metrics,
        };
        pool.publish(&pool.lock().scheduler);
        Arc::new(pool)
    }

    /// The validated table it was made from.
    pub fn spec(&self) -> &ValidPool {
        &self.spec
    }
    /// The pool's name.
    pub fn name(&self) -> &str {
        self.spec.name()
    }
    /// Requests holding a slot, waiting, and the current limit.
    pub fn load(&self) -> (u32, usize, u32) {
        let inner = self.lock();
        let s = &inner.scheduler;
        (s.running(), s.queued(), s.limit())
    }
    /// Each level's counters (for the dashboard and tests).
    pub fn levels(&self) -> Vec<sluicegate_throttle::LevelStats> {
        self.lock().scheduler.levels().cloned().collect()
    }
    /// Everything the pool shows (the dashboard), read under one lock.
    pub fn status(&self) -> PoolStatus {
        let inner = self.lock();
        let s = &inner.scheduler;
        PoolStatus {
            limit: s.limit(),
            adaptive: s.adaptive().map(|a| a.bounds()),
            latency_floor: s
                .adaptive()
                .and_then(|a| a.floor())
                .map(Duration::from_micros),
            levels: s.levels().cloned().collect(),
        }
    }

    /// Waits for a slot at `level` (an index into the pool's levels) for `flow` (the
    /// route's client key) with the route's `weight`. Cancel-safe: dropping the future
    /// leaves the queue (or gives back a slot that came at that moment).
    pub async fn acquire(
        self: &Arc<Self>,
        level: usize,
        flow: &str,
        weight: u32,
    ) -> Result<PoolPermit, PoolRejected> {
        let start = Instant::now();
        let (id, rx) = {
            let mut inner = self.lock();
            let now = self.micros(start);
            let arrival = inner.scheduler.arrive(now, level, flow, weight);
            match arrival {
                Arrival::Admitted(id) => {
                    self.publish(&inner.scheduler);
                    let level = inner.scheduler.level_of(id).unwrap_or(0);
                    drop(inner);
                    self.metrics[level].wait.record(0.0);
                    return Ok(self.permit(id, level));
                }
                Arrival::Rejected(reason) => {
                    let level = level.min(self.metrics.len() - 1);
                    self.metrics[level].full.increment(1);
                    return Err(self.rejected(&inner.scheduler, reason));
                }
                Arrival::Queued { id, displaced } => {
                    if let Some(victim) = displaced
                        && let Some(tx) = inner.waiters.remove(&victim)
                    {
                        // Its level's counter is bumped by the waiter itself.
                        let _ = tx.send(Err(Rejected::QueueFull));
                    }
                    let (tx, rx) = oneshot::channel();
                    inner.waiters.insert(id, tx);
                    self.publish(&inner.scheduler);
                    (id, rx)
                }
            }
        };
        let level = level.min(self.metrics.len() - 1);
        let mut guard = WaitGuard {
            pool: self,
            id,
            armed: true,
        };
        let deadline = start + Duration::from_micros(self.spec.spec().max_wait);
        let woke = tokio::time::timeout_at(deadline.into(), rx).await;
        guard.armed = false;
        let outcome = match woke {
            Ok(Ok(outcome)) => outcome,
            // Timed out (or the sender vanished): leave, unless the slot came meanwhile.
            Ok(Err(_)) | Err(_) => self.time_out(id),
        };
        match outcome {
            Ok(()) => {
                self.metrics[level]
                    .wait
                    .record(start.elapsed().as_secs_f64());
                Ok(self.permit(id, level))
            }
            Err(reason) => {
                let m = &self.metrics[level];
                match reason {
                    Rejected::QueueFull => m.full.increment(1),
                    Rejected::Timeout => m.timeout.increment(1),
                }
                Err(self.rejected(&self.lock().scheduler, reason))
            }
        }
    }

    /// The waiter's deadline passed: withdraw it, unless it was admitted at that moment.
    fn time_out(&self, id: RequestId) -> Result<(), Rejected> {
        let mut inner = self.lock();
        let now = self.micros(Instant::now());
        inner.waiters.remove(&id);
        if inner.scheduler.waited(id, now).is_none() {
            // Already running: the slot is ours.
            return Ok(());
        }
        inner.scheduler.withdraw(id, now, Withdraw::Timeout);
        self.publish(&inner.scheduler);
        Err(Rejected::Timeout)
    }

    fn permit(self: &Arc<Self>, id: RequestId, level: usize) -> PoolPermit {
        PoolPermit {
            pool: Arc::clone(self),
            id,
            level,
            sample: false,
        }
    }

    fn rejected(&self, scheduler: &Scheduler, reason: Rejected) -> PoolRejected {
        PoolRejected {
            pool: self.name().to_owned(),
            reason,
            retry_after: Duration::from_micros(scheduler.retry_after()),
        }
    }

    /// Wakes the requests a release admitted, and refreshes the gauges.
    fn hand_on(&self, inner: &mut Inner, released: Released) {
        for id in released.admitted {
            if let Some(tx) = inner.waiters.remove(&id) {
                // A failed send means the waiter is being dropped: its guard gives the
                // slot back under this same lock.
                let _ = tx.send(Ok(()));
            }
        }
        self.publish(&inner.scheduler);
    }

    fn publish(&self, scheduler: &Scheduler) {
        for (stats, m) in scheduler.levels().zip(&self.metrics) {
            m.in_flight.set(f64::from(stats.running));
            m.queued.set(stats.queued as f64);
        }
        self.limit_gauge.set(f64::from(scheduler.limit()));
        if let Some(floor) = scheduler.adaptive().and_then(|a| a.floor()) {
            self.floor_gauge.set(floor as f64 / 1e6);
        }
    }

    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin)
            .as_micros()
            .min(u128::from(u64::MAX)) as u64
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The scheduler never panics mid-update; a poisoned lock still holds a usable state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Leaves the queue when a waiting request's future is dropped (its client went away).
struct WaitGuard<'a> {
    pool: &'a Pool,
    id: RequestId,
    armed: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let pool = self.pool;
        let mut inner = pool.lock();
        let now = pool.micros(Instant::now());
        inner.waiters.remove(&self.id);
        let level = inner.scheduler.level_of(self.id).unwrap_or(0);
        let (was_waiting, released) = inner.scheduler.withdraw(self.id, now, Withdraw::Gone);
        if was_waiting && let Some(m) = pool.metrics.get(level) {
            m.cancelled.increment(1);
        }
        pool.hand_on(&mut inner, released);
    }
}

/// A slot in a [`Pool`]. [`PoolPermit::complete`] frees it after a complete response and
/// gives the adaptive limit the round-trip time it learns from; dropping it frees the slot
/// without a sample (the request was cut short).
pub struct PoolPermit {
    pool: Arc<Pool>,
    id: RequestId,
    level: usize,
    /// Whether the time it was held is a latency sample for the adaptive limit.
    sample: bool,
}

impl PoolPermit {
    /// The pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }
    /// The level index it runs at.
    pub fn level(&self) -> usize {
        self.level
    }
    /// Frees the slot after a complete response, giving the adaptive limit the time it was
    /// held as a latency sample. (Dropping the permit frees the slot without a sample: a
    /// request cut short — its client went away, the upstream refused the connection or its
    /// body failed — says nothing about the upstream's latency, and a quick failure would
    /// drag the latency floor down.)
    pub fn complete(mut self) {
        self.sample = true;
    }
}

impl std::fmt::Debug for PoolPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolPermit")
            .field("pool", &self.pool.name())
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for PoolPermit {
    fn drop(&mut self) {
        let pool = &self.pool;
        let mut inner = pool.lock();
        let now = pool.micros(Instant::now());
        let released = if self.sample {
            inner.scheduler.release(self.id, now)
        } else {
            inner.scheduler.withdraw(self.id, now, Withdraw::Gone).1
        };
        pool.hand_on(&mut inner, released);
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds a [`PoolPermit`] until the body has been sent (or
    /// dropped), so a slot is freed when the response *ends*, not when its head arrives: a
    /// streamed or slow body keeps its upstream busy, so it keeps its slot. Frames pass
    /// through untouched and at once. A body sent to its end gives the adaptive limit its
    /// latency sample; one dropped early or failed frees the slot without one.
    pub struct PermitBody<B> {
        #[pin]
        inner: B,
        permit: Option<PoolPermit>,
    }
}

impl<B> PermitBody<B> {
    /// `inner`, holding `permit` until its last frame (`None`: frames only pass through).
    pub fn new(inner: B, permit: Option<PoolPermit>) -> Self {
        PermitBody { inner, permit }
    }
}

fn complete(permit: &mut Option<PoolPermit>) {
    if let Some(permit) = permit.take() {
        permit.complete();
    }
}

impl<B: http_body::Body> http_body::Body for PermitBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        match &polled {
            // The body failed: the upstream's answer was cut short (freed, no sample).
            Poll::Ready(Some(Err(_))) => drop(this.permit.take()),
            // The last frame went out: the upstream is done with it.
            Poll::Ready(None) => complete(this.permit),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => complete(this.permit),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Why a route's `pool`, `level` or `weight` does not fit the pools configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolBindError {
    /// The pool is not defined.
    #[error("route {route:?} names unknown pool {pool:?} (not defined in [[pools]])")]
    UnknownPool {
        /// The route's path.
        route: String,
        /// The pool.
        pool: String,
    },
    /// The level is not one of the pool's.
    #[error("route {route:?}: pool {pool:?} has no level {level:?}")]
    UnknownLevel {
        /// The route's path.
        route: String,
        /// The pool.
        pool: String,
        /// The level.
        level: String,
    },
    /// The pool has several levels and the route names none.
    #[error("route {route:?}: pool {pool:?} has several levels; name one with `level`")]
    LevelNeeded {
        /// The route's path.
        route: String,
        /// The pool.
        pool: String,
    },
    /// A weight out of range.
    #[error("route {route:?}: weight must be from 1 to {max}, not {weight}", max = sluicegate_throttle::spec::MAX_SHARES)]
    Weight {
        /// The route's path.
        route: String,
        /// The weight.
        weight: u32,
    },
    /// Two pools share a name.
    #[error("pool {0:?} is defined twice")]
    DuplicatePool(String),
}

/// The level index a route's `level` and `weight` select in `pool` (the one rule, used by
/// the server's configuration check too).
pub fn resolve_level(
    pool: &ValidPool,
    route: &str,
    wanted: &crate::RoutePool,
) -> Result<usize, PoolBindError> {
    let levels = &pool.spec().levels;
    let level = match &wanted.level {
        Some(level) => pool
            .level_index(level)
            .ok_or_else(|| PoolBindError::UnknownLevel {
                route: route.to_owned(),
                pool: wanted.pool.clone(),
                level: level.clone(),
            })?,
        None if levels.len() == 1 => 0,
        None => {
            return Err(PoolBindError::LevelNeeded {
                route: route.to_owned(),
                pool: wanted.pool.clone(),
            });
        }
    };
    if wanted.weight == 0 || wanted.weight > sluicegate_throttle::spec::MAX_SHARES {
        return Err(PoolBindError::Weight {
            route: route.to_owned(),
            weight: wanted.weight,
        });
    }
    Ok(level)
}

/// A route's resolved pool: which pool, which level, what weight.
#[derive(Debug, Clone)]
pub(crate) struct PoolBinding {
    pub(crate) pool: Arc<Pool>,
    pub(crate) level: usize,
    pub(crate) weight: u32,
}

impl PoolBinding {
    /// Resolves `route`'s pool among `pools` (`None` when it names none).
    pub(crate) fn resolve(
        route: &crate::Route,
        pools: &[Arc<Pool>],
    ) -> Result<Option<PoolBinding>, PoolBindError> {
        let Some(wanted) = route.pool() else {
            return Ok(None);
        };
        let path = || route.path().to_owned();
        let pool = pools
            .iter()
            .find(|p| p.name() == wanted.pool)
            .ok_or_else(|| PoolBindError::UnknownPool {
                route: path(),
                pool: wanted.pool.clone(),
            })?;
        let level = resolve_level(pool.spec(), route.path(), wanted)?;
        Ok(Some(PoolBinding {
            pool: Arc::clone(pool),
            level,
            weight: wanted.weight,
        }))
    }

    /// Waits for this route's slot for `key`.
    pub(crate) async fn acquire(&self, key: &str) -> Result<PoolPermit, PoolRejected> {
        self.pool.acquire(self.level, key, self.weight).await
    }
}
