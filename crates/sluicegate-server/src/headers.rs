//! Rate-limit response headers. Temporary until `sluicegate_middleware`'s header writer
//! lands: only the `draft-6` set.

use axum::http::{HeaderMap, HeaderValue};
use sluicegate_core::Verdict;

/// A header set name from `server.headers`.
pub type HeaderSet = String;

/// Writes the configured header sets for `verdict`.
pub fn write(sets: &[HeaderSet], verdict: &Verdict, headers: &mut HeaderMap) {
    if !sets.iter().any(|s| s == "draft-6") {
        return;
    }
    if let Some(d) = verdict
        .decisions
        .iter()
        .min_by_key(|d| d.decision.remaining)
    {
        headers.insert("ratelimit-limit", HeaderValue::from(d.decision.limit));
        headers.insert(
            "ratelimit-remaining",
            HeaderValue::from(d.decision.remaining),
        );
        headers.insert(
            "ratelimit-reset",
            HeaderValue::from(d.decision.reset_after.div_ceil(1_000_000)),
        );
    }
}

/// Whole seconds for `Retry-After`, at least 1, when denied.
pub fn retry_after_secs(verdict: &Verdict) -> Option<u64> {
    if verdict.allowed {
        return None;
    }
    verdict
        .retry_after()
        .map(|us| us.div_ceil(1_000_000).max(1))
}
