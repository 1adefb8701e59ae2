//! The engine: request in, [`RateLimitDecision`] out. The tower layer, the server's
//! forward-auth and its reverse-proxy gateway all call [`RateLimiter::check`], so routes,
//! identity, store errors, observers and delays behave the same everywhere.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::Full;
use sluicegate_core::store::check_key;
use sluicegate_core::{
    BoxFuture, CheckRequest, Decider, Outcome, Policy, Store, StoreError, Timer, Verdict,
};

use crate::access::{ACCESS_TOTAL, Access, AccessList};
use crate::builder::RateLimiterBuilder;
use crate::headers::{self, HeaderSet};
use crate::identity::{ClientIdentity, KeyContext, KeyExtractor, KeyInputs, route_key_of};
use crate::key::ClientKey;
use crate::lookup::{FieldLines, HeaderLookup};
use crate::pool::{Pool, PoolBindError, PoolBinding, PoolPermit, PoolRejected};
use crate::route::{Route, RouteTable};

/// Decides requests: finds the route, forms the client key, asks the store, applies
/// `on_store_error`, tells the observer.
///
/// Build one with [`RateLimiter::builder`] (in code) or [`RateLimiter::new`] (from
/// validated configuration). It is immutable; to change configuration at run time, build a
/// new one and swap it in a [`LimiterHandle`](crate::LimiterHandle).
///
/// ```
/// use std::{net::IpAddr, sync::Arc, time::Duration};
/// use http::{HeaderMap, Method};
/// use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
/// use sluicegate_middleware::{RateLimiter, RouteSpec};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(100_000)))
///     .policy(Policy::builder("auth", AlgorithmKind::TokenBucket, 2, Duration::from_secs(60)).build()?)
///     .route(RouteSpec::new("/api/auth", &["auth"]))
///     .build()?;
///
/// let peer: IpAddr = "192.0.2.1".parse()?;
/// let headers = HeaderMap::new();
/// let check = || limiter.check(&Method::POST, "/api/auth/login", &headers, peer);
/// assert!(check().await.unwrap().is_allowed());
/// assert!(check().await.unwrap().is_allowed());
/// let third = check().await.unwrap();
/// assert!(!third.is_allowed());
/// assert_eq!(third.rejection().status(), 429);
/// // No route, no limit.
/// assert!(limiter.check(&Method::GET, "/health", &headers, peer).await.is_none());
/// # Ok(()) }
/// ```
pub struct RateLimiter {
    decider: Decider,
    routes: RouteTable,
    identity: ClientIdentity,
    header_sets: Arc<[HeaderSet]>,
    /// `None`: the routes' own keys ([`RouteKey`](crate::RouteKey)), formed on any [`HeaderLookup`].
    extractor: Option<Arc<dyn KeyExtractor>>,
    last_store_warning: AtomicU64,
    /// What each route's decisions share, by route index (see [`DecisionParts`]).
    parts: Vec<Arc<DecisionParts>>,
    /// The same for a client on a deny list whose request matched no route.
    unrouted: Arc<DecisionParts>,
    access: AccessList,
    wait_queue: Option<Arc<WaitQueue>>,
}

/// `sluicegate_waiting`: delayed requests waiting for their turn now (what `max_waiting`
/// bounds).
pub const WAITING: &str = "sluicegate_waiting";
/// `sluicegate_max_waiting_rejected_total`: delayed requests refused because `max_waiting`
/// requests were already waiting (also counted as `denied` in `sluicegate_decisions_total`).
pub const MAX_WAITING_REJECTED: &str = "sluicegate_max_waiting_rejected_total";

/// Bounds how many delayed requests wait for their turn at once (`server.max_waiting`):
/// each one holds a connection and a task, so an unbounded queue is a way to exhaust the
/// server. A request that would wait beyond the bound is rejected at once (429, its turn
/// given back), like nginx `limit_req` when its burst queue is full.
///
/// Shared by every limiter built from one configuration and its reloads, so requests
/// already waiting keep counting after a reload.
#[derive(Debug)]
pub struct WaitQueue {
    max: AtomicUsize,
    waiting: AtomicUsize,
}

impl WaitQueue {
    /// A queue of at most `max` waiting requests.
    pub fn new(max: usize) -> Arc<WaitQueue> {
        Arc::new(WaitQueue {
            max: AtomicUsize::new(max),
            waiting: AtomicUsize::new(0),
        })
    }
    /// Changes the bound (on reload); requests already waiting are not affected.
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }
    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
    fn try_enter(self: &Arc<Self>) -> Option<Arc<WaitPlace>> {
        let max = self.max.load(Ordering::Relaxed);
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        metrics::gauge!(WAITING).increment(1.0);
        Some(Arc::new(WaitPlace {
            queue: Arc::clone(self),
            held: AtomicBool::new(true),
        }))
    }
}

/// One place in a [`WaitQueue`], given back after the wait (or when dropped).
#[derive(Debug)]
struct WaitPlace {
    queue: Arc<WaitQueue>,
    held: AtomicBool,
}

impl WaitPlace {
    fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            self.queue.waiting.fetch_sub(1, Ordering::AcqRel);
            metrics::gauge!(WAITING).decrement(1.0);
        }
    }
}

impl Drop for WaitPlace {
    fn drop(&mut self) {
        self.release();
    }
}

/// [`Timer`] on the tokio runtime, for [`Decider::with_timeout`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioTimer;

impl Timer for TokioTimer {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Where [`RateLimiter::key_request`] got: decided without the store, or a key to check.
enum Keyed<'r> {
    Decided(Option<RateLimitDecision>),
    Check(&'r Route, ClientKey),
}

/// What a key is formed from, besides the fields: the normal path, the query, the client.
struct Keying<'a> {
    path: &'a str,
    query: Option<&'a str>,
    client_ip: IpAddr,
}

impl<'a> Keying<'a> {
    fn inputs<H: HeaderLookup + ?Sized>(
        &self,
        headers: &'a H,
        identity: &'a ClientIdentity,
    ) -> KeyInputs<'a, H> {
        KeyInputs {
            headers,
            query: self.query,
            client_ip: self.client_ip,
            identity,
        }
    }
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("decider", &self.decider)
            .field("routes", &self.routes)
            .field("identity", &self.identity)
            .field("header_sets", &self.header_sets)
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    /// Starts a builder (policies and routes in code, or from specs).
    pub fn builder(store: Arc<dyn Store>) -> RateLimiterBuilder {
        RateLimiterBuilder::new(store)
    }

    /// A limiter from parts that are already validated (the server's configuration),
    /// deciding through `decider` (its store, timeout and observer).
    pub fn new(
        decider: Decider,
        routes: RouteTable,
        identity: ClientIdentity,
        header_sets: Vec<HeaderSet>,
    ) -> RateLimiter {
        let header_sets: Arc<[HeaderSet]> = header_sets.into();
        let unrouted = Arc::new(DecisionParts {
            route_path: Arc::from(""),
            fields: None,
            store: Arc::clone(decider.store()),
            header_sets: Arc::clone(&header_sets),
            pool: None,
            after: None,
        });
        let mut limiter = RateLimiter {
            decider,
            routes,
            identity,
            header_sets,
            extractor: None,
            last_store_warning: AtomicU64::new(0),
            parts: Vec::new(),
            unrouted,
            wait_queue: None,
            access: AccessList::default(),
        };
        limiter.parts = limiter.route_parts(&[]);
        limiter
    }

    /// Each route's [`DecisionParts`], by route index, with its pool among `pools`.
    fn route_parts(&self, pools: &[Option<PoolBinding>]) -> Vec<Arc<DecisionParts>> {
        let mut parts = vec![Arc::clone(&self.unrouted); self.routes.routes().len()];
        for route in self.routes.routes() {
            if let Some(slot) = parts.get_mut(route.index()) {
                let pool = pools.get(route.index()).cloned().flatten();
                *slot = Arc::new(self.new_parts(route, pool));
            }
        }
        parts
    }

    fn new_parts(&self, route: &Route, pool: Option<PoolBinding>) -> DecisionParts {
        DecisionParts {
            route_path: Arc::clone(route.path_arc()),
            fields: Some(Arc::clone(route.fields())),
            store: Arc::clone(self.decider.store()),
            header_sets: Arc::clone(&self.header_sets),
            pool,
            after: route.after().cloned(),
        }
    }

    /// Sets the server-wide allow and deny lists (see [`AccessList`]).
    pub fn with_access(mut self, access: AccessList) -> RateLimiter {
        self.access = access;
        self
    }

    /// The server-wide allow and deny lists.
    pub fn access(&self) -> &AccessList {
        &self.access
    }

    /// Bounds the delayed requests waiting at once (default: no bound).
    pub fn with_wait_queue(mut self, queue: Arc<WaitQueue>) -> RateLimiter {
        self.wait_queue = Some(queue);
        self
    }

    /// Replaces the key extractor (default: [`RouteKey`](crate::RouteKey), the route's `key`).
    pub fn with_key_extractor(mut self, extractor: Arc<dyn KeyExtractor>) -> RateLimiter {
        self.extractor = Some(extractor);
        self
    }

    /// Resolves every route's `pool` among `pools`; admitted requests of those routes then
    /// wait for a slot with [`RateLimitDecision::enter_pool`].
    pub fn with_pools(mut self, pools: &[Arc<Pool>]) -> Result<RateLimiter, PoolBindError> {
        for (i, pool) in pools.iter().enumerate() {
            if pools[..i].iter().any(|p| p.name() == pool.name()) {
                return Err(PoolBindError::DuplicatePool(pool.name().to_owned()));
            }
        }
        let mut bindings = vec![None; self.routes.routes().len()];
        for route in self.routes.routes() {
            if let Some(binding) = bindings.get_mut(route.index()) {
                *binding = PoolBinding::resolve(route, pools)?;
            }
        }
        self.parts = self.route_parts(&bindings);
        Ok(self)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        self.decider.store()
    }
    /// The routes.
    pub fn routes(&self) -> &RouteTable {
        &self.routes
    }
    /// How client IPs are found.
    pub fn identity(&self) -> &ClientIdentity {
        &self.identity
    }
    /// The header sets written on responses.
    pub fn header_sets(&self) -> &[HeaderSet] {
        &self.header_sets
    }

    /// Decides one request: `None` when no route matches, the key extractor declines, or
    /// the client is on an allow list; else a decision that consumed from the store if it
    /// admits the request. A client on a deny list gets a refused decision whose
    /// [`rejection`](RateLimitDecision::rejection) is `403 forbidden`.
    ///
    /// `target` is the path, optionally followed by `?` and the query (which only
    /// `query:<name>` keys read). `peer` is the TCP peer; forwarded headers count only when
    /// it is a trusted proxy.
    pub async fn check(
        &self,
        method: &Method,
        target: &str,
        headers: &HeaderMap,
        peer: IpAddr,
    ) -> Option<RateLimitDecision> {
        let keyed = self.key_request(method, target, headers, peer, |route, request| {
            self.header_map_key(method, headers, peer, route, request)
        });
        match keyed {
            Keyed::Decided(decision) => decision,
            Keyed::Check(route, key) => Some(self.check_keyed(route, key).await),
        }
    }

    /// [`check`](Self::check) without a future, for a caller that decides in a
    /// synchronous function (the tower layer's `Service::call`): the decision when the
    /// store answers at once (the in-memory one, [`Store::check_immediate`]), else
    /// [`CheckNow::Later`], having consumed nothing, and the caller then awaits
    /// [`check`](Self::check) (which finds the route and forms the key again). A route with
    /// a delay-mode policy under a `max_waiting` bound is always `Later`: refusing a
    /// request when the queue is full gives its turn back to the store, which may wait.
    pub fn check_now(
        &self,
        method: &Method,
        target: &str,
        headers: &HeaderMap,
        peer: IpAddr,
    ) -> CheckNow {
        let keyed = self.key_request(method, target, headers, peer, |route, request| {
            self.header_map_key(method, headers, peer, route, request)
        });
        match keyed {
            Keyed::Decided(None) => CheckNow::Unlimited,
            Keyed::Decided(Some(decision)) => CheckNow::Decided(decision),
            Keyed::Check(route, key) => match self.check_key_now(route, key) {
                Some(decision) => CheckNow::Decided(decision),
                None => CheckNow::Later,
            },
        }
    }

    /// The key of a request with a `HeaderMap`: the route's, or the custom extractor's.
    fn header_map_key(
        &self,
        method: &Method,
        headers: &HeaderMap,
        peer: IpAddr,
        route: &Route,
        request: &Keying<'_>,
    ) -> Option<ClientKey> {
        let Some(extractor) = &self.extractor else {
            return Some(route_key_of(
                route.key(),
                &request.inputs(headers, &self.identity),
            ));
        };
        let context = KeyContext {
            method,
            path: request.path,
            query: request.query,
            headers,
            peer,
            client_ip: request.client_ip,
            identity: &self.identity,
        };
        extractor.key(route, &context).map(ClientKey::from)
    }

    /// [`check`](Self::check) for a request whose head was parsed from bytes: the same
    /// decision, read off its field lines without building a `HeaderMap` (route conditions,
    /// the client's address and the key go through [`HeaderLookup`], written once for
    /// both). A custom [`KeyExtractor`] reads a `HeaderMap`: with one, the map is built.
    pub async fn check_fields(
        &self,
        method: &Method,
        target: &str,
        fields: FieldLines<'_, '_>,
        peer: IpAddr,
    ) -> Option<RateLimitDecision> {
        if self.extractor.is_some() {
            return self
                .check(method, target, &fields.to_header_map(), peer)
                .await;
        }
        let keyed = self.key_request(method, target, &fields, peer, |route, request| {
            Some(route_key_of(
                route.key(),
                &request.inputs(&fields, &self.identity),
            ))
        });
        match keyed {
            Keyed::Decided(decision) => decision,
            Keyed::Check(route, key) => Some(self.check_keyed(route, key).await),
        }
    }

    /// What [`check`](Self::check) and [`check_fields`](Self::check_fields) share before the
    /// store: the route, the access lists, the key (`key`, given the route and the request).
    fn key_request<'s, H: HeaderLookup + ?Sized>(
        &'s self,
        method: &Method,
        target: &str,
        headers: &H,
        peer: IpAddr,
        key: impl FnOnce(&Route, &Keying<'_>) -> Option<ClientKey>,
    ) -> Keyed<'s> {
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        // One normal form for routes and key extractors alike (see `crate::path`).
        let path = crate::path::normalize_path(path);
        let route = self.routes.find_normal(method, &path, headers);
        let addr = self.identity.client_addr(peer, headers);
        match self.access.judge(addr, route.and_then(Route::access)) {
            Access::Limited => {}
            Access::Allowed => {
                metrics::counter!(ACCESS_TOTAL, "list" => "allow").increment(1);
                return Keyed::Decided(None);
            }
            Access::Denied => {
                metrics::counter!(ACCESS_TOTAL, "list" => "deny").increment(1);
                return Keyed::Decided(Some(self.forbidden(route, addr)));
            }
        }
        let Some(route) = route else {
            return Keyed::Decided(None);
        };
        let request = Keying {
            path: &path,
            query,
            client_ip: self.identity.mask(addr),
        };
        let Some(mut key) = key(route, &request) else {
            return Keyed::Decided(None);
        };
        if check_key(&key).is_err() {
            key = self.identity.client_key(request.client_ip);
        }
        Keyed::Check(route, key)
    }

    /// The decision for a client on a deny list: nothing asked of the store.
    fn forbidden(&self, route: Option<&Route>, addr: IpAddr) -> RateLimitDecision {
        RateLimitDecision {
            verdict: Verdict {
                allowed: false,
                delay: 0,
                decisions: Default::default(),
                at: 0,
            },
            key: self.identity.client_key(self.identity.mask(addr)),
            // A refused client gets no rate-limit headers, waits in no pool and settles
            // nothing: of the route's parts only its path is read.
            parts: route.map_or_else(|| Arc::clone(&self.unrouted), |r| self.parts_of(r)),
            wait_place: None,
            forbidden: true,
            cost: COST,
        }
    }

    /// Decides a request on `route` for an already formed client `key` (1 to 1024 bytes:
    /// the stores refuse others, and that refusal is handled like a store failure).
    pub async fn check_key(&self, route: &Route, key: String) -> RateLimitDecision {
        self.check_keyed(route, ClientKey::from(key)).await
    }

    /// [`check_key`](Self::check_key) for a key as the decision holds it.
    async fn check_keyed(&self, route: &Route, key: ClientKey) -> RateLimitDecision {
        let policies = route.policies();
        let request = CheckRequest::new(policies, &key, route.cost());
        let decided = self.decider.check_unobserved(request).await;
        let mut verdict = self.settled(policies, decided);
        let mut wait_place = None;
        if verdict.allowed && verdict.delay > 0 {
            match self.wait_queue.as_ref().map(WaitQueue::try_enter) {
                Some(None) => {
                    self.reject_queue_full(&mut verdict, &key, route.cost())
                        .await
                }
                Some(place) => wait_place = place,
                None => {}
            }
        }
        self.conclude(route, key, verdict, wait_place)
    }

    /// [`check_key`](Self::check_key) when the store answers at once and no wait queue can
    /// refuse the request; `None`, having consumed nothing, otherwise.
    fn check_key_now(&self, route: &Route, key: ClientKey) -> Option<RateLimitDecision> {
        let policies = route.policies();
        // Only a delay-mode policy delays (an override keeps the policy's mode).
        if self.wait_queue.is_some() && policies.iter().any(|p| p.delay_budget().is_some()) {
            return None;
        }
        let request = CheckRequest::new(policies, &key, route.cost());
        let decided = self.decider.check_now_unobserved(request)?;
        let verdict = self.settled(policies, decided);
        Some(self.conclude(route, key, verdict, None))
    }

    /// The verdict of a store's answer: the caller's mistakes (a key the stores refuse) are
    /// answered like a store failure (an HTTP client must never see a 500 for them); errors
    /// of the configuration or the code fail closed (`Verdict::store_error`): they must
    /// never open the gate.
    fn settled(
        &self,
        policies: &[Arc<Policy>],
        decided: Result<sluicegate_core::Decided, StoreError>,
    ) -> Verdict {
        // Matched apart, not made one `Decided` first: the usual answer's verdict is then
        // moved out once (each move of it is a `memcpy` call).
        match decided {
            Ok(sluicegate_core::Decided {
                verdict,
                failure: None,
            }) => verdict,
            Ok(sluicegate_core::Decided {
                verdict,
                failure: Some(error),
            }) => {
                self.warn_store_error(&error);
                verdict
            }
            Err(error) => {
                self.warn_store_error(&error);
                if error.is_bad_request() {
                    Verdict::store_failed(policies)
                } else {
                    Verdict::store_error(policies, &error)
                }
            }
        }
    }

    /// Observes the final verdict (once the wait queue has had its say: a delayed request
    /// refused by max_waiting counts as denied, not delayed) and makes the decision.
    fn conclude(
        &self,
        route: &Route,
        key: ClientKey,
        verdict: Verdict,
        wait_place: Option<Arc<WaitPlace>>,
    ) -> RateLimitDecision {
        self.decider.observe(&key, &verdict);
        for d in &verdict.decisions {
            if d.outcome == Outcome::ShadowDenied {
                tracing::info!(
                    policy = d.policy.name(),
                    key = %crate::identity::key_hint(&key),
                    route = route.path(),
                    "shadow mode: request would have been rejected"
                );
            }
        }
        RateLimitDecision {
            verdict,
            key,
            parts: self.parts_of(route),
            wait_place,
            forbidden: false,
            cost: route.cost(),
        }
    }

    /// `route`'s [`DecisionParts`]: one reference count.
    fn parts_of(&self, route: &Route) -> Arc<DecisionParts> {
        match self.parts.get(route.index()) {
            Some(parts) if Arc::ptr_eq(&parts.route_path, route.path_arc()) => Arc::clone(parts),
            // A route of another table ([`RateLimiter::check_key`] is public): made for
            // this decision, without a pool (pools are bound to this table's routes).
            _ => Arc::new(self.new_parts(route, None)),
        }
    }

    /// The wait queue is full: give back what the request took and deny it, with the wait
    /// it would have had as its `retry_after`.
    async fn reject_queue_full(&self, verdict: &mut Verdict, key: &str, cost: u64) {
        let consumed: Vec<Arc<Policy>> = verdict
            .decisions
            .iter()
            .filter(|d| d.decision.allowed)
            .map(|d| Arc::clone(&d.policy))
            .collect();
        metrics::counter!(MAX_WAITING_REJECTED).increment(1);
        if let Err(error) = self.decider.store().refund(&consumed, key, cost).await {
            tracing::debug!(%error, "could not give back the turn of a request refused by max_waiting");
        }
        for d in &mut verdict.decisions {
            if d.decision.delay > 0 {
                d.decision.allowed = false;
                d.decision.retry_after = Some(d.decision.delay.max(1));
                d.decision.delay = 0;
                d.outcome = Outcome::Denied;
            }
        }
        verdict.allowed = false;
        verdict.delay = 0;
    }

    /// One warning a second at most: a dead store must not flood the log.
    fn warn_store_error(&self, error: &StoreError) {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let now = START.get_or_init(Instant::now).elapsed().as_secs() + 1;
        let last = self.last_store_warning.load(Ordering::Relaxed);
        if now > last
            && self
                .last_store_warning
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            if error.is_outage() {
                tracing::warn!(store = self.decider.store().kind(), %error, "rate-limit store failed; on_store_error applies");
            } else {
                tracing::error!(store = self.decider.store().kind(), %error, "rate-limit store could not decide; failing closed");
            }
        }
    }
}

/// What [`RateLimiter::check_now`] decided without waiting.
#[derive(Debug)]
pub enum CheckNow {
    /// No limit applies: no route matched, the key extractor declined, or the client is
    /// on an allow list.
    Unlimited,
    /// Decided (and counted, if admitted).
    Decided(RateLimitDecision),
    /// The store answers only through a future: nothing was consumed; await
    /// [`RateLimiter::check`].
    Later,
}

/// Every HTTP request weighs one.
const COST: u64 = 1;

/// What the limiter decided for one request. It has already been counted and observed.
///
/// Admitted: possibly [`wait`](Self::wait) (delay mode), forward the request, then
/// [`write_headers`](Self::write_headers) on the response. Rejected: answer with
/// [`rejection`](Self::rejection).
#[derive(Clone)]
pub struct RateLimitDecision {
    verdict: Verdict,
    key: ClientKey,
    parts: Arc<DecisionParts>,
    wait_place: Option<Arc<WaitPlace>>,
    forbidden: bool,
    /// The route's cost, charged on arrival.
    cost: u64,
}

/// What every decision on one route refers to, made when the limiter is built: a decision
/// clones one `Arc` instead of one per part (each clone and drop is a locked instruction
/// pair; five of them a request were measured in docs/benchmarks/middleware.md).
struct DecisionParts {
    route_path: Arc<str>,
    /// The route's pre-rendered header values (`None` when no route matched).
    fields: Option<Arc<headers::RouteFields>>,
    store: Arc<dyn Store>,
    header_sets: Arc<[HeaderSet]>,
    pool: Option<PoolBinding>,
    /// The route's `settle` and `count`, when it has any.
    after: Option<Arc<crate::AfterResponse>>,
}

impl std::fmt::Debug for RateLimitDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitDecision")
            .field("verdict", &self.verdict)
            .field("key", &self.key)
            .field("route", &self.parts.route_path)
            .finish_non_exhaustive()
    }
}

impl RateLimitDecision {
    /// Whether the request may go ahead (after [`delay`](Self::delay)).
    pub fn is_allowed(&self) -> bool {
        self.verdict.allowed
    }
    /// Whether an admitted request goes ahead at once: no wait (delay mode), no pool.
    pub(crate) fn answers_at_once(&self) -> bool {
        self.verdict.delay == 0 && self.parts.pool.is_none()
    }
    /// Whether the client is on a deny list (the verdict then has no decisions).
    pub fn is_forbidden(&self) -> bool {
        self.forbidden
    }
    /// How long the request must wait for its reserved turn (delay mode).
    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.verdict.delay)
    }
    /// The store's verdict, one entry per policy.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }
    /// The client key the request was counted under.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The path prefix of the route that matched.
    pub fn route_path(&self) -> &str {
        &self.parts.route_path
    }
    /// The guard over the leases this admitted request holds on concurrency policies:
    /// keep it until the response has been sent (wrap the body in a
    /// [`LeaseBody`](crate::LeaseBody)); dropping it frees the leases. `None` when the
    /// request holds no lease.
    pub fn lease_guard(&self) -> Option<crate::LeaseGuard> {
        let leases = self.verdict.leases(&self.key, self.cost);
        // No store clone (a reference count up and down) for the usual request: no lease.
        if leases.is_empty() {
            return None;
        }
        crate::LeaseGuard::new(Arc::clone(&self.parts.store), leases)
    }

    /// What to do once the upstream has answered (the route's `settle` and `count`):
    /// call [`Settler::on_head`](crate::Settler::on_head) with the response head and wrap
    /// the body with the returned tap ([`LeaseBody::with_tap`](crate::LeaseBody::with_tap)).
    /// `None` when the route has no such rule or nothing was consumed.
    pub fn after_response(&self) -> Option<(crate::Settler, Arc<crate::AfterResponse>)> {
        let after = self.parts.after.as_ref()?;
        let settler = crate::Settler::of(
            Arc::clone(&self.parts.store),
            &self.verdict,
            &self.key,
            self.cost,
        )?;
        Some((settler, Arc::clone(after)))
    }
    /// `Retry-After` in whole seconds (at least 1) when rejected.
    pub fn retry_after_secs(&self) -> Option<u64> {
        headers::retry_after_secs(&self.verdict)
    }

    /// The route's `RateLimit-Policy` value, rendered when the limiter was built (`None`
    /// when no route matched or one of its policies is on a calendar): what
    /// [`write_headers`](Self::write_headers) writes, for a caller that writes the fields
    /// as bytes instead (the gateway's lean HTTP/1.1 path).
    pub fn policy_field(&self) -> Option<&http::HeaderValue> {
        self.parts.fields.as_ref().and_then(|f| f.policy_field())
    }

    /// Writes the configured rate-limit headers (and `Retry-After` on a rejection).
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        if self.forbidden {
            return;
        }
        let sets = &self.parts.header_sets;
        match &self.parts.fields {
            Some(fields) => headers::write_route_headers(sets, &self.verdict, fields, headers),
            None => headers::write_headers(sets, &self.verdict, headers),
        }
    }

    /// The 429 response: JSON body, `Retry-After`, rate-limit headers.
    pub fn rejection(&self) -> Response<Full<Bytes>> {
        self.rejection_with_status(StatusCode::TOO_MANY_REQUESTS)
    }

    /// The rejection with another status (forward-auth for nginx needs 401 or 403). A
    /// client on a deny list is always answered `403 forbidden`.
    pub fn rejection_with_status(&self, status: StatusCode) -> Response<Full<Bytes>> {
        if self.forbidden {
            return headers::forbidden_response();
        }
        headers::rejection_response(&self.parts.header_sets, &self.verdict, status)
    }

    /// Waits for the route's pool slot (after [`wait`](Self::wait)): `Ok(None)` when the
    /// route has no pool, `Ok(permit)` to hold while the upstream works (wrap the response
    /// body in a [`PermitBody`](crate::PermitBody), which frees it when the body ends, or
    /// call [`PoolPermit::complete`] after a complete response), or the pool's 429 ([`PoolRejected::response`]). Cancel-safe:
    /// dropping the future leaves the queue at once.
    pub async fn enter_pool(&self) -> Result<Option<PoolPermit>, PoolRejected> {
        match &self.parts.pool {
            Some(binding) if self.verdict.allowed => binding.acquire(&self.key).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Waits for the request's reserved turn (delay mode; returns at once otherwise)
    /// without holding a thread. If the future is dropped before the turn comes (the
    /// client went away), what the request took is given back with [`Store::refund`], in a
    /// spawned task, so the turn goes to the next request.
    pub async fn wait(&self) {
        if self.verdict.delay == 0 || !self.verdict.allowed {
            return;
        }
        let consumed: Vec<Arc<Policy>> = self
            .verdict
            .decisions
            .iter()
            // A concurrency lease is freed by its own guard (see `lease_guard`), not refunded.
            .filter(|d| d.decision.allowed && !d.policy.algorithm().is_concurrency())
            .map(|d| Arc::clone(&d.policy))
            .collect();
        let mut guard = RefundGuard {
            refund: Some(Refund {
                store: Arc::clone(&self.parts.store),
                policies: consumed,
                key: String::from(&*self.key),
                cost: self.cost,
            }),
        };
        tokio::time::sleep(self.delay()).await;
        guard.refund = None;
        if let Some(place) = &self.wait_place {
            place.release();
        }
    }
}

/// Gives a cancelled delayed request's turn back when dropped armed.
struct RefundGuard {
    refund: Option<Refund>,
}

struct Refund {
    store: Arc<dyn Store>,
    policies: Vec<Arc<Policy>>,
    key: String,
    cost: u64,
}

impl Drop for RefundGuard {
    fn drop(&mut self) {
        let Some(Refund {
            store,
            policies,
            key,
            cost,
        }) = self.refund.take()
        else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Err(error) = store.refund(&policies, &key, cost).await {
                tracing::debug!(%error, key = %crate::identity::key_hint(&key), "could not refund a cancelled delayed request");
            }
        });
    }
}
