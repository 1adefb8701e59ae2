//! Store wrappers that change how a store answers, not what it decides.

use std::sync::Arc;

use sluicegate_core::{BoxFuture, CheckRequest, Policy, Store, StoreError, Verdict};

/// A store that answers only through its futures, as a networked store (Redis) does: it
/// forwards `check`, `refund`, `reset` and `ping`, and keeps the trait's defaults for the
/// rest, so callers take their general paths (no `check_immediate`, the default
/// `check_keyed`, which refuses mixed requests rather than checking them non-atomically).
pub struct Later<S>(pub S);

impl<S: Store> Store for Later<S> {
    fn check<'a>(&'a self, r: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        self.0.check(r)
    }
    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.refund(policies, key, cost)
    }
    fn reset<'a>(&'a self, p: &'a Policy, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.reset(p, key)
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.0.ping()
    }
    fn kind(&self) -> &'static str {
        "later"
    }
}
