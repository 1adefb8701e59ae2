//! The contract's rate-limit headers in Envoy's `response_headers_to_add`.
//!
//! The middleware crate owns the header sets and writes them for a [`Verdict`]; this
//! module only converts its `HeaderMap` into Envoy `HeaderValue` entries, so Envoy sends
//! clients exactly the headers the gateway and forward-auth send.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use http::HeaderMap;
use sluicegate_core::Verdict;
use sluicegate_middleware::headers::write_headers;

pub use sluicegate_middleware::HeaderSet;

/// The headers of `verdict` under `sets` (plus `Retry-After` on a rejection).
pub fn rate_limit_headers(verdict: &Verdict, sets: &[HeaderSet]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    write_headers(sets, verdict, &mut headers);
    headers
}

/// Envoy header entries for `headers`; values that are not UTF-8 are left out.
///
/// ```
/// let mut map = http::HeaderMap::new();
/// map.insert("ratelimit-limit", http::HeaderValue::from(10u64));
/// let envoy = sluicegate_envoy::headers::to_envoy(&map);
/// assert_eq!((envoy[0].key.as_str(), envoy[0].value.as_str()), ("ratelimit-limit", "10"));
/// ```
pub fn to_envoy(headers: &HeaderMap) -> Vec<HeaderValue> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            Some(HeaderValue {
                key: name.as_str().to_owned(),
                value: value.to_str().ok()?.to_owned(),
                ..Default::default()
            })
        })
        .collect()
}
