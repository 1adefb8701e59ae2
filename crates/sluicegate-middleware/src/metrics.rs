//! [`MetricsObserver`]: counts decisions through the `metrics` facade, for whatever
//! recorder the application installed (the server's Prometheus exporter).

use sluicegate_core::{Verdict, VerdictObserver};

/// The counter's name.
pub const DECISIONS_TOTAL: &str = "sluicegate_decisions_total";

/// Records `sluicegate_decisions_total{policy, outcome}`, one increment per policy of
/// every decided request; `outcome` is `allowed`, `denied`, `delayed`, `shadow_denied` or
/// `store_error`.
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_core::{MemoryStore, VerdictObserver};
/// use sluicegate_middleware::{MetricsObserver, RateLimiter};
///
/// let observer: Arc<dyn VerdictObserver> = Arc::new(MetricsObserver);
/// let builder = RateLimiter::builder(Arc::new(MemoryStore::new(1000))).observer(observer);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsObserver;

impl VerdictObserver for MetricsObserver {
    fn observe(&self, _key: &str, verdict: &Verdict) {
        for d in &verdict.decisions {
            metrics::counter!(
                DECISIONS_TOTAL,
                "policy" => d.policy.name().to_owned(),
                "outcome" => d.outcome.label(),
            )
            .increment(1);
        }
    }
}
