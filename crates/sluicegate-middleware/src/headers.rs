//! The rate-limit headers and the 429 and 403 responses as `http` types.
//!
//! What the headers and bodies say is rendered once, without a transport, in
//! [`sluicegate_core::render`] (the Envoy service uses the same renderer); this module only
//! writes it into an [`http::HeaderMap`] and builds the responses.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use sluicegate_core::render::{self, Header, HeaderSink, Value};
use sluicegate_core::{SystemClock, Verdict};

pub use sluicegate_core::render::{
    HeaderSet, RejectionBody, UnknownHeaderSet, ceil_secs, retry_after_secs,
};

const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The `http` name of a rendered header (constants: no check per response).
fn name(header: Header) -> HeaderName {
    match header {
        Header::RetryAfter => header::RETRY_AFTER,
        Header::ContentType => header::CONTENT_TYPE,
        Header::CacheControl => header::CACHE_CONTROL,
        Header::RateLimitLimit => RATELIMIT_LIMIT,
        Header::RateLimitRemaining => RATELIMIT_REMAINING,
        Header::RateLimitReset => RATELIMIT_RESET,
        Header::RateLimitPolicy => RATELIMIT_POLICY,
        Header::RateLimit => RATELIMIT,
        Header::XRateLimitLimit => X_RATELIMIT_LIMIT,
        Header::XRateLimitRemaining => X_RATELIMIT_REMAINING,
        Header::XRateLimitReset => X_RATELIMIT_RESET,
    }
}

/// An [`http::HeaderMap`] as a [`HeaderSink`], with the route's `RateLimit-Policy` when it
/// was computed ahead.
///
/// Numbers and the cached field are written into one buffer that the header values share
/// (two allocations a response instead of one a value), and the cached field is copied
/// rather than cloned: a clone would count references on bytes every worker thread shares.
struct HttpSink<'a> {
    headers: &'a mut HeaderMap,
    policy_field: Option<&'a HeaderValue>,
    buf: BytesMut,
}

impl HttpSink<'_> {
    /// `bytes` as a header value sharing the sink's buffer.
    fn shared(&mut self, bytes: &[u8]) -> Option<HeaderValue> {
        self.buf.extend_from_slice(bytes);
        // Only rendered text comes here (digits, a field computed by the renderer), which
        // is always a valid value; the check is the safe constructor's, a loop over bytes.
        HeaderValue::from_maybe_shared(self.buf.split().freeze()).ok()
    }
}

impl HeaderSink for HttpSink<'_> {
    fn set(&mut self, header: Header, rendered: Value) {
        let value = match rendered {
            Value::Int(n) => self.shared(itoa::Buffer::new().format(n).as_bytes()),
            Value::Static(s) => Some(HeaderValue::from_static(s)),
            Value::Text(s) => HeaderValue::try_from(s).ok(),
        };
        if let Some(v) = value {
            self.headers.insert(name(header), v);
        }
    }

    fn set_cached_policy_field(&mut self) -> bool {
        let Some(field) = self.policy_field else {
            return false;
        };
        if let Some(v) = self.shared(field.as_bytes()) {
            self.headers.insert(name(Header::RateLimitPolicy), v);
        }
        true
    }
}

/// Room for the numbers of every header set and a cached `RateLimit-Policy` of a few
/// policies; more only means one more allocation.
const VALUES_CAPACITY: usize = 128;

/// Writes the configured header sets for `verdict` into `headers`, plus `Retry-After` when
/// it is a rejection. Reads the wall clock for `legacy`'s Unix time.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use http::HeaderMap;
/// use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
/// use sluicegate_middleware::{HeaderSet, headers::write_headers};
///
/// let auth = Arc::new(Policy::builder("auth", AlgorithmKind::TokenBucket, 10, Duration::from_secs(60)).build()?);
/// let policies = [auth];
/// let verdict = MemoryStore::new(10).check_now(CheckRequest::new(&policies, "ip:192.0.2.1", 1))?;
/// let mut headers = HeaderMap::new();
/// write_headers(&[HeaderSet::Draft6, HeaderSet::Ietf], &verdict, &mut headers);
/// assert_eq!(headers["ratelimit-limit"], "10");
/// assert_eq!(headers["ratelimit-remaining"], "9");
/// assert_eq!(headers["ratelimit-reset"], "6");
/// assert_eq!(headers["ratelimit-policy"], r#""auth";q=10;w=60"#);
/// assert_eq!(headers["ratelimit"], r#""auth";r=9;t=6"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_headers(sets: &[HeaderSet], verdict: &Verdict, headers: &mut HeaderMap) {
    write_headers_cached(sets, verdict, None, headers);
}

/// [`write_headers`] with a `RateLimit-Policy` value computed ahead by [`policy_field`]
/// for the same policies (it only depends on the route, not on the request).
pub fn write_headers_cached(
    sets: &[HeaderSet],
    verdict: &Verdict,
    policy_field: Option<&HeaderValue>,
    headers: &mut HeaderMap,
) {
    // Three headers a set at most, and Retry-After: the map grows once, not per header.
    headers.reserve(sets.len() * 3 + 1);
    let mut sink = HttpSink {
        headers,
        policy_field,
        buf: BytesMut::with_capacity(VALUES_CAPACITY),
    };
    render::write_headers(sets, verdict, &SystemClock, &mut sink);
}

/// The `RateLimit-Policy` field for these policies (shadow ones left out) now: `None` when
/// none is left.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, Policy};
/// let auth = Arc::new(Policy::builder("auth", AlgorithmKind::Gcra, 10, Duration::from_secs(60)).build().unwrap());
/// let field = sluicegate_middleware::headers::policy_field(&[auth]).unwrap();
/// assert_eq!(field, r#""auth";q=10;w=60"#);
/// ```
pub fn policy_field(policies: &[std::sync::Arc<sluicegate_core::Policy>]) -> Option<HeaderValue> {
    use sluicegate_core::Clock;
    render::policy_field(policies, SystemClock.now()).and_then(|v| HeaderValue::try_from(v).ok())
}

/// A JSON response with `status`, `Content-Type: application/json` and
/// `Cache-Control: no-store`.
pub fn json_response(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(render::JSON_TYPE),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(render::NO_STORE),
    );
    response
}

/// The rejection of `verdict`: `status` (429 unless a forward-auth peer needs 401/403),
/// `Content-Type: application/json`, `Cache-Control: no-store` (RFC 6585: a 429 must not be
/// cached), `Retry-After`, the header sets, and the [`RejectionBody`].
pub fn rejection_response(
    sets: &[HeaderSet],
    verdict: &Verdict,
    status: StatusCode,
) -> Response<Full<Bytes>> {
    let body = RejectionBody::new(verdict).to_json();
    let mut response = json_response(status, Bytes::from(body));
    write_headers(sets, verdict, response.headers_mut());
    response
}

/// The answer to a client on a deny list: `403`, JSON `{"error": "forbidden", "message": …}`,
/// not cacheable (the lists change with the configuration).
pub fn forbidden_response() -> Response<Full<Bytes>> {
    json_response(
        StatusCode::FORBIDDEN,
        Bytes::from_static(render::FORBIDDEN_BODY.as_bytes()),
    )
}

// What the headers say is tested in sluicegate_core::render; these test the HTTP side.
#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate_core::{AlgorithmKind, Decision, Mode, Policy};
    use std::sync::Arc;
    use std::time::Duration;

    fn policy(name: &str, limit: u64, period: Duration, mode: Mode) -> Arc<Policy> {
        Arc::new(
            Policy::builder(name, AlgorithmKind::TokenBucket, limit, period)
                .mode(mode)
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn cached_policy_field_is_sent_as_computed() {
        let p = policy("p", 5, Duration::from_secs(1), Mode::Reject);
        let cached = HeaderValue::from_static(r#""cached";q=1;w=1"#);
        let verdict = Verdict::combine(vec![(p, Decision::allow(5, 4, 1), 1)]);
        let mut h = HeaderMap::new();
        write_headers_cached(&[HeaderSet::Ietf], &verdict, Some(&cached), &mut h);
        assert_eq!(h["ratelimit-policy"], cached);
        assert_eq!(h["ratelimit"], r#""p";r=4;t=1"#);
    }

    #[test]
    fn rejection_names_longest_retry() {
        let verdict = Verdict::combine(vec![
            (
                policy("a", 5, Duration::from_secs(1), Mode::Reject),
                Decision::deny(5, 0, 1_000_000, 200_000),
                1,
            ),
            (
                policy("b", 5, Duration::from_secs(60), Mode::Reject),
                Decision::deny(5, 0, 60_000_000, 12_000_001),
                1,
            ),
        ]);
        let response = rejection_response(
            &[HeaderSet::Legacy],
            &verdict,
            StatusCode::TOO_MANY_REQUESTS,
        );
        assert_eq!(response.headers()[header::RETRY_AFTER], "13");
        assert_eq!(response.headers()["x-ratelimit-limit"], "5");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        let body = RejectionBody::new(&verdict);
        assert_eq!(body.policy, "b");
        assert_eq!(body.retry_after_seconds, 13);
    }
}
