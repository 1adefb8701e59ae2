//! Per-domain, per-descriptor counters, as envoyproxy/ratelimit keeps them, through the
//! `metrics` facade (the server installs the Prometheus recorder).
//!
//! | metric | upstream stat | counts |
//! | --- | --- | --- |
//! | `sluicegate_envoy_hits_total` | `total_hits` | hits (the cost) of every matched descriptor |
//! | `sluicegate_envoy_over_limit_total` | `over_limit` | hits answered OVER_LIMIT |
//! | `sluicegate_envoy_near_limit_total` | `near_limit` | admitted hits that used 80 % or more of the limit |
//! | `sluicegate_envoy_within_limit_total` | `within_limit` | hits not over the limit |
//! | `sluicegate_envoy_shadow_mode_total` | `shadow_mode` | hits a shadow rule would have rejected |
//! | `sluicegate_envoy_global_shadow_mode_total` | `global_shadow_mode` (service level) | requests `[envoy] shadow` answered OK instead of OVER_LIMIT (label `domain` only) |
//!
//! Labels are `domain` and `descriptor`, the matched rule's path (e.g.
//! `message_type_marketing.to_number`): both come from the configuration, so the label set
//! is bounded whatever clients send. Only `detailed_metric: true` appends the request's
//! value, and with it clients choose label values: use it only on keys with few values.

use metrics::counter;

/// The share of the limit from which admitted hits count as near the limit.
pub const NEAR_LIMIT_RATIO: f64 = 0.8;

/// What happened to one matched descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorOutcome {
    /// Its hits (cost).
    pub hits: u64,
    /// Answered OVER_LIMIT.
    pub over_limit: bool,
    /// Admitted with at least [`NEAR_LIMIT_RATIO`] of the limit used.
    pub near_limit: bool,
    /// A shadow rule would have rejected it.
    pub shadow_denied: bool,
}

/// Records one descriptor's outcome.
pub fn record(domain: &str, descriptor: &str, outcome: DescriptorOutcome) {
    let labels = [
        ("domain", domain.to_owned()),
        ("descriptor", descriptor.to_owned()),
    ];
    counter!("sluicegate_envoy_hits_total", &labels).increment(outcome.hits);
    if outcome.over_limit {
        counter!("sluicegate_envoy_over_limit_total", &labels).increment(outcome.hits);
    } else {
        counter!("sluicegate_envoy_within_limit_total", &labels).increment(outcome.hits);
    }
    if outcome.near_limit {
        counter!("sluicegate_envoy_near_limit_total", &labels).increment(outcome.hits);
    }
    if outcome.shadow_denied {
        counter!("sluicegate_envoy_shadow_mode_total", &labels).increment(outcome.hits);
    }
}

/// Counts a request `[envoy] shadow` answered OK although a limit was over.
pub fn record_global_shadow(domain: &str) {
    counter!("sluicegate_envoy_global_shadow_mode_total", "domain" => domain.to_owned())
        .increment(1);
}

/// Counts a request the service could not answer (`reason`: `store_error`, `invalid`).
pub fn record_error(reason: &'static str) {
    counter!("sluicegate_envoy_errors_total", "reason" => reason).increment(1);
}

/// Whether `used` of `limit` is near the limit.
pub fn is_near(used: u64, limit: u64) -> bool {
    limit > 0 && used as f64 >= NEAR_LIMIT_RATIO * limit as f64
}
