//! The contract's rate-limit headers and 429 body in Envoy's `response_headers_to_add` and
//! `raw_body`.
//!
//! The header sets and the body are written once for every front end (gateway,
//! forward-auth, Envoy); this module only converts them into Envoy `HeaderValue` entries, so
//! Envoy sends clients exactly the headers the gateway and forward-auth send.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use http::HeaderMap;
use sluicegate_core::Verdict;
use sluicegate_middleware::headers::{RejectionBody, write_headers};

pub use sluicegate_middleware::HeaderSet;

/// What a response carries for Envoy to add: headers and, on a rejection, the JSON body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    /// `response_headers_to_add`.
    pub headers: Vec<HeaderValue>,
    /// `raw_body`: the contract's 429 body on a rejection, empty otherwise.
    pub body: Vec<u8>,
}

/// The headers and body of `verdict` under `sets`. `block_reset` (µs) is the wait of a
/// `requests_per_unit: 0` rule, which has no policy to tell it: its window's end.
pub fn render(verdict: &Verdict, sets: &[HeaderSet], block_reset: Option<u64>) -> Rendered {
    let mut headers = rate_limit_headers(verdict, sets);
    let mut body = Vec::new();
    if !verdict.allowed {
        let mut rejection = RejectionBody::new(verdict);
        if verdict.retry_after().is_none()
            && let Some(left) = block_reset
        {
            rejection.retry_after_seconds = left.div_ceil(1_000_000).max(1);
            rejection.message = format!(
                "Too many requests; retry in {} s.",
                rejection.retry_after_seconds
            );
            headers.insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from(rejection.retry_after_seconds),
            );
        }
        body = serde_json::to_vec(&rejection).unwrap_or_default();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
    }
    Rendered {
        headers: to_envoy(&headers),
        body,
    }
}

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
