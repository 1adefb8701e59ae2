//! [`Tallied`]: a store that counts, for the dashboard, what settles and releases did.

use std::sync::Arc;

use sluicegate_core::{
    BoxFuture, CheckRequest, KeyedCheck, Lease, Override, Policy, Settled, Settlement, Store,
    StoreError, Verdict,
};

use crate::DashboardObserver;

/// A store with the dashboard's settle and release counters around it: give every path
/// that settles or releases (the server: decision API, gateway, middleware) this store, and
/// the counts see them all. Everything else passes straight through (one more dynamic
/// call; measured in `benches/tallied.rs`).
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_core::{MemoryStore, Store};
/// use sluicegate_dashboard::{DashboardObserver, Tallied};
///
/// let observer = Arc::new(DashboardObserver::default());
/// let store: Arc<dyn Store> = Arc::new(Tallied::new(Arc::new(MemoryStore::new(1000)), observer));
/// ```
pub struct Tallied {
    inner: Arc<dyn Store>,
    observer: Arc<DashboardObserver>,
}

impl Tallied {
    /// `inner`, counted into `observer`'s [`SettleActivity`](crate::SettleActivity).
    pub fn new(inner: Arc<dyn Store>, observer: Arc<DashboardObserver>) -> Self {
        Tallied { inner, observer }
    }
}

impl Store for Tallied {
    fn check<'a>(&'a self, r: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        self.inner.check(r)
    }
    fn check_immediate(&self, r: CheckRequest<'_>) -> Option<Result<Verdict, StoreError>> {
        self.inner.check_immediate(r)
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
