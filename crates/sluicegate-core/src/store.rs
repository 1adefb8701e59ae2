//! The one trait every store implements: the in-memory store here, Redis in
//! `sluicegate-redis`. Callers (middleware, server, Envoy service) see only [`Store`].
//!
//! The trait is dyn-compatible (boxed futures, no runtime named) so a server can pick its
//! store from configuration and hold an `Arc<dyn Store>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::overrides::Override;
use crate::policy::Policy;
use crate::verdict::Verdict;

/// A boxed, `Send` future, as returned by [`Store`] methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Longest client key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The one key rule: 1 to [`MAX_KEY_LEN`] bytes. Every store, the middleware, the decision
/// API and the simulator's trace reader apply this function, never their own comparison.
///
/// ```
/// use sluicegate_core::store::{MAX_KEY_LEN, check_key};
/// assert!(check_key("203.0.113.7").is_ok());
/// assert!(check_key("").is_err());
/// assert!(check_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
/// ```
#[inline]
pub fn check_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(StoreError::InvalidKey(key.len()));
    }
    Ok(())
}

/// The one cost rule: a request's cost is within each policy's capacity (a larger one
/// could never be admitted).
#[inline]
pub(crate) fn check_cost(policy: &Policy, cost: u64) -> Result<(), StoreError> {
    // A built policy's capacity is at least 1 (`rule::limit`, `rule::burst`), so the usual
    // cost, 1, passes without computing it (which depends on the algorithm).
    debug_assert!(policy.capacity() >= 1, "a policy of capacity 0");
    if cost > 1 && cost > policy.capacity() {
        return Err(cost_over_capacity(policy, cost));
    }
    Ok(())
}

/// The error of [`check_cost`], out of line.
#[cold]
fn cost_over_capacity(policy: &Policy, cost: u64) -> StoreError {
    StoreError::CostOverCapacity {
        policy: policy.name().to_owned(),
        cost,
        capacity: policy.capacity(),
    }
}

/// Names of the metrics every store records, whatever records them (the Redis store
/// times its own calls; the server wraps the in-memory one).
pub mod metric {
    /// `sluicegate_store_duration_seconds`: time of one store call (histogram, label `store`).
    pub const STORE_DURATION: &str = "sluicegate_store_duration_seconds";
    /// `sluicegate_store_errors_total`: store calls that failed or timed out (label `store`).
    pub const STORE_ERRORS: &str = "sluicegate_store_errors_total";
}

/// One request to decide: a client key under one or more policies.
#[derive(Debug, Clone, Copy)]
pub struct CheckRequest<'a> {
    /// The policies that must all admit (all-or-nothing).
    pub policies: &'a [Arc<Policy>],
    /// The client key, e.g. an IP address or an API key.
    pub key: &'a str,
    /// The request's weight; 0 reads without consuming.
    pub cost: u64,
}

impl<'a> CheckRequest<'a> {
    /// A request of `cost` for `key` under `policies`.
    pub fn new(policies: &'a [Arc<Policy>], key: &'a str, cost: u64) -> Self {
        CheckRequest {
            policies,
            key,
            cost,
        }
    }

    /// Checks what the caller controls before any store is touched.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use sluicegate_core::{AlgorithmKind, CheckRequest, Policy, StoreError};
    /// let p = Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 5, Duration::from_secs(1)).build().unwrap());
    /// let policies = [p];
    /// assert!(CheckRequest::new(&policies, "k", 5).validate().is_ok());
    /// assert!(matches!(
    ///     CheckRequest::new(&policies, "k", 6).validate(),
    ///     Err(StoreError::CostOverCapacity { .. })
    /// ));
    /// ```
    #[inline]
    pub fn validate(&self) -> Result<(), StoreError> {
        if self.policies.is_empty() {
            return Err(StoreError::NoPolicy);
        }
        check_key(self.key)?;
        if let [policy] = self.policies {
            // The common request, without the loop (no duplicate possible).
            return check_cost(policy, self.cost);
        }
        for (i, policy) in self.policies.iter().enumerate() {
            if self.policies[..i].iter().any(|p| p.name() == policy.name()) {
                return Err(StoreError::DuplicatePolicy(policy.name().to_owned()));
            }
            check_cost(policy, self.cost)?;
        }
        Ok(())
    }
}

/// One policy's part of a keyed check: the policy, the key its state is kept under, and the
/// cost to take from it. See [`Store::check_keyed`].
///
/// A [`CheckRequest`] puts every policy under one client key and one cost, which is what the
/// HTTP routes need. The Envoy rate limit service needs more: one request carries several
/// descriptors, each with its own key (its entry values) and possibly its own `hits_addend`,
/// and they must still be admitted all-or-nothing in one store call.
#[derive(Debug, Clone, Copy)]
pub struct KeyedCheck<'a> {
    /// The policy.
    pub policy: &'a Arc<Policy>,
    /// The key of this policy's state.
    pub key: &'a str,
    /// The cost taken from this policy; 0 reads without consuming.
    pub cost: u64,
    /// Where the state lives, for stores that shard (Redis Cluster: the hash tag). Items
    /// with one placement share a shard, so a check over several keys stays one atomic
    /// step; `None` places each key by itself. A key must always come with the same
    /// placement: a sharded store keeps the state under both.
    pub placement: Option<&'a str>,
}

impl<'a> KeyedCheck<'a> {
    /// `cost` of `policy` under `key`, placed by its key.
    pub fn new(policy: &'a Arc<Policy>, key: &'a str, cost: u64) -> Self {
        KeyedCheck {
            policy,
            key,
            cost,
            placement: None,
        }
    }

    /// The same check, placed with every other item of `placement` (see
    /// [`KeyedCheck::placement`]).
    pub fn placed(mut self, placement: &'a str) -> Self {
        self.placement = Some(placement);
        self
    }

    /// Checks what the caller controls before any store is touched: at least one item,
    /// valid keys, each policy at most once, and every cost within its policy's capacity.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use sluicegate_core::{AlgorithmKind, KeyedCheck, Policy, StoreError};
    /// let p = Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 5, Duration::from_secs(1)).build().unwrap());
    /// let q = Arc::new(Policy::builder("q", AlgorithmKind::Gcra, 5, Duration::from_secs(1)).build().unwrap());
    /// assert!(KeyedCheck::validate_all(&[KeyedCheck::new(&p, "a", 1), KeyedCheck::new(&q, "b", 5)]).is_ok());
    /// assert!(matches!(
    ///     KeyedCheck::validate_all(&[KeyedCheck::new(&p, "a", 1), KeyedCheck::new(&p, "a", 1)]),
    ///     Err(StoreError::DuplicatePolicy(_))
    /// ));
    /// // The same policy under two keys is two states, decided together.
    /// assert!(KeyedCheck::validate_all(&[KeyedCheck::new(&p, "a", 1), KeyedCheck::new(&p, "b", 1)]).is_ok());
    /// ```
    pub fn validate_all(items: &[KeyedCheck<'_>]) -> Result<(), StoreError> {
        if items.is_empty() {
            return Err(StoreError::NoPolicy);
        }
        for (i, item) in items.iter().enumerate() {
            check_key(item.key)?;
            // One policy under two keys is two states (Envoy: one rule, two descriptor
            // values); under one key it would be decided twice against the same state.
            if items[..i]
                .iter()
                .any(|o| o.policy.name() == item.policy.name() && o.key == item.key)
            {
                return Err(StoreError::DuplicatePolicy(item.policy.name().to_owned()));
            }
            check_cost(item.policy, item.cost)?;
        }
        Ok(())
    }
}

/// A lease an admitted request holds on a concurrency policy: enough to free it from any
/// instance sharing the store (see [`Store::release`] and
/// [`Concurrency`](crate::algorithm::Concurrency)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The concurrency policy.
    pub policy: Arc<Policy>,
    /// The client key.
    pub key: String,
    /// When the lease expires by itself (µs since the epoch); with `cost`, names it.
    pub expires_at: crate::clock::Micros,
    /// The slots it holds.
    pub cost: u64,
}

/// A reservation being settled: the real cost of a request admitted earlier (see
/// [`Store::settle`]).
#[derive(Debug, Clone, Copy)]
pub struct Settlement<'a> {
    /// The policies the admitted request consumed from.
    pub policies: &'a [Arc<Policy>],
    /// Each policy's `remaining` right after admission (same order; see
    /// [`Admitted::remaining`](crate::algorithm::Admitted::remaining)).
    pub remaining: &'a [u64],
    /// The client key.
    pub key: &'a str,
    /// The cost taken at admission.
    pub estimate: u64,
    /// The real cost.
    pub real: u64,
    /// When the request was admitted, by the store's clock ([`Verdict::at`]).
    pub admitted_at: crate::clock::Micros,
    /// After this (store's clock) the reservation can no longer be settled.
    pub expires_at: crate::clock::Micros,
    /// Names the reservation: a store settles one id once, until `expires_at`. Empty: no
    /// one-time marker is kept (for callers that settle once by construction, like the
    /// gateway and the tower layer settling a response's real cost).
    pub id: &'a str,
}

/// What became of a [`Settlement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The real cost is now in every policy.
    Done,
    /// This reservation was settled before: nothing changed.
    Replayed,
    /// Its time has passed: nothing changed.
    Expired,
}

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The cost can never be admitted: it is over the policy's burst (buckets) or limit (windows).
    #[error("cost {cost} can never be admitted by policy {policy:?}, whose capacity is {capacity}")]
    CostOverCapacity {
        /// The policy.
        policy: String,
        /// The requested cost.
        cost: u64,
        /// Its capacity.
        capacity: u64,
    },
    /// The request names no policy.
    #[error("the request names no policy")]
    NoPolicy,
    /// The same policy twice in one request.
    #[error("policy {0:?} is listed twice")]
    DuplicatePolicy(String),
    /// Empty or over [`MAX_KEY_LEN`] bytes.
    #[error("key must be 1 to 1024 bytes, got {0}")]
    InvalidKey(usize),
    /// The store did not answer within its timeout.
    #[error("store timed out")]
    Timeout,
    /// The store is unreachable or cannot decide right now (the circuit may be open; Redis
    /// answered OOM, READONLY, LOADING, BUSY, MASTERDOWN, CLUSTERDOWN…): an outage.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store cannot decide this request exactly, whatever its health (a policy beyond
    /// its exact range, several keys where it has no atomic step): an error of the
    /// configuration, refused at load time where it can be. Never an outage.
    #[error("store cannot decide this: {0}")]
    Unsupported(String),
    /// Something this program got wrong (an unexpected reply, a broken script). Never an
    /// outage: it fails closed rather than open.
    #[error("internal store error: {0}")]
    Internal(String),
}

impl StoreError {
    /// Whether the store is down, slow or refusing to serve for now, so each policy's
    /// `on_store_error` decides ([`Verdict::store_failed`]). Errors of the caller
    /// ([`StoreError::is_bad_request`]), of the configuration or of the code are not
    /// outages: they must never fail open.
    ///
    /// ```
    /// use sluicegate_core::StoreError;
    /// assert!(StoreError::Timeout.is_outage());
    /// assert!(StoreError::Unavailable("OOM".into()).is_outage());
    /// assert!(!StoreError::Internal("bad reply".into()).is_outage());
    /// assert!(!StoreError::Unsupported("out of range".into()).is_outage());
    /// assert!(!StoreError::NoPolicy.is_outage());
    /// ```
    pub fn is_outage(&self) -> bool {
        matches!(self, StoreError::Timeout | StoreError::Unavailable(_))
    }

    /// Whether the caller's request was at fault (a 400), rather than the store (fail open/closed).
    pub fn is_bad_request(&self) -> bool {
        matches!(
            self,
            StoreError::CostOverCapacity { .. }
                | StoreError::NoPolicy
                | StoreError::DuplicatePolicy(_)
                | StoreError::InvalidKey(_)
        )
    }
}

/// Where limiter state lives. Every method is atomic per request: a verdict over several
/// policies is all-or-nothing (see [`Verdict::combine`]).
pub trait Store: Send + Sync + 'static {
    /// Decides and, if admitted, consumes.
    fn check<'a>(&'a self, request: CheckRequest<'a>)
    -> BoxFuture<'a, Result<Verdict, StoreError>>;

    /// [`Store::check`] answered on the caller's thread, without a future, by a store that
    /// never waits (the in-memory one); `None`, having done nothing, from a store that may
    /// wait, which the caller then asks through [`Store::check`]. What it saves is the
    /// boxed future (an allocation and a free a decision). Wrappers forward it.
    fn check_immediate(&self, _request: CheckRequest<'_>) -> Option<Result<Verdict, StoreError>> {
        None
    }

    /// Decides many independent requests; the results are in request order. Stores that can
    /// (Redis) send them in one round trip.
    fn check_batch<'a>(
        &'a self,
        requests: &'a [CheckRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<Verdict, StoreError>>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(requests.len());
            for request in requests {
                out.push(self.check(*request).await);
            }
            out
        })
    }

    /// Decides and, if admitted, consumes, like [`Store::check`], but each policy with its own
    /// key and cost: all-or-nothing over every item (a denial consumes from none), in one
    /// atomic step. The verdict's decisions are in item order.
    ///
    /// The default implementation handles items that share one key and one cost (by
    /// [`Store::check`]) and answers [`StoreError::Unsupported`] otherwise; stores that can
    /// do better override it (the in-memory store does).
    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async move {
            KeyedCheck::validate_all(items)?;
            let first = items[0];
            if items
                .iter()
                .any(|i| i.key != first.key || i.cost != first.cost)
            {
                return Err(StoreError::Unsupported(format!(
                    "the {} store cannot check several keys in one atomic step",
                    self.kind()
                )));
            }
            let policies: Vec<Arc<Policy>> = items.iter().map(|i| Arc::clone(i.policy)).collect();
            self.check(CheckRequest::new(&policies, first.key, first.cost))
                .await
        })
    }

    /// [`Store::refund`] for keyed items (each item's cost given back under its key and
    /// placement). The default gives back item by item, ignoring placement; a sharded store
    /// that honours placement in [`Store::check_keyed`] overrides it.
    fn refund_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            for item in items {
                self.refund(std::slice::from_ref(item.policy), item.key, item.cost)
                    .await?;
            }
            Ok(())
        })
    }

    /// Gives back what an admitted request of `cost` took (a delayed request that was
    /// cancelled before its turn came), where the algorithm allows it.
    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Frees leases taken by admitted requests on concurrency policies, when the request
    /// ends. A lease already freed or expired is not an error: nothing changes. Each lease
    /// is freed atomically; several are independent.
    ///
    /// The default answers [`StoreError::Unavailable`]: a store must implement it to hold
    /// concurrency policies (both stores of this project do).
    fn release<'a>(&'a self, leases: &'a [Lease]) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = leases;
        Box::pin(std::future::ready(Err(StoreError::Unavailable(format!(
            "the {} store cannot release leases",
            self.kind()
        )))))
    }

    /// Sets the real cost of an admitted request in every policy it consumed from (see
    /// [`Algorithm::settle`](crate::algorithm::Algorithm::settle) for what that means per
    /// algorithm), once per [`Settlement::id`], atomically with marking the id settled.
    ///
    /// The default answers [`StoreError::Unsupported`].
    fn settle<'a>(
        &'a self,
        settlement: Settlement<'a>,
    ) -> BoxFuture<'a, Result<Settled, StoreError>> {
        let _ = settlement;
        Box::pin(std::future::ready(Err(StoreError::Unsupported(format!(
            "the {} store cannot settle reservations",
            self.kind()
        )))))
    }

    /// Forgets a key's state under one policy.
    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Sets (`Some`) or removes (`None`) `key`'s own numbers under `policy` (see
    /// [`crate::overrides`]). Every instance sharing the store decides with them from its
    /// next decision on; the key keeps what it has used. The caller has checked the
    /// override against the policy ([`crate::OverrideSpec::parse`]).
    ///
    /// The default answers [`StoreError::Unsupported`].
    fn set_override<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = (policy, key, value);
        Box::pin(std::future::ready(Err(StoreError::Unsupported(format!(
            "the {} store keeps no per-key overrides",
            self.kind()
        )))))
    }

    /// [`Store::set_override`] for a key that is also checked placed under `placement`
    /// ([`KeyedCheck::placement`]; the Envoy service places its keys by domain): the
    /// override must hold for the placed checks as well as the unplaced ones. The default
    /// is [`Store::set_override`]: a store that finds a key's override whatever its
    /// placement (the in-memory store) needs nothing more; a store wrapping another must
    /// forward it.
    fn set_override_placed<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        placement: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = placement;
        self.set_override(policy, key, value)
    }

    /// The override of `key` under `policy`, if one is set. The default: none.
    fn get_override<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Override>, StoreError>> {
        let _ = (policy, key);
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Whether the store answers (for `/readyz`).
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Keys currently tracked, where the store knows cheaply (the in-memory store, which
    /// counts (policy, key) states: a key under three policies counts three, as `max_keys`
    /// does).
    fn tracked_keys(&self) -> Option<u64> {
        None
    }

    /// Bytes of limiter state held, where the store counts them (the in-memory store, whose
    /// `max_memory` bounds this number).
    fn tracked_bytes(&self) -> Option<u64> {
        None
    }

    /// A short name for logs: `memory`, `redis`, `redis-cluster`.
    fn kind(&self) -> &'static str;
}

impl<S: Store + ?Sized> Store for Arc<S> {
    fn check<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        (**self).check(request)
    }
    fn check_immediate(&self, request: CheckRequest<'_>) -> Option<Result<Verdict, StoreError>> {
        (**self).check_immediate(request)
    }
    fn check_batch<'a>(
        &'a self,
        requests: &'a [CheckRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<Verdict, StoreError>>> {
        (**self).check_batch(requests)
    }
    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        (**self).check_keyed(items)
    }
    fn refund_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).refund_keyed(items)
    }
    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).refund(policies, key, cost)
    }
    fn release<'a>(&'a self, leases: &'a [Lease]) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).release(leases)
    }
    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).reset(policy, key)
    }
    fn settle<'a>(
        &'a self,
        settlement: Settlement<'a>,
    ) -> BoxFuture<'a, Result<Settled, StoreError>> {
        (**self).settle(settlement)
    }
    fn set_override<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).set_override(policy, key, value)
    }
    fn set_override_placed<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        placement: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).set_override_placed(policy, key, placement, value)
    }
    fn get_override<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Override>, StoreError>> {
        (**self).get_override(policy, key)
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        (**self).ping()
    }
    fn tracked_keys(&self) -> Option<u64> {
        (**self).tracked_keys()
    }
    fn tracked_bytes(&self) -> Option<u64> {
        (**self).tracked_bytes()
    }
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
}
