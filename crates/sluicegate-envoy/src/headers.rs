//! The contract's rate-limit headers and 429 body in Envoy's `response_headers_to_add` and
//! `raw_body`.
//!
//! The header sets and the body are rendered once for every front end (gateway,
//! forward-auth, Envoy) by [`sluicegate_core::render`]; this module only lists them as Envoy
//! `HeaderValue` entries, so Envoy sends clients exactly the headers the gateway and
//! forward-auth send.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use sluicegate_core::render::{self, Header, HeaderSink, JSON, RejectionBody, Value};
use sluicegate_core::{SystemClock, Verdict};

pub use sluicegate_core::render::HeaderSet;

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
            rejection.retry_after_seconds = render::ceil_secs(left).max(1);
            rejection.message = format!(
                "Too many requests; retry in {} s.",
                rejection.retry_after_seconds
            );
            headers.set(
                Header::RetryAfter,
                Value::Int(rejection.retry_after_seconds),
            );
        }
        body = rejection.to_json();
        headers.set(Header::ContentType, JSON);
    }
    Rendered {
        headers: to_envoy(headers),
        body,
    }
}

/// The headers of `verdict` under `sets` (plus `Retry-After` on a rejection), in order.
pub fn rate_limit_headers(verdict: &Verdict, sets: &[HeaderSet]) -> Vec<(Header, Value)> {
    let mut headers = Vec::new();
    render::write_headers(sets, verdict, &SystemClock, &mut headers);
    headers
}

/// Envoy header entries for rendered `headers`.
///
/// ```
/// use sluicegate_core::render::{Header, Value};
/// let envoy = sluicegate_envoy::headers::to_envoy(vec![(Header::RateLimitLimit, Value::Int(10))]);
/// assert_eq!((envoy[0].key.as_str(), envoy[0].value.as_str()), ("ratelimit-limit", "10"));
/// ```
pub fn to_envoy(headers: Vec<(Header, Value)>) -> Vec<HeaderValue> {
    headers
        .into_iter()
        .map(|(name, value)| HeaderValue {
            key: name.name().to_owned(),
            value: match value {
                Value::Text(text) => text,
                other => other.to_string(),
            },
            ..Default::default()
        })
        .collect()
}
