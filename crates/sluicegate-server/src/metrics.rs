//! Prometheus metrics with the contract's names, rendered on `GET /metrics`.

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sluicegate_core::{Store, VerdictObserver};
use sluicegate_middleware::MetricsObserver;

/// `sluicegate_decisions_total{policy, outcome}`.
pub const DECISIONS_TOTAL: &str = sluicegate_middleware::metrics::DECISIONS_TOTAL;
/// `sluicegate_store_duration_seconds` (histogram).
pub const STORE_DURATION: &str = sluicegate_core::store::metric::STORE_DURATION;
/// `sluicegate_store_errors_total`.
pub const STORE_ERRORS: &str = sluicegate_core::store::metric::STORE_ERRORS;
/// `sluicegate_tracked_keys` (memory store).
pub const TRACKED_KEYS: &str = "sluicegate_tracked_keys";
/// `sluicegate_tracked_bytes` (memory store): the limiter state `store.max_memory` bounds.
pub const TRACKED_BYTES: &str = "sluicegate_tracked_bytes";

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once); `None` if another recorder won.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(STORE_DURATION.to_owned()),
                    &[
                        0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                        0.025, 0.05, 0.1, 0.25, 1.0,
                    ],
                )
                .ok()?
                .set_buckets_for_metric(
                    Matcher::Full(sluicegate_middleware::pool::WAIT_SECONDS.to_owned()),
                    &[
                        0.0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                        30.0,
                    ],
                )
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            metrics::describe_counter!(DECISIONS_TOTAL, "Decided requests by policy and outcome");
            metrics::describe_histogram!(
                STORE_DURATION,
                metrics::Unit::Seconds,
                "Time of one store call"
            );
            metrics::describe_counter!(STORE_ERRORS, "Store calls that failed or timed out");
            metrics::describe_gauge!(TRACKED_KEYS, "Keys tracked by the in-memory store");
            metrics::counter!(STORE_ERRORS).absolute(0);
            Some(handle)
        })
        .clone()
}

/// How often recorded histogram samples are folded into their buckets.
///
/// The exporter keeps every sample a histogram records until something drains it; only
/// rendering `/metrics` did, so without a scraper memory grew with every request (about
/// 18 bytes each). Draining on a timer keeps it flat whether or not anyone scrapes.
pub const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts the thread that drains recorded samples every [`UPKEEP_INTERVAL`], once per
/// process; `false` when no recorder of ours is installed. A thread of its own rather than
/// a task: a runtime whose workers are all busy deciding must not starve it (that is
/// exactly when samples pile up fastest).
pub fn spawn_upkeep() -> bool {
    static STARTED: OnceLock<bool> = OnceLock::new();
    *STARTED.get_or_init(|| {
        let Some(Some(handle)) = HANDLE.get().cloned() else {
            return false;
        };
        std::thread::Builder::new()
            .name("metrics-upkeep".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_INTERVAL);
                    handle.run_upkeep();
                }
            })
            .is_ok()
    })
}

/// Renders the exposition text, refreshing the tracked-keys and tracked-bytes gauges first.
pub fn render(store: &dyn Store) -> String {
    if let Some(keys) = store.tracked_keys() {
        metrics::gauge!(TRACKED_KEYS).set(keys as f64);
    }
    if let Some(bytes) = store.tracked_bytes() {
        metrics::gauge!(TRACKED_BYTES).set(bytes as f64);
    }
    match HANDLE.get() {
        Some(Some(handle)) => handle.render(),
        _ => String::new(),
    }
}

/// The observer the server installs: decision metrics, plus whatever else is wired in
/// (the dashboard adds its own here).
pub fn observers() -> Arc<dyn VerdictObserver> {
    observers_with(Vec::new())
}

/// [`observers`] and `more` in one flat list: one dynamic call per observer a decision,
/// not a list within a list.
pub fn observers_with(more: Vec<Arc<dyn VerdictObserver>>) -> Arc<dyn VerdictObserver> {
    let mut list: Vec<Arc<dyn VerdictObserver>> = vec![Arc::new(MetricsObserver)];
    list.extend(more);
    Arc::new(list)
}
