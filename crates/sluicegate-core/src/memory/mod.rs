//! The in-memory store: limiter state in this process, shared by all its threads.
//!
//! FIRST VERSION: correct and atomic, but neither bounded nor tuned. `max_keys` eviction and
//! the fast table come next (see the core issue).

mod table;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::clock::{Clock, SystemClock};
use crate::policy::Policy;
use crate::store::{BoxFuture, CheckRequest, KeyedCheck, Store, StoreError};
use crate::verdict::Verdict;

pub use table::{KeyedLimiter, PolicyTable};

/// Default bound on tracked keys.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// State for every policy in process memory.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
/// let store = MemoryStore::new(1000);
/// let policy = Arc::new(Policy::builder("p", AlgorithmKind::FixedWindow, 2, Duration::from_secs(60)).build().unwrap());
/// let policies = [policy];
/// let request = CheckRequest::new(&policies, "client", 1);
/// assert!(store.check_now(request).unwrap().allowed);
/// assert!(store.check_now(request).unwrap().allowed);
/// assert!(!store.check_now(request).unwrap().allowed);
/// ```
pub struct MemoryStore<C: Clock = SystemClock> {
    clock: C,
    max_keys: usize,
    tables: RwLock<HashMap<Policy, Arc<dyn PolicyTable>>>,
}

impl MemoryStore<SystemClock> {
    /// A store on the wall clock tracking at most `max_keys` keys.
    pub fn new(max_keys: usize) -> Self {
        Self::with_clock(max_keys, SystemClock)
    }
}

impl<C: Clock> MemoryStore<C> {
    /// A store reading time from `clock`.
    pub fn with_clock(max_keys: usize, clock: C) -> Self {
        MemoryStore {
            clock,
            max_keys,
            tables: RwLock::new(HashMap::new()),
        }
    }

    /// The table of `policy`, created on first use. A policy whose numbers change gets a
    /// fresh table; an unchanged one keeps its state across reloads.
    fn table(&self, policy: &Policy) -> Arc<dyn PolicyTable> {
        if let Some(table) = self.tables.read().get(policy) {
            return Arc::clone(table);
        }
        let mut tables = self.tables.write();
        Arc::clone(tables.entry(policy.clone()).or_insert_with(|| {
            crate::with_algorithm!(policy, |alg| {
                Arc::new(KeyedLimiter::new(alg, policy.clone())) as Arc<dyn PolicyTable>
            })
        }))
    }

    /// Drops the state of every policy not in `keep` (after a reload).
    pub fn retain_policies(&self, keep: &[Arc<Policy>]) {
        self.tables
            .write()
            .retain(|policy, _| keep.iter().any(|k| **k == *policy));
    }

    /// The bound on tracked keys.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Decides synchronously (the store never waits on I/O).
    pub fn check_now(&self, request: CheckRequest<'_>) -> Result<Verdict, StoreError> {
        request.validate()?;
        let items: Vec<KeyedCheck<'_>> = request
            .policies
            .iter()
            .map(|policy| KeyedCheck::new(policy, request.key, request.cost))
            .collect();
        self.decide(&items)
    }

    /// [`Store::check_keyed`], synchronously: each policy under its own key and cost.
    pub fn check_keyed_now(&self, items: &[KeyedCheck<'_>]) -> Result<Verdict, StoreError> {
        KeyedCheck::validate_all(items)?;
        self.decide(items)
    }

    /// The all-or-nothing step over validated items (each policy at most once).
    fn decide(&self, items: &[KeyedCheck<'_>]) -> Result<Verdict, StoreError> {
        let now = self.clock.now();
        let mut tables: Vec<(usize, Arc<dyn PolicyTable>)> = items
            .iter()
            .enumerate()
            .map(|(i, item)| (i, self.table(item.policy)))
            .collect();
        // Lock in one global order (table address) so concurrent multi-policy checks cannot deadlock.
        tables.sort_by_key(|(_, t)| Arc::as_ptr(t) as *const () as usize);
        let mut prepared: Vec<(usize, Box<dyn table::Prepared + '_>)> = tables
            .iter()
            .map(|(i, t)| {
                let item = &items[*i];
                let budget = item.policy.delay_budget();
                (*i, t.prepare(item.key, now, item.cost, budget))
            })
            .collect();
        prepared.sort_by_key(|(i, _)| *i);
        let decided = prepared
            .iter()
            .map(|(i, p)| (Arc::clone(items[*i].policy), p.decision()))
            .collect();
        let (verdict, consume) = Verdict::combine(decided);
        for ((_, p), consume) in prepared.into_iter().zip(consume) {
            if consume {
                p.commit();
            }
        }
        Ok(verdict)
    }

    /// Tracked keys over all policies.
    pub fn len(&self) -> usize {
        self.tables.read().values().map(|t| t.len()).sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<C: Clock> Store for MemoryStore<C> {
    fn check<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        let result = self.check_now(request);
        Box::pin(std::future::ready(result))
    }

    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        let result = self.check_keyed_now(items);
        Box::pin(std::future::ready(result))
    }

    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let now = self.clock.now();
        for policy in policies {
            self.table(policy).refund(key, now, cost);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.table(policy).remove(key);
        Box::pin(std::future::ready(Ok(())))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn tracked_keys(&self) -> Option<u64> {
        Some(self.len() as u64)
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}
