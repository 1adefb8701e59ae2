//! What every handler shares: the store, the observer, and the current configuration as a
//! [`Runtime`] snapshot that a reload swaps atomically (requests in flight keep the snapshot
//! they started with).

use crate::error::ServerError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use http::HeaderValue;
use sluicegate_core::{Decider, MemoryStore, Policy, Store, VerdictObserver};
use sluicegate_middleware::headers::policy_field;
use sluicegate_middleware::{
    AccessList, ClientIdentity, HeaderSet, Pool, RateLimiter, RouteTable, WaitQueue,
};

use crate::config::Config;

/// One configuration, prepared for request handling.
#[derive(Debug)]
pub struct Runtime {
    /// The validated configuration (flags applied).
    pub config: Config,
    /// The rate-limit header sets responses carry.
    pub header_sets: Vec<HeaderSet>,
    /// The engine that forward-auth and the gateway decide requests with.
    pub limiter: Arc<RateLimiter>,
    /// The `[[pools]]` the routes send requests through.
    pub pools: Vec<Arc<Pool>>,
    /// foldhash rather than SipHash: every `/v1/check` looks a name up here, and the keys
    /// are the configuration's, so no client can make them collide (the seed is random
    /// per process all the same).
    by_name: HashMap<String, Named, foldhash::fast::RandomState>,
}

/// A policy the decision API finds by name, with what its answers send that does not
/// change per request.
#[derive(Debug)]
struct Named {
    policy: Arc<Policy>,
    /// `RateLimit-Policy` for a request naming this policy alone; `None` on a calendar,
    /// whose window's length changes with the date.
    field: Option<HeaderValue>,
}

impl Runtime {
    /// Prepares a configuration deciding through `decider`; delayed requests wait in
    /// `wait_queue` (shared across reloads).
    pub fn new(
        config: Config,
        decider: Decider,
        wait_queue: &Arc<WaitQueue>,
        registry: &PoolRegistry,
    ) -> Result<Self, ServerError> {
        let by_name: HashMap<String, Named, _> = config
            .policies
            .iter()
            .map(|p| {
                let field = p
                    .calendar()
                    .is_none()
                    .then(|| policy_field(std::slice::from_ref(p)));
                let named = Named {
                    policy: Arc::clone(p),
                    field: field.flatten(),
                };
                (p.name().to_owned(), named)
            })
            .collect();
        let routes = RouteTable::new(&config.routes, |name| {
            by_name.get(name).map(|n| Arc::clone(&n.policy))
        })?;
        let identity = ClientIdentity::new(
            config.server.trusted_proxies.clone(),
            config.server.ipv6_prefix,
        )
        .with_header(config.server.client_ip_header);
        let header_sets = config.server.headers.clone();
        wait_queue.set_max(config.server.max_waiting);
        let pools = registry.pools(&config.pools);
        let access = AccessList::new(config.server.allow.clone(), config.server.deny.clone());
        let limiter = RateLimiter::new(decider, routes, identity, header_sets.clone())
            .with_access(access)
            .with_wait_queue(Arc::clone(wait_queue))
            .with_pools(&pools)?;
        Ok(Runtime {
            config,
            header_sets,
            limiter: Arc::new(limiter),
            pools,
            by_name,
        })
    }

    /// A loaded policy by name.
    pub fn policy(&self, name: &str) -> Option<&Arc<Policy>> {
        self.by_name.get(name).map(|n| &n.policy)
    }

    /// A loaded policy by name, with the `RateLimit-Policy` value of an answer deciding it
    /// alone ([`Runtime::policy_field`] without a second lookup).
    pub fn policy_with_field(&self, name: &str) -> Option<(&Arc<Policy>, Option<&HeaderValue>)> {
        self.by_name
            .get(name)
            .map(|n| (&n.policy, n.field.as_ref()))
    }

    /// The `RateLimit-Policy` value of an answer deciding `policies`, computed when the
    /// configuration was loaded: for one policy (not on a calendar) of this configuration.
    pub fn policy_field(&self, policies: &[Arc<Policy>]) -> Option<&HeaderValue> {
        let [policy] = policies else {
            return None;
        };
        let named = self.by_name.get(policy.name())?;
        // The same policy, not one of the same name from another configuration.
        Arc::ptr_eq(&named.policy, policy)
            .then_some(named.field.as_ref())
            .flatten()
    }
}

/// The pools of the running configuration, kept across reloads: a pool whose table is
/// unchanged is the same pool afterwards (its slots, queue and adaptive limit carry on);
/// a changed one starts afresh (requests holding the old one's slots finish there).
#[derive(Debug, Clone, Default)]
pub struct PoolRegistry {
    pools: Arc<Mutex<HashMap<String, Arc<Pool>>>>,
}

impl PoolRegistry {
    /// The pools for `specs`, reusing unchanged ones; forgets the others.
    pub fn pools(&self, specs: &[sluicegate_throttle::ValidPool]) -> Vec<Arc<Pool>> {
        let mut known = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        let pools: Vec<Arc<Pool>> = specs
            .iter()
            .map(|spec| match known.get(spec.name()) {
                Some(pool) if pool.spec() == spec => Arc::clone(pool),
                _ => Pool::new(spec.clone()),
            })
            .collect();
        *known = pools
            .iter()
            .map(|p| (p.name().to_owned(), Arc::clone(p)))
            .collect();
        pools
    }
}

/// Logs every error of an `[envoy]` recompilation that did not apply.
pub fn log_envoy_errors(errors: &sluicegate_envoy::ConfigErrors) {
    for line in errors.to_string().lines() {
        tracing::error!("{line}");
    }
    tracing::error!("[envoy] rules not reloaded; the running rules stay");
}

/// Shared by every handler and listener; cheap to clone: one reference count, which every
/// request's extractors increment (a dozen counted fields would each be an atomic that all
/// worker threads write). Its fields are [`Shared`]'s.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What an [`AppState`] holds.
pub struct Shared {
    runtime: ArcSwap<Runtime>,
    /// Where limiter state lives.
    pub store: Arc<dyn Store>,
    /// The same store when it is the in-memory one (reloads prune its tables).
    memory: Option<Arc<MemoryStore>>,
    /// Sees every decided request (metrics, dashboard).
    pub observer: Arc<dyn VerdictObserver>,
    /// The store with its observer: the one decision path of every endpoint.
    pub decider: Decider,
    /// The compiled Envoy rules (`[envoy]`), swapped by [`AppState::reload_envoy`].
    pub envoy: sluicegate_envoy::SharedConfig,
    /// The fingerprint of what the running Envoy rules were compiled from.
    envoy_print: Arc<std::sync::Mutex<Option<u64>>>,
    /// Delayed requests waiting at once (`server.max_waiting`), across reloads.
    pub wait_queue: Arc<WaitQueue>,
    /// Pools by name, kept across reloads.
    pub pools: PoolRegistry,
    /// Signs tokens when no `server.reservation_secret` is set: a random key of this process.
    random_signer: Arc<crate::api::token::Signer>,
    /// The (policy, key) pairs the config's `[[overrides]]` last wrote to the store.
    config_overrides: Mutex<Vec<(String, String)>>,
}

impl AppState {
    /// State over a store; `memory` is the same store when it is a [`MemoryStore`].
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        memory: Option<Arc<MemoryStore>>,
        observer: Arc<dyn VerdictObserver>,
    ) -> Result<Self, ServerError> {
        let decider = Decider::new(Arc::clone(&store)).with_observer(Arc::clone(&observer));
        let wait_queue = WaitQueue::new(config.server.max_waiting);
        let pools = PoolRegistry::default();
        let runtime = Runtime::new(config, decider.clone(), &wait_queue, &pools)?;
        let state = AppState(Arc::new(Shared {
            wait_queue,
            runtime: ArcSwap::from_pointee(runtime),
            store,
            memory,
            observer,
            decider,
            envoy: sluicegate_envoy::SharedConfig::default(),
            pools,
            envoy_print: Arc::default(),
            random_signer: Arc::new(crate::api::token::Signer::random()),
            config_overrides: Mutex::default(),
        }));
        state.reload_envoy()?;
        Ok(state)
    }

    /// What signs and verifies reservations and leases under `runtime`'s configuration:
    /// `server.reservation_secret`, else this process's random key.
    pub fn signer(&self, runtime: &Runtime) -> Arc<crate::api::token::Signer> {
        match &runtime.config.server.reservation_secret {
            Some(secret) => Arc::new(crate::api::token::Signer::new(secret.as_bytes())),
            None => Arc::clone(&self.random_signer),
        }
    }

    /// The current configuration snapshot.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    /// The current configuration snapshot for the span of one request: no reference count
    /// to increment (as [`AppState::runtime`] does) while no reload replaces it.
    pub fn current(&self) -> arc_swap::Guard<Arc<Runtime>> {
        self.runtime.load()
    }

    /// Installs a new configuration. Policies keep their state: unchanged ones as they
    /// are, ones whose limit, burst, period or calendar changed with what each key has used
    /// carried over; removed ones, and ones whose algorithm changed, are dropped. The
    /// config's `[[overrides]]` are written to the store in the background.
    pub fn apply(&self, config: Config) -> Result<(), ServerError> {
        let runtime = Runtime::new(config, self.decider.clone(), &self.wait_queue, &self.pools)?;
        // Before the new policies decide anything, so their first request already finds
        // the carried-over state rather than starting a table of its own.
        let mut keep = runtime.config.policies.clone();
        keep.extend(self.envoy.policies());
        self.retain(&keep);
        self.runtime.store(Arc::new(runtime));
        // The TOML was validated with its [envoy] files; a file edited since is caught here.
        if let Err(errors) = self.reload_envoy() {
            log_envoy_errors(&errors);
        }
        self.prune();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let state = self.clone();
            handle.spawn(async move { state.sync_overrides().await });
        }
        Ok(())
    }

    /// Sets or removes `key`'s override under `policy` in the store, for every check of the
    /// key: a key of the Envoy service's shape (`<domain>/<entries>`) is also checked
    /// placed under its domain, so its override is written there too (on Redis, beside the
    /// placed states the decision script reads, in the domain's Cluster slot). Decided from
    /// the key alone, not the running `[envoy]` rules, so an override set before its
    /// domain's rules is honoured once they exist.
    pub async fn set_override(
        &self,
        policy: &Arc<Policy>,
        key: &str,
        value: Option<sluicegate_core::Override>,
    ) -> Result<(), sluicegate_core::StoreError> {
        match sluicegate_envoy::key::domain_of(key) {
            Some(domain) => {
                self.store
                    .set_override_placed(policy, key, &domain, value)
                    .await
            }
            None => self.store.set_override(policy, key, value).await,
        }
    }

    /// Writes the running config's `[[overrides]]` to the store, and removes those an
    /// earlier config set that this one no longer has (overrides set through the API stay
    /// unless the config names the same key). Failures are logged: the store may be down.
    pub async fn sync_overrides(&self) {
        let runtime = self.runtime();
        let wanted: Vec<(String, String)> = runtime
            .config
            .overrides
            .iter()
            .map(|o| (o.policy.clone(), o.key.clone()))
            .collect();
        let gone: Vec<(String, String)> = {
            let mut applied = self
                .config_overrides
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let gone = applied
                .iter()
                .filter(|k| !wanted.contains(k))
                .cloned()
                .collect();
            *applied = wanted;
            gone
        };
        let set = runtime
            .config
            .overrides
            .iter()
            .map(|o| (o.policy.as_str(), o.key.as_str(), Some(o.value)));
        let removed = gone.iter().map(|(p, k)| (p.as_str(), k.as_str(), None));
        for (name, key, value) in set.chain(removed) {
            let Some(policy) = runtime.policy(name) else {
                continue;
            };
            if let Err(e) = self.set_override(policy, key, value).await {
                tracing::error!(policy = name, error = %e, "[[overrides]]: could not write an override to the store");
            }
        }
    }

    /// Recompiles the `[envoy]` rules when what they are made of (the running `[envoy]`
    /// section, the policies, the YAML files' contents) changed, and swaps them in. Returns
    /// whether they changed; on errors the running rules stay. Called at start, after a
    /// TOML reload, and by the reload watcher when a YAML file changes.
    pub fn reload_envoy(&self) -> Result<bool, sluicegate_envoy::ConfigErrors> {
        let runtime = self.runtime();
        let section = runtime.config.envoy.clone().unwrap_or_default();
        let policies = &runtime.config.policies;
        let base = std::path::Path::new("");
        let print = sluicegate_envoy::files::fingerprint(&section, policies, base);
        let mut last = self.envoy_print.lock().unwrap_or_else(|e| e.into_inner());
        if *last == Some(print) {
            return Ok(false);
        }
        // Remembered before compiling, so an invalid edit is reported once, not every poll.
        *last = Some(print);
        let compiled = sluicegate_envoy::EnvoyConfig::load(&section, policies, base)?;
        // As for a TOML reload: the rules' policies keep (or carry over) their state.
        let mut keep = policies.clone();
        keep.extend(compiled.policies().iter().cloned());
        self.retain(&keep);
        self.envoy.replace(compiled);
        drop(last);
        self.prune();
        Ok(true)
    }

    /// Drops the memory store's state of policies no longer configured, keeping those
    /// the Envoy rules made from YAML limits.
    pub fn prune(&self) {
        let mut keep = self.runtime().config.policies.clone();
        keep.extend(self.envoy.policies());
        self.retain(&keep);
    }

    /// The in-memory store, when that is the store.
    pub fn memory(&self) -> Option<Arc<MemoryStore>> {
        self.memory.clone()
    }

    fn retain(&self, keep: &[Arc<Policy>]) {
        if let Some(memory) = &self.memory {
            memory.retain_policies(keep);
        }
    }
}
