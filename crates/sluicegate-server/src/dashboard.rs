//! What the dashboard shows beyond verdicts: the current configuration's `[[pools]]`,
//! read from the running pools at each poll (so a reload shows the new ones at once); the
//! slots held by concurrency leases, read from the store ([`LeaseReads`]); and what settles
//! and releases did, counted around the store ([`Tallied`]).

use std::sync::Arc;

use sluicegate_core::{
    BoxFuture, CheckRequest, KeyedCheck, Lease, Override, Policy, Settled, Settlement, Store,
    StoreError, Verdict,
};
use sluicegate_dashboard::leases::LeaseItem;
use sluicegate_dashboard::{DashboardObserver, LeaseRead, LeaseReader, PoolLevelRow, PoolRow};
use sluicegate_middleware::Pool;

use crate::state::AppState;

/// The dashboard's rows for the pools of `state`'s current configuration.
pub fn pool_rows(state: &AppState) -> Vec<PoolRow> {
    state.runtime().pools.iter().map(|p| row(p)).collect()
}

fn row(pool: &Pool) -> PoolRow {
    let status = pool.status();
    PoolRow {
        pool: pool.name().to_owned(),
        limit: u64::from(status.limit),
        adaptive: status
            .adaptive
            .map(|(min, max)| (u64::from(min), u64::from(max))),
        latency_floor_ms: status.latency_floor.map(|f| f.as_secs_f64() * 1_000.0),
        levels: status
            .levels
            .into_iter()
            .map(|l| PoolLevelRow {
                level: l.name.to_string(),
                shares: l.shares,
                in_flight: u64::from(l.running),
                queued: l.queued as u64,
                admitted: l.admitted,
                rejected_queue_full: l.rejected_full,
                rejected_timeout: l.rejected_timeout,
                cancelled: l.cancelled,
                waited_seconds: l.waited_micros as f64 / 1e6,
            })
            .collect(),
    }
}

/// The dashboard's reads of the slots held by keys given leases: a cost-0 decision (which
/// takes nothing and is not observed) per `(policy, key)`, on the current configuration's
/// policies and the server's store, in one batch.
pub struct LeaseReads(pub AppState);

impl LeaseReader for LeaseReads {
    fn read<'a>(&'a self, items: &'a [LeaseItem]) -> BoxFuture<'a, Vec<Option<LeaseRead>>> {
        Box::pin(async move {
            let runtime = self.0.runtime();
            // A policy removed by a reload, or no longer concurrency, is not read.
            let policies: Vec<Option<[Arc<Policy>; 1]>> = items
                .iter()
                .map(|(name, _)| {
                    runtime
                        .policy(name)
                        .filter(|p| p.algorithm().is_concurrency())
                        .map(|p| [Arc::clone(p)])
                })
                .collect();
            let requests: Vec<CheckRequest<'_>> = items
                .iter()
                .zip(&policies)
                .filter_map(|((_, key), p)| p.as_ref().map(|p| CheckRequest::new(p, key, 0)))
                .collect();
            let mut answers = self.0.store.check_batch(&requests).await.into_iter();
            policies
                .iter()
                .map(|p| {
                    let policy = p.as_ref()?;
                    let verdict = answers.next()?.ok()?;
                    let d = &verdict.decisions.first()?.decision;
                    Some(LeaseRead {
                        held: d.limit.saturating_sub(d.remaining),
                        limit: d.limit,
                        policy_limit: policy[0].limit(),
                    })
                })
                .collect()
        })
    }
}

/// The server's store with the dashboard's settle and release counters around it: every
/// settle and release (decision API, gateway, middleware) goes through the one store of
/// the state, so the counts see them all. Everything else passes straight through.
pub struct Tallied {
    inner: Arc<dyn Store>,
    observer: Arc<DashboardObserver>,
}

impl Tallied {
    /// `inner`, counted into `observer`'s [`SettleActivity`](sluicegate_dashboard::SettleActivity).
    pub fn new(inner: Arc<dyn Store>, observer: Arc<DashboardObserver>) -> Self {
        Tallied { inner, observer }
    }
}

impl Store for Tallied {
    fn check<'a>(&'a self, r: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        self.inner.check(r)
    }
    fn check_batch<'a>(
        &'a self,
        requests: &'a [CheckRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<Verdict, StoreError>>> {
        self.inner.check_batch(requests)
    }
    fn check_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        self.inner.check_keyed(items)
    }
    fn refund_keyed<'a>(
        &'a self,
        items: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.refund_keyed(items)
    }
    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.refund(policies, key, cost)
    }
    fn release<'a>(&'a self, leases: &'a [Lease]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let result = self.inner.release(leases).await;
            if result.is_ok() {
                self.observer.settles().released(leases.len());
            }
            result
        })
    }
    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.reset(policy, key)
    }
    fn settle<'a>(&'a self, s: Settlement<'a>) -> BoxFuture<'a, Result<Settled, StoreError>> {
        Box::pin(async move {
            let result = self.inner.settle(s).await;
            self.observer.settles().settle(s.estimate, s.real, &result);
            result
        })
    }
    fn set_override<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.set_override(policy, key, value)
    }
    fn set_override_placed<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a str,
        placement: &'a str,
        value: Option<Override>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner
            .set_override_placed(policy, key, placement, value)
    }
    fn get_override<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Override>, StoreError>> {
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
