//! What every handler shares: the store, the observer, and the current configuration as a
//! [`Runtime`] snapshot that a reload swaps atomically (requests in flight keep the snapshot
//! they started with).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sluicegate_core::{Decider, MemoryStore, Policy, Store, VerdictObserver};
use sluicegate_middleware::{AccessList, ClientIdentity, HeaderSet, RateLimiter, RouteTable};

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
    by_name: HashMap<String, Arc<Policy>>,
}

impl Runtime {
    /// Prepares a configuration deciding through `decider`.
    pub fn new(config: Config, decider: Decider) -> Result<Self, String> {
        let by_name: HashMap<String, Arc<Policy>> = config
            .policies
            .iter()
            .map(|p| (p.name().to_owned(), Arc::clone(p)))
            .collect();
        let routes = RouteTable::new(&config.routes, |name| by_name.get(name).cloned())
            .map_err(|e| e.to_string())?;
        let identity = ClientIdentity::new(
            config.server.trusted_proxies.clone(),
            config.server.ipv6_prefix,
        );
        let header_sets = config.server.headers.clone();
        let access = AccessList::new(config.server.allow.clone(), config.server.deny.clone());
        let limiter =
            RateLimiter::new(decider, routes, identity, header_sets.clone()).with_access(access);
        Ok(Runtime {
            config,
            header_sets,
            limiter: Arc::new(limiter),
            by_name,
        })
    }

    /// A loaded policy by name.
    pub fn policy(&self, name: &str) -> Option<&Arc<Policy>> {
        self.by_name.get(name)
    }
}

/// Shared by every handler and listener; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    runtime: Arc<ArcSwap<Runtime>>,
    /// Where limiter state lives.
    pub store: Arc<dyn Store>,
    /// The same store when it is the in-memory one (reloads prune its tables).
    memory: Option<Arc<MemoryStore>>,
    /// Sees every decided request (metrics, dashboard).
    pub observer: Arc<dyn VerdictObserver>,
    /// The store with its observer: the one decision path of every endpoint.
    pub decider: Decider,
    /// The compiled Envoy rules (`[envoy]`), swapped by `crate::envoy` on changes.
    pub envoy: sluicegate_envoy::SharedConfig,
}

impl AppState {
    /// State over a store; `memory` is the same store when it is a [`MemoryStore`].
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        memory: Option<Arc<MemoryStore>>,
        observer: Arc<dyn VerdictObserver>,
    ) -> Result<Self, String> {
        let decider = Decider::new(Arc::clone(&store)).with_observer(Arc::clone(&observer));
        let runtime = Runtime::new(config, decider.clone())?;
        Ok(AppState {
            runtime: Arc::new(ArcSwap::from_pointee(runtime)),
            store,
            memory,
            observer,
            decider,
            envoy: sluicegate_envoy::SharedConfig::default(),
        })
    }

    /// The current configuration snapshot.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    /// Installs a new configuration. Unchanged policies keep their state (the memory store
    /// keys its tables by the policy's full definition); removed or changed ones are dropped.
    pub fn apply(&self, config: Config) -> Result<(), String> {
        let runtime = Runtime::new(config, self.decider.clone())?;
        self.runtime.store(Arc::new(runtime));
        self.prune();
        Ok(())
    }

    /// Drops the memory store's state of policies no longer configured, keeping those
    /// the Envoy rules made from YAML limits.
    pub fn prune(&self) {
        if let Some(memory) = &self.memory {
            let mut keep = self.runtime().config.policies.clone();
            keep.extend(self.envoy.get().policies().iter().cloned());
            memory.retain_policies(&keep);
        }
    }
}
