//! [`RateLimiterBuilder`]: policies and routes in code, or from the configuration's specs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use sluicegate_core::{
    Decider, NoObserver, Policy, PolicyError, PolicySpec, Store, VerdictObserver,
};

use crate::access::AccessList;
use crate::headers::HeaderSet;
use crate::identity::{ClientIdentity, ClientIpHeader, KeyExtractor};
use crate::limiter::{RateLimiter, TokioTimer};
use crate::route::{RouteError, RouteSpec, RouteTable};

/// Why a [`RateLimiterBuilder`] could not build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A policy is invalid.
    #[error("policy {name:?}: {error}")]
    Policy {
        /// Its name.
        name: String,
        /// Why.
        error: PolicyError,
    },
    /// Two policies share a name.
    #[error("policy {0:?} is defined twice")]
    DuplicatePolicy(String),
    /// A route is invalid.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A route's pool, level or weight does not fit the pools added.
    #[error(transparent)]
    Pool(#[from] crate::pool::PoolBindError),
}

/// Builds a [`RateLimiter`].
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_core::{MemoryStore, PolicySpec};
/// use sluicegate_middleware::{HeaderSet, KeySpec, RateLimiter, RouteSpec};
///
/// let policies: Vec<PolicySpec> = serde_json::from_str(r#"[
///     {"name": "free", "algorithm": "gcra", "limit": 100, "period": "1h"},
///     {"name": "pro", "algorithm": "gcra", "limit": 10000, "period": "1h"}
/// ]"#)?;
/// let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(100_000)))
///     .policy_specs(&policies)
///     .route(RouteSpec::new("/api", &["free"]).key("header:x-api-key".parse()?))
///     .route(RouteSpec::new("/api", &["pro"]).header("x-plan", "pro").key(KeySpec::Global))
///     .trusted_proxies(vec!["10.0.0.0/8".parse()?])
///     .headers(&[HeaderSet::Ietf])
///     .build()?;
/// assert_eq!(limiter.routes().routes().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RateLimiterBuilder {
    store: Arc<dyn Store>,
    policies: Vec<Result<Policy, BuildError>>,
    routes: Vec<RouteSpec>,
    identity: ClientIdentity,
    header_sets: Vec<HeaderSet>,
    observer: Arc<dyn VerdictObserver>,
    /// `None`: the routes' own keys.
    extractor: Option<Arc<dyn KeyExtractor>>,
    store_timeout: Option<Duration>,
    pools: Vec<Arc<crate::Pool>>,
    access: AccessList,
}

impl RateLimiterBuilder {
    /// A builder on `store`, with no policy or route, no trusted proxy, IPv6 per /64,
    /// `draft-6` and `ietf` headers, and no observer.
    pub fn new(store: Arc<dyn Store>) -> Self {
        RateLimiterBuilder {
            store,
            policies: Vec::new(),
            routes: Vec::new(),
            identity: ClientIdentity::default(),
            header_sets: HeaderSet::DEFAULT.to_vec(),
            observer: Arc::new(NoObserver),
            extractor: None,
            store_timeout: None,
            pools: Vec::new(),
            access: AccessList::default(),
        }
    }

    /// Adds a pool (`[[pools]]`) that routes name with [`RouteSpec::pool`].
    pub fn pool(mut self, pool: Arc<crate::Pool>) -> Self {
        self.pools.push(pool);
        self
    }

    /// Adds a policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(Ok(policy));
        self
    }

    /// Adds policies as configured (`[[policies]]`); invalid ones fail [`build`](Self::build).
    pub fn policy_specs(mut self, specs: &[PolicySpec]) -> Self {
        self.policies.extend(specs.iter().map(|spec| {
            spec.build().map_err(|error| BuildError::Policy {
                name: spec.name.clone(),
                error,
            })
        }));
        self
    }

    /// Adds a route; routes name policies added with [`policy`](Self::policy) or
    /// [`policy_specs`](Self::policy_specs).
    pub fn route(mut self, route: RouteSpec) -> Self {
        self.routes.push(route);
        self
    }

    /// Adds routes as configured (`[[routes]]`).
    pub fn route_specs(mut self, specs: &[RouteSpec]) -> Self {
        self.routes.extend_from_slice(specs);
        self
    }

    /// Peers allowed to set `X-Forwarded-For` / `Forwarded`.
    pub fn trusted_proxies(mut self, proxies: Vec<IpNet>) -> Self {
        self.identity.trusted_proxies = proxies;
        self
    }

    /// IPv6 clients are limited per network of this many bits (default 64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.identity.ipv6_prefix = bits.min(128);
        self
    }

    /// The one header trusted proxies name the client in (default `X-Forwarded-For`).
    pub fn client_ip_header(mut self, header: ClientIpHeader) -> Self {
        self.identity.header = header;
        self
    }

    /// The whole client identity at once.
    pub fn identity(mut self, identity: ClientIdentity) -> Self {
        self.identity = identity;
        self
    }

    /// Clients never limited (`allow`) and always refused with 403 (`deny`), on every route.
    pub fn access(mut self, allow: Vec<IpNet>, deny: Vec<IpNet>) -> Self {
        self.access = AccessList::new(allow, deny);
        self
    }

    /// Which rate-limit header sets to send (default `draft-6` and `ietf`).
    pub fn headers(mut self, sets: &[HeaderSet]) -> Self {
        self.header_sets = sets.to_vec();
        self
    }

    /// Sees every decision (metrics, dashboards); see [`MetricsObserver`](crate::MetricsObserver).
    pub fn observer(mut self, observer: Arc<dyn VerdictObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Forms client keys differently from the routes' `key`.
    pub fn key_extractor(mut self, extractor: Arc<dyn KeyExtractor>) -> Self {
        self.extractor = Some(extractor);
        self
    }

    /// Bounds each store call; past it `on_store_error` decides.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = Some(timeout);
        self
    }

    /// Validates everything and builds the limiter.
    pub fn build(self) -> Result<RateLimiter, BuildError> {
        let mut policies: HashMap<String, Arc<Policy>> = HashMap::new();
        for policy in self.policies {
            let policy = policy?;
            if policies.contains_key(policy.name()) {
                return Err(BuildError::DuplicatePolicy(policy.name().to_owned()));
            }
            policies.insert(policy.name().to_owned(), Arc::new(policy));
        }
        let routes = RouteTable::new(&self.routes, |name| policies.get(name).cloned())?;
        let decider = Decider::new(self.store)
            .with_observer(self.observer)
            .with_timeout(self.store_timeout, Arc::new(TokioTimer));
        let mut limiter = RateLimiter::new(decider, routes, self.identity, self.header_sets);
        if let Some(extractor) = self.extractor {
            limiter = limiter.with_key_extractor(extractor);
        }
        Ok(limiter.with_access(self.access).with_pools(&self.pools)?)
    }
}
