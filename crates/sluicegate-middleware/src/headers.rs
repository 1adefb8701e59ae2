//! The rate-limit headers and the 429 and 403 responses as `http` types.
//!
//! What the headers and bodies say is rendered once, without a transport, in
//! [`sluicegate_core::render`] (the Envoy service uses the same renderer); this module only
//! writes it into an [`http::HeaderMap`] and builds the responses.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use sluicegate_core::render::{self, Header, HeaderSink, Value};
use sluicegate_core::{Policy, SystemClock, Verdict};

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

/// The header values of a route that do not change from one request to the next, rendered
/// when the route is built: its `RateLimit-Policy` field and each policy's limit (the
/// `RateLimit-Limit` and `X-RateLimit-Limit` values).
///
/// A response clones them: a reference count on bytes the worker threads share, where the
/// copy into the response's own buffer it replaces cost ~300 instructions more (callgrind);
/// two threads counting on one value cost no more CPU a clone than one thread did (~14 ns
/// either way, docs/benchmarks/middleware.md).
#[derive(Debug, Clone, Default)]
pub struct RouteFields {
    policy_field: Option<HeaderValue>,
    limits: Box<[(u64, HeaderValue)]>,
}

impl RouteFields {
    /// The fields of a route deciding `policies`; no `RateLimit-Policy` when one is on a
    /// calendar (its window's length changes with the date: computed per response then).
    pub fn new(policies: &[Arc<Policy>]) -> RouteFields {
        let calendar = policies.iter().any(|p| p.calendar().is_some());
        let mut limits: Vec<(u64, HeaderValue)> = Vec::with_capacity(policies.len());
        for p in policies {
            if !limits.iter().any(|(l, _)| *l == p.limit()) {
                limits.push((p.limit(), HeaderValue::from(p.limit())));
            }
        }
        RouteFields {
            policy_field: if calendar {
                None
            } else {
                policy_field(policies)
            },
            limits: limits.into(),
        }
    }

    /// The `RateLimit-Policy` value, when it does not depend on the date.
    pub fn policy_field(&self) -> Option<&HeaderValue> {
        self.policy_field.as_ref()
    }
}

/// `0` to `999` as three digits each, back to back: the small numbers of most responses
/// (seconds to a reset, `Retry-After`, what is left of a small limit) are sent from here,
/// with no allocation.
static SMALL_NUMBERS: [u8; 3000] = {
    let mut table = [0u8; 3000];
    let mut n = 0;
    while n < 1000 {
        table[3 * n] = b'0' + (n / 100) as u8;
        table[3 * n + 1] = b'0' + (n / 10 % 10) as u8;
        table[3 * n + 2] = b'0' + (n % 10) as u8;
        n += 1;
    }
    table
};

/// `n` in decimal from [`SMALL_NUMBERS`], when it is below 1000.
fn small_number(n: u64) -> Option<HeaderValue> {
    let n = usize::try_from(n).ok().filter(|n| *n < 1000)?;
    let lead = match n {
        0..=9 => 2,
        10..=99 => 1,
        _ => 0,
    };
    let digits = Bytes::from_static(&SMALL_NUMBERS[3 * n + lead..3 * n + 3]);
    // SAFETY: the table holds only the ASCII digits `0`-`9` (valid UTF-8, the unchecked
    // constructor's one requirement); `small_numbers_are_their_decimal_text` reads them all.
    Some(unsafe { HeaderValue::from_maybe_shared_unchecked(digits) })
}

/// An [`http::HeaderMap`] as a [`HeaderSink`], with the route's [`RouteFields`].
///
/// A value rendered per response (a number of 1000 or more, the `RateLimit` field, which
/// the renderer writes on its stack) is one allocation of its exact size, freed with the
/// response: a buffer shared by several
/// values costs two (the buffer and its shared reference count) and a `String` turned
/// into `Bytes` with room to spare one more (the same count); the fewer allocations, the
/// fewer frees that miss glibc's per-thread cache (callgrind: ~100 instructions each
/// there, docs/benchmarks/middleware.md).
struct HttpSink<'a> {
    headers: &'a mut HeaderMap,
    policy_field: Option<&'a HeaderValue>,
    limits: &'a [(u64, HeaderValue)],
}

/// `n` in decimal, in a header value of its own exact allocation.
fn digits(n: u64) -> HeaderValue {
    let mut buffer = itoa::Buffer::new();
    let bytes = Bytes::copy_from_slice(buffer.format(n).as_bytes());
    // SAFETY: `itoa` writes only the ASCII digits `0`-`9`: valid UTF-8, the one
    // requirement of the unchecked constructor (and valid header-value bytes). Skipping the
    // safe constructor's byte loop saves its cost on every response; the value is the one
    // `HeaderValue::from(n)` makes (`digits_are_http_s_integer_value`).
    unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) }
}

/// Whether every byte of `bytes` is printable ASCII (`0x20..=0x7e`), eight bytes a step.
///
/// For a word of bytes that are all below `0x80` (else its high bits are set): a byte
/// below `0x20` borrows in `w - 0x2020…20` and sets its own high bit there while it is
/// clear in `w` (the classic "has less than" test: a borrow can only mark bytes above a
/// byte that is truly below, so whether any is marked is exact); a byte of `0x7f` becomes
/// `0x80` in `w + 0x0101…01` (no carries, every byte being at most `0x7f`).
fn printable(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    let chunks = bytes.chunks_exact(8);
    let tail = chunks.remainder();
    let words_ok = chunks
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
        .all(|w| (w | w.wrapping_add(ONES) | (w.wrapping_sub(ONES * 0x20) & !w)) & HIGH == 0);
    words_ok && tail.iter().all(|b| (0x20..=0x7e).contains(b))
}

/// `text` as a header value of its own exact allocation, `None` when it is not a valid
/// one (what `HeaderValue::from_maybe_shared` says).
fn text_value(text: &[u8]) -> Option<HeaderValue> {
    let bytes = Bytes::copy_from_slice(text);
    if !printable(text) {
        // Never from the renderer (its fields are printable ASCII): the safe constructor
        // decides, as before.
        return HeaderValue::from_maybe_shared(bytes).ok();
    }
    // SAFETY: printable ASCII (checked just above) is valid UTF-8, the one requirement
    // of the unchecked constructor, and every such byte is a valid header-value byte, so
    // the value is the one the safe constructor makes (`text_value_is_the_checked_one`).
    // The word-wise check costs ~100 instructions less a response than the constructor's
    // byte loop (callgrind, docs/benchmarks/middleware.md).
    Some(unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) })
}

impl HttpSink<'_> {
    fn number(&mut self, header: Header, n: u64) -> Option<HeaderValue> {
        if matches!(header, Header::RateLimitLimit | Header::XRateLimitLimit)
            && let Some((_, value)) = self.limits.iter().find(|(limit, _)| *limit == n)
        {
            return Some(value.clone());
        }
        Some(small_number(n).unwrap_or_else(|| digits(n)))
    }
}

impl HeaderSink for HttpSink<'_> {
    fn set(&mut self, header: Header, rendered: Value) {
        let value = match rendered {
            Value::Int(n) => self.number(header, n),
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
        self.headers
            .insert(name(Header::RateLimitPolicy), field.clone());
        true
    }

    fn set_text(&mut self, header: Header, text: &[u8]) {
        if let Some(v) = text_value(text) {
            self.headers.insert(name(header), v);
        }
    }
}

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
    write_with(sets, verdict, policy_field, &[], headers);
}

/// [`write_headers`] with the values of `fields`, the route's (computed for the policies
/// `verdict` decided).
pub fn write_route_headers(
    sets: &[HeaderSet],
    verdict: &Verdict,
    fields: &RouteFields,
    headers: &mut HeaderMap,
) {
    write_with(
        sets,
        verdict,
        fields.policy_field.as_ref(),
        &fields.limits,
        headers,
    );
}

fn write_with(
    sets: &[HeaderSet],
    verdict: &Verdict,
    policy_field: Option<&HeaderValue>,
    limits: &[(u64, HeaderValue)],
    headers: &mut HeaderMap,
) {
    // An empty map is allocated once at the size the headers need. A map that already
    // holds headers (a handler's response) is left to grow by itself, if at all: reserving
    // ahead grew it as soon as an upstream's one header was in, to the same 16 slots it
    // reaches later when axum adds `Content-Length`, and that early 1,248-byte allocation
    // cost ~1,200 instructions more a request in glibc's allocator (malloc_consolidate;
    // callgrind, docs/benchmarks/middleware.md).
    if headers.is_empty() {
        headers.reserve(most_headers(sets));
    }
    let mut sink = HttpSink {
        headers,
        policy_field,
        limits,
    };
    render::write_headers(sets, verdict, &SystemClock, &mut sink);
}

/// The most headers `sets` write, `Retry-After` included.
fn most_headers(sets: &[HeaderSet]) -> usize {
    let fields: usize = sets
        .iter()
        .map(|set| match set {
            HeaderSet::Draft6 | HeaderSet::Legacy => 3,
            HeaderSet::Ietf => 2,
        })
        .sum();
    fields + 1
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
pub fn policy_field(policies: &[Arc<Policy>]) -> Option<HeaderValue> {
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
    use sluicegate_core::calendar::{Calendar, CalendarUnit};
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
    fn small_numbers_are_their_decimal_text() {
        for n in 0..1_200u64 {
            match small_number(n) {
                Some(v) => assert_eq!(v, n.to_string().as_str(), "{n}"),
                None => assert!(n >= 1_000, "{n} is not in the table"),
            }
        }
    }

    /// The headers as the renderer says them, `name: value` (the oracle of the sink).
    fn rendered(sets: &[HeaderSet], verdict: &Verdict) -> Vec<String> {
        let mut out: Vec<(Header, Value)> = Vec::new();
        render::write_headers(sets, verdict, &SystemClock, &mut out);
        let mut text: Vec<String> = out
            .iter()
            .map(|(h, v)| format!("{}: {v}", h.name()))
            .collect();
        text.sort();
        text
    }

    fn sent(headers: &HeaderMap) -> Vec<String> {
        let mut text: Vec<String> = headers
            .iter()
            .map(|(h, v)| format!("{h}: {}", v.to_str().unwrap()))
            .collect();
        text.sort();
        text
    }

    proptest::proptest! {
        /// A route's pre-rendered values, the small-number table and the shared buffer
        /// send exactly what the renderer says, whatever the numbers (limits a key's
        /// override changed, numbers around the table's end, huge ones).
        #[test]
        fn route_headers_are_what_the_renderer_says(
            decided in proptest::collection::vec(
                (
                    (1..3u64, proptest::bool::ANY),
                    (0..2_000u64, 0..2_000u64, 0..3_000_000u64, proptest::bool::ANY),
                ),
                1..4,
            ),
            big in proptest::bool::ANY,
        ) {
            let scale = if big { 1_000_000_007 } else { 1 };
            let mut policies = Vec::new();
            let mut entries = Vec::new();
            for (i, ((own, own_limit), (limit, remaining, reset, allowed))) in
                decided.into_iter().enumerate()
            {
                let own = own * if big { 400_000_000 } else { 500 };
                let p = policy(&format!("p{i}"), own, Duration::from_secs(60), Mode::Reject);
                // A key's override may decide with another limit than the policy's.
                let limit = if own_limit { own } else { limit * scale };
                let d = if allowed {
                    Decision::allow(limit, remaining * scale, reset * scale)
                } else {
                    Decision::deny(limit, 0, reset * scale, reset * scale / 2 + 1)
                };
                policies.push(Arc::clone(&p));
                entries.push((p, d, 1));
            }
            let verdict = Verdict::combine(entries);
            let fields = RouteFields::new(&policies);
            // Not legacy: its reset is the clock's second, which may turn between calls.
            let sets = [HeaderSet::Draft6, HeaderSet::Ietf];
            let mut h = HeaderMap::new();
            write_route_headers(&sets, &verdict, &fields, &mut h);
            proptest::prop_assert_eq!(sent(&h), rendered(&sets, &verdict));
            let mut legacy = HeaderMap::new();
            write_route_headers(&[HeaderSet::Legacy], &verdict, &fields, &mut legacy);
            let mut plain = HeaderMap::new();
            write_headers(&[HeaderSet::Legacy], &verdict, &mut plain);
            for name in ["x-ratelimit-limit", "x-ratelimit-remaining", "retry-after"] {
                proptest::prop_assert_eq!(legacy.get(name), plain.get(name));
            }
        }
    }

    /// Bytes near the edges of printable ASCII (tab, `0x1f`, space, `~`, DEL, `0x80`,
    /// `0xff`) among printable ones, at every length around the 8-byte words.
    fn edge_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let byte = prop_oneof![
            8 => 0x20..=0x7eu8,
            1 => proptest::sample::select(vec![0u8, 0x09, 0x1f, 0x20, 0x7e, 0x7f, 0x80, 0xa0, 0xff]),
            1 => any::<u8>(),
        ];
        proptest::collection::vec(byte, 0..40)
    }

    proptest::proptest! {
        /// The word-wise test says what a byte-by-byte one says.
        #[test]
        fn printable_is_the_byte_test(bytes in edge_bytes()) {
            let slow = bytes.iter().all(|b| (0x20..=0x7e).contains(b));
            proptest::prop_assert_eq!(printable(&bytes), slow);
        }

        /// The unchecked value is the one the safe constructor makes (or refuses).
        #[test]
        fn text_value_is_the_checked_one(bytes in edge_bytes()) {
            let checked = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(&bytes)).ok();
            let fast = text_value(&bytes);
            proptest::prop_assert_eq!(fast.as_ref().map(HeaderValue::as_bytes), checked.as_ref().map(HeaderValue::as_bytes));
            proptest::prop_assert_eq!(fast.as_ref().map(HeaderValue::is_sensitive), checked.as_ref().map(HeaderValue::is_sensitive));
        }

        /// A number's value is the one `http` makes from the integer.
        #[test]
        fn digits_are_http_s_integer_value(n in proptest::num::u64::ANY, shift in 0..64u32) {
            for n in [n, n >> shift] {
                let value = digits(n);
                proptest::prop_assert_eq!(&value, &HeaderValue::from(n));
                let text = n.to_string();
                proptest::prop_assert_eq!(value.to_str().ok(), Some(text.as_str()));
            }
        }
    }

    #[test]
    fn route_fields_leave_out_a_calendar_policy_field() {
        let day = Arc::new(
            Policy::builder(
                "day",
                AlgorithmKind::FixedWindow,
                10,
                Duration::from_secs(86_400),
            )
            .calendar(Calendar::new(CalendarUnit::Day, "UTC").unwrap())
            .build()
            .unwrap(),
        );
        let plain = policy("p", 5, Duration::from_secs(1), Mode::Reject);
        assert!(
            RouteFields::new(&[Arc::clone(&plain), day])
                .policy_field()
                .is_none()
        );
        assert_eq!(
            RouteFields::new(&[plain]).policy_field().unwrap(),
            r#""p";q=5;w=1"#
        );
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
