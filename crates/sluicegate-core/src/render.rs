//! The rate-limit headers of admitted and rejected responses, and the JSON bodies of a 429
//! and a 403, rendered without any transport: header names and values, body bytes. The
//! HTTP middleware writes them into an `http::HeaderMap`, the Envoy service into
//! `response_headers_to_add`, so every front end sends the same bytes.
//!
//! Three sets can be sent, alone or together ([`HeaderSet`]):
//!
//! | set       | headers                                                           |
//! |-----------|-------------------------------------------------------------------|
//! | `draft-6` | `RateLimit-Limit: 10`, `RateLimit-Remaining: 9`, `RateLimit-Reset: 6` |
//! | `ietf`    | `RateLimit-Policy: "auth";q=10;w=60`, `RateLimit: "auth";r=9;t=6`   |
//! | `legacy`  | `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds) |
//!
//! `draft-6` and `legacy` describe one policy: on a rejection the one that rejected (the
//! longest `retry_after`), otherwise the one with the fewest requests remaining. `ietf`
//! (draft-ietf-httpapi-ratelimit-headers-11, Structured Fields) lists every policy.
//! Second values round up; `w` and `t` are at least 1. Policies in shadow mode, and
//! verdicts made without the store (`on_store_error`), send no rate-limit headers: they
//! have no numbers a client could act on.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::clock::{Clock, Micros};
use crate::policy::Policy;
use crate::verdict::{Outcome, PolicyDecisionOf, VerdictOf};

/// A set of rate-limit headers. Configured as `"draft-6"`, `"ietf"` or `"legacy"`.
///
/// ```
/// use sluicegate_core::render::HeaderSet;
/// assert_eq!("ietf".parse::<HeaderSet>().unwrap(), HeaderSet::Ietf);
/// assert_eq!(HeaderSet::Draft6.to_string(), "draft-6");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HeaderSet {
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (draft-ietf-httpapi-ratelimit-headers-06).
    #[serde(rename = "draft-6")]
    Draft6,
    /// `RateLimit-Policy` and `RateLimit` as Structured Fields (draft 11).
    #[serde(rename = "ietf")]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds).
    #[serde(rename = "legacy")]
    Legacy,
}

impl HeaderSet {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            HeaderSet::Draft6 => "draft-6",
            HeaderSet::Ietf => "ietf",
            HeaderSet::Legacy => "legacy",
        }
    }

    /// The contract's default: `draft-6` and `ietf`.
    pub const DEFAULT: [HeaderSet; 2] = [HeaderSet::Draft6, HeaderSet::Ietf];
}

impl fmt::Display for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A header set name that is not `draft-6`, `ietf` or `legacy`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown header set {0:?}; expected \"draft-6\", \"ietf\" or \"legacy\"")]
pub struct UnknownHeaderSet(pub String);

impl FromStr for HeaderSet {
    type Err = UnknownHeaderSet;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy]
            .into_iter()
            .find(|set| set.name() == s)
            .ok_or_else(|| UnknownHeaderSet(s.to_owned()))
    }
}

/// A header this module writes. Names are lower case, as HTTP/2 and Envoy want them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    /// `retry-after`
    RetryAfter,
    /// `content-type`
    ContentType,
    /// `cache-control`
    CacheControl,
    /// `ratelimit-limit` (draft-6)
    RateLimitLimit,
    /// `ratelimit-remaining` (draft-6)
    RateLimitRemaining,
    /// `ratelimit-reset` (draft-6)
    RateLimitReset,
    /// `ratelimit-policy` (ietf)
    RateLimitPolicy,
    /// `ratelimit` (ietf)
    RateLimit,
    /// `x-ratelimit-limit` (legacy)
    XRateLimitLimit,
    /// `x-ratelimit-remaining` (legacy)
    XRateLimitRemaining,
    /// `x-ratelimit-reset` (legacy)
    XRateLimitReset,
}

impl Header {
    /// The header's name, lower case.
    pub fn name(self) -> &'static str {
        match self {
            Header::RetryAfter => "retry-after",
            Header::ContentType => "content-type",
            Header::CacheControl => "cache-control",
            Header::RateLimitLimit => "ratelimit-limit",
            Header::RateLimitRemaining => "ratelimit-remaining",
            Header::RateLimitReset => "ratelimit-reset",
            Header::RateLimitPolicy => "ratelimit-policy",
            Header::RateLimit => "ratelimit",
            Header::XRateLimitLimit => "x-ratelimit-limit",
            Header::XRateLimitRemaining => "x-ratelimit-remaining",
            Header::XRateLimitReset => "x-ratelimit-reset",
        }
    }
}

/// A header value. Numbers stay numbers so a sink can format them without a check (an
/// `http::HeaderValue` from an integer needs no validation); every variant is visible ASCII.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A whole number, written in decimal.
    Int(u64),
    /// A fixed value such as `application/json`.
    Static(&'static str),
    /// A Structured Fields list (serialised by `sfv`, so ASCII without control characters).
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Static(s) => f.write_str(s),
            Value::Text(s) => f.write_str(s),
        }
    }
}

/// Where rendered headers go: an HTTP header map, Envoy's list of headers to add.
pub trait HeaderSink {
    /// Sets `name` to `value`, replacing an earlier value of `name`.
    fn set(&mut self, name: Header, value: Value);

    /// Sets `RateLimit-Policy` to a value the sink computed ahead with [`policy_field`] for
    /// the request's policies (it depends on the route only). `false` when it has none: the
    /// renderer then computes the field from the verdict.
    fn set_cached_policy_field(&mut self) -> bool {
        false
    }

    /// Sets `name` to a Structured Field list the renderer wrote into a buffer on its stack
    /// (the `RateLimit` field): printable ASCII, as [`Value::Text`]. A sink that copies the
    /// bytes anyway (a header map's value) takes them borrowed: the `String` of
    /// [`Value::Text`] was an allocation and a free a response more, two when turned into
    /// `Bytes` (callgrind, docs/benchmarks/middleware.md).
    fn set_text(&mut self, name: Header, text: &[u8]) {
        self.set(
            name,
            Value::Text(String::from_utf8_lossy(text).into_owned()),
        );
    }
}

/// Whole seconds, rounded up.
pub fn ceil_secs(micros: Micros) -> u64 {
    micros.div_ceil(1_000_000)
}

/// The `Retry-After` of a rejected verdict: whole seconds, at least 1. `None` when admitted.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, OnStoreError, Policy, Verdict};
/// let p = Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(1))
///     .on_store_error(OnStoreError::Deny).build().unwrap());
/// let verdict = Verdict::store_failed(&[p]);
/// assert_eq!(sluicegate_core::render::retry_after_secs(&verdict), Some(1));
/// ```
pub fn retry_after_secs(verdict: &VerdictOf<'_>) -> Option<u64> {
    if verdict.allowed {
        return None;
    }
    Some(ceil_secs(verdict.retry_after().unwrap_or(1_000_000)).max(1))
}

/// The policies whose numbers are shown: enforcing, decided by the store.
fn shown<'v, 'p>(verdict: &'v VerdictOf<'p>) -> impl Iterator<Item = &'v PolicyDecisionOf<'p>> {
    verdict
        .decisions
        .iter()
        .filter(|d| d.policy.is_enforcing() && d.outcome != Outcome::StoreError)
}

/// The one policy `draft-6` and `legacy` describe.
fn headline<'v, 'p>(verdict: &'v VerdictOf<'p>) -> Option<&'v PolicyDecisionOf<'p>> {
    crate::verdict::deciding(shown(verdict), verdict.allowed)
}

/// Writes the configured header sets for `verdict` into `sink`, plus `Retry-After` when it
/// is a rejection. `clock` is read only for `legacy`'s Unix time and calendar windows.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::render::{Header, HeaderSet, HeaderSink, Value, write_headers};
/// use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy, SystemClock};
///
/// let auth = Arc::new(Policy::builder("auth", AlgorithmKind::TokenBucket, 10, Duration::from_secs(60)).build()?);
/// let policies = [auth];
/// let verdict = MemoryStore::new(10).check_now(CheckRequest::new(&policies, "ip:192.0.2.1", 1))?;
/// let mut headers: Vec<(Header, Value)> = Vec::new();
/// write_headers(&[HeaderSet::Draft6, HeaderSet::Ietf], &verdict, &SystemClock, &mut headers);
/// let text: Vec<String> = headers.iter().map(|(h, v)| format!("{}: {v}", h.name())).collect();
/// assert_eq!(text, [
///     "ratelimit-limit: 10", "ratelimit-remaining: 9", "ratelimit-reset: 6",
///     r#"ratelimit: "auth";r=9;t=6"#, r#"ratelimit-policy: "auth";q=10;w=60"#,
/// ]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_headers(
    sets: &[HeaderSet],
    verdict: &VerdictOf<'_>,
    clock: &dyn Clock,
    sink: &mut impl HeaderSink,
) {
    if let Some(secs) = retry_after_secs(verdict) {
        sink.set(Header::RetryAfter, Value::Int(secs));
    }
    for set in sets {
        match set {
            HeaderSet::Draft6 => {
                if let Some(d) = headline(verdict) {
                    let d = &d.decision;
                    sink.set(Header::RateLimitLimit, Value::Int(d.limit));
                    sink.set(Header::RateLimitRemaining, Value::Int(d.remaining));
                    sink.set(Header::RateLimitReset, Value::Int(ceil_secs(d.reset_after)));
                }
            }
            HeaderSet::Legacy => {
                if let Some(d) = headline(verdict) {
                    let d = &d.decision;
                    let reset = ceil_secs(clock.now().saturating_add(d.reset_after));
                    sink.set(Header::XRateLimitLimit, Value::Int(d.limit));
                    sink.set(Header::XRateLimitRemaining, Value::Int(d.remaining));
                    sink.set(Header::XRateLimitReset, Value::Int(reset));
                }
            }
            HeaderSet::Ietf => write_ietf(verdict, clock, sink),
        }
    }
}

/// The two `ietf` fields are Structured Field lists (RFC 9651, §4.1.1) of one shape: strings
/// (the policy names) each with two integer parameters. Written by hand into one buffer,
/// integers by `itoa`: `sfv`'s serialiser took ~1,700 instructions a response, most of it
/// `core::fmt` for four integers and a `String` grown piece by piece (callgrind,
/// docs/benchmarks/server.md). `sfv` stays the oracle: `sf_list_is_what_sfv_writes` checks
/// every string and integer against it, and the middleware's tests parse the headers with it.
struct SfList<O = String> {
    out: O,
}

/// Where an [`SfList`] is written: a `String`, or a [`StackText`] for the per-response
/// `RateLimit` field.
trait SfOut {
    fn push_str(&mut self, s: &str);
    fn is_empty(&self) -> bool;
}

impl SfOut for String {
    #[inline]
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
    fn is_empty(&self) -> bool {
        String::is_empty(self)
    }
}

/// Room for the `RateLimit` field of a few policies with names of a few dozen bytes (a
/// member is `"name";r=…;t=…`: the name's bytes and at most 40 more).
const STACK_TEXT: usize = 256;

/// A fixed buffer on the stack; text that does not fit marks it `overflowed` (the caller
/// then renders into a `String`), it is never cut.
struct StackText {
    buf: [u8; STACK_TEXT],
    len: usize,
    overflowed: bool,
}

impl StackText {
    fn new() -> StackText {
        StackText {
            buf: [0; STACK_TEXT],
            len: 0,
            overflowed: false,
        }
    }

    /// The text (only whole `&str`s of printable ASCII were copied in), unless it
    /// overflowed. Bytes, not `&str`: checking UTF-8 again cost ~70 instructions.
    fn text(&self) -> Option<&[u8]> {
        (!self.overflowed).then(|| &self.buf[..self.len])
    }
}

impl SfOut for StackText {
    // Inlined, the copies of the list's constant pieces (`"`, `;r=`) are stores, not
    // `memcpy` calls: called, they cost ~250 instructions a response more than the
    // `String` (callgrind, docs/benchmarks/middleware.md).
    #[inline(always)]
    fn push_str(&mut self, s: &str) {
        let end = self.len + s.len();
        match self.buf.get_mut(self.len..end) {
            Some(room) if !self.overflowed => {
                room.copy_from_slice(s.as_bytes());
                self.len = end;
            }
            _ => self.overflowed = true,
        }
    }
    fn is_empty(&self) -> bool {
        self.len == 0 && !self.overflowed
    }
}

/// The largest integer a Structured Field carries (15 digits); larger numbers are sent as it.
const SF_MAX_INTEGER: u64 = 999_999_999_999_999;

impl SfList {
    fn new(members: usize) -> SfList {
        // `"name";q=…;w=…`: names are at most 128 bytes, usually a dozen.
        SfList {
            out: String::with_capacity(48 * members),
        }
    }

    /// The field; `None` for an empty list, which is not a valid field value.
    fn finish(self) -> Option<String> {
        (!self.out.is_empty()).then_some(self.out)
    }
}

impl<O: SfOut> SfList<O> {
    /// Adds `"name";k1=v1;k2=v2`; nothing when the name has a character an sf-string cannot
    /// carry (outside printable ASCII), as `sfv` refuses it. The keys are constants.
    fn member(&mut self, name: &str, params: [(&str, u64); 2]) {
        if !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return;
        }
        if !self.out.is_empty() {
            self.out.push_str(", ");
        }
        self.out.push_str("\"");
        // Names rarely hold a quote or a backslash: copied whole then, not char by char.
        if name.bytes().any(|b| matches!(b, b'"' | b'\\')) {
            let mut char_buf = [0u8; 4];
            for c in name.chars() {
                if matches!(c, '"' | '\\') {
                    self.out.push_str("\\");
                }
                self.out.push_str(c.encode_utf8(&mut char_buf));
            }
        } else {
            self.out.push_str(name);
        }
        self.out.push_str("\"");
        let mut digits = itoa::Buffer::new();
        for (key, value) in params {
            self.out.push_str(";");
            self.out.push_str(key);
            self.out.push_str("=");
            self.out.push_str(digits.format(value.min(SF_MAX_INTEGER)));
        }
    }
}

/// The `RateLimit-Policy` field for these policies (shadow ones left out) at `now`: `None`
/// when none is left.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, Policy};
/// let auth = Arc::new(Policy::builder("auth", AlgorithmKind::Gcra, 10, Duration::from_secs(60)).build().unwrap());
/// let field = sluicegate_core::render::policy_field(&[auth], 0).unwrap();
/// assert_eq!(field, r#""auth";q=10;w=60"#);
/// ```
pub fn policy_field(policies: &[Arc<Policy>], now: Micros) -> Option<String> {
    let limits: Vec<(&Policy, u64)> = policies.iter().map(|p| (&**p, p.limit())).collect();
    policy_field_with(&limits, now)
}

/// [`policy_field`] with each policy's limit as decided (a key's override may give it
/// another than the policy's).
fn policy_field_with(policies: &[(&Policy, u64)], now: Micros) -> Option<String> {
    let mut list = SfList::new(policies.len());
    for (policy, limit) in policies.iter().filter(|(p, _)| p.is_enforcing()) {
        // A calendar window's real length: 23 hours on the day DST starts, 29 days in a
        // leap February.
        let window = ceil_secs(policy.window_at(now)).max(1);
        list.member(policy.name(), [("q", *limit), ("w", window)]);
    }
    list.finish()
}

/// The `RateLimit` field's members, written into `list`.
fn rate_limit_members<O: SfOut>(verdict: &VerdictOf<'_>, list: &mut SfList<O>) {
    for d in shown(verdict) {
        let reset = ceil_secs(d.decision.reset_after).max(1);
        list.member(d.policy.name(), [("r", d.decision.remaining), ("t", reset)]);
    }
}

fn write_ietf(verdict: &VerdictOf<'_>, clock: &dyn Clock, sink: &mut impl HeaderSink) {
    // Rendered on the stack (it changes with every response); into a `String` only when
    // the policies' names make it longer than the buffer.
    let mut state = SfList {
        out: StackText::new(),
    };
    rate_limit_members(verdict, &mut state);
    if state.out.is_empty() {
        return;
    }
    match state.out.text() {
        Some(text) => sink.set_text(Header::RateLimit, text),
        None => {
            let mut long = SfList::new(verdict.decisions.len());
            rate_limit_members(verdict, &mut long);
            let Some(value) = long.finish() else {
                return;
            };
            sink.set(Header::RateLimit, Value::Text(value));
        }
    }
    // The route's precomputed field holds the policies' own limits: not when a key's
    // override gave one another.
    let own_limits = shown(verdict).all(|d| d.decision.limit == d.policy.limit());
    if own_limits && sink.set_cached_policy_field() {
        return;
    }
    let shown: Vec<(&Policy, u64)> = shown(verdict)
        .map(|d| (&**d.policy, d.decision.limit))
        .collect();
    if let Some(policy) = policy_field_with(&shown, clock.now()) {
        sink.set(Header::RateLimitPolicy, Value::Text(policy));
    }
}

/// Collects headers in order; setting a header again replaces its value in place.
impl HeaderSink for Vec<(Header, Value)> {
    fn set(&mut self, name: Header, value: Value) {
        match self.iter_mut().find(|(h, _)| *h == name) {
            Some(entry) => entry.1 = value,
            None => self.push((name, value)),
        }
    }
}

/// The contract's JSON body of a 429.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectionBody {
    /// Always `rate_limit_exceeded`.
    pub error: String,
    /// A sentence for humans.
    pub message: String,
    /// The same number as `Retry-After`.
    pub retry_after_seconds: u64,
    /// The policy that rejected the request.
    pub policy: String,
}

impl RejectionBody {
    /// The body for a rejected `verdict`.
    pub fn new(verdict: &VerdictOf<'_>) -> RejectionBody {
        let retry = retry_after_secs(verdict).unwrap_or(1);
        let deciding = verdict.deciding();
        let policy = deciding
            .map(|d| d.policy.name().to_owned())
            .unwrap_or_default();
        let message = match deciding {
            Some(d) if d.outcome == Outcome::StoreError => format!(
                "The rate limiter is unavailable and policy \"{policy}\" fails closed; retry in {retry} s."
            ),
            _ => format!("Too many requests for policy \"{policy}\"; retry in {retry} s."),
        };
        RejectionBody::with(policy, message, retry)
    }

    /// A body for `policy` (or a pool's name) with its own `message`.
    pub fn with(policy: String, message: String, retry_after_seconds: u64) -> RejectionBody {
        RejectionBody {
            error: "rate_limit_exceeded".to_owned(),
            message,
            retry_after_seconds,
            policy,
        }
    }

    /// The body's JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising strings and an integer cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// The JSON of the answer to a client on a deny list (`403`).
pub const FORBIDDEN_BODY: &str =
    r#"{"error":"forbidden","message":"this client is not allowed to use this service"}"#;

/// The media type of both bodies.
pub const JSON_TYPE: &str = "application/json";

/// `Content-Type` of both bodies, as a header value.
pub const JSON: Value = Value::Static(JSON_TYPE);

/// `Cache-Control` of a 429 and a 403: RFC 6585 says a 429 must not be cached, and the
/// access lists change with the configuration.
pub const NO_STORE: &str = "no-store";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::{AlgorithmKind, Decision, Mode, Verdict};
    use proptest::prelude::*;
    use std::time::Duration;

    fn policy(name: &str, limit: u64, period: Duration, mode: Mode) -> Arc<Policy> {
        Arc::new(
            Policy::builder(name, AlgorithmKind::TokenBucket, limit, period)
                .mode(mode)
                .build()
                .unwrap(),
        )
    }

    fn render(sets: &[HeaderSet], verdict: &Verdict) -> Vec<(Header, Value)> {
        let mut out = Vec::new();
        write_headers(sets, verdict, &SystemClock, &mut out);
        out
    }

    fn get(headers: &[(Header, Value)], name: Header) -> Option<String> {
        headers
            .iter()
            .find(|(h, _)| *h == name)
            .map(|(_, v)| v.to_string())
    }

    #[test]
    fn ietf_lists_every_enforcing_policy_and_rounds_up() {
        let verdict = Verdict::combine(vec![
            (
                policy("burst", 5, Duration::from_millis(250), Mode::Reject),
                Decision::allow(5, 4, 1),
                1,
            ),
            (
                policy("day", 1000, Duration::from_secs(86_400), Mode::Reject),
                Decision::allow(1000, 999, 86_399_000_001),
                1,
            ),
            (
                policy("dry", 1, Duration::from_secs(1), Mode::Shadow),
                Decision::deny(1, 0, 1, 1),
                1,
            ),
        ]);
        let h = render(&[HeaderSet::Ietf, HeaderSet::Draft6], &verdict);
        assert_eq!(
            get(&h, Header::RateLimitPolicy).unwrap(),
            r#""burst";q=5;w=1, "day";q=1000;w=86400"#
        );
        assert_eq!(
            get(&h, Header::RateLimit).unwrap(),
            r#""burst";r=4;t=1, "day";r=999;t=86400"#
        );
        assert_eq!(get(&h, Header::RateLimitRemaining).unwrap(), "4");
        assert_eq!(get(&h, Header::RetryAfter), None);
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
        let h = render(&[HeaderSet::Legacy], &verdict);
        assert_eq!(get(&h, Header::RetryAfter).unwrap(), "13");
        assert_eq!(get(&h, Header::XRateLimitLimit).unwrap(), "5");
        let body = RejectionBody::new(&verdict);
        assert_eq!(body.policy, "b");
        assert_eq!(body.retry_after_seconds, 13);
        assert_eq!(
            String::from_utf8(body.to_json()).unwrap(),
            r#"{"error":"rate_limit_exceeded","message":"Too many requests for policy \"b\"; retry in 13 s.","retry_after_seconds":13,"policy":"b"}"#
        );
    }

    #[test]
    fn header_sets_parse_as_configured() {
        let sets: Vec<HeaderSet> =
            serde_json::from_str(r#"["draft-6", "ietf", "legacy"]"#).unwrap();
        assert_eq!(
            sets,
            [HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy]
        );
        assert!(serde_json::from_str::<HeaderSet>(r#""draft-7""#).is_err());
        assert!("x".parse::<HeaderSet>().is_err());
    }

    #[test]
    fn store_failure_sends_no_numbers() {
        let p = policy("p", 5, Duration::from_secs(1), Mode::Reject);
        let verdict = Verdict::store_failed(&[p]);
        let h = render(
            &[HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy],
            &verdict,
        );
        assert!(h.is_empty());
    }

    /// A number for the oracle: `sfv`'s largest integer for anything beyond it.
    fn sf_integer(value: u64) -> sfv::Integer {
        i64::try_from(value)
            .ok()
            .and_then(|v| sfv::Integer::try_from(v).ok())
            .unwrap_or(sfv::Integer::MAX)
    }

    fn sf_number() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..1_000u64,
            any::<u64>(),
            SF_MAX_INTEGER - 2..=SF_MAX_INTEGER + 2,
        ]
    }

    fn sf_name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9_.-]{1,16}",
            "[ -~]{0,12}",
            r#"[a\\"]{0,4}"#,
            any::<String>()
        ]
    }

    proptest! {
        #[test]
        fn sf_list_is_what_sfv_writes(
            members in proptest::collection::vec((sf_name(), sf_number(), sf_number()), 0..4),
        ) {
            let mut ours = SfList::new(members.len());
            let mut oracle = sfv::ListSerializer::new();
            for (name, a, b) in &members {
                ours.member(name, [("r", *a), ("t", *b)]);
                if let Ok(item) = sfv::StringRef::from_str(name) {
                    oracle
                        .bare_item(item)
                        .parameter(sfv::KeyRef::constant("r"), sf_integer(*a))
                        .parameter(sfv::KeyRef::constant("t"), sf_integer(*b));
                }
            }
            prop_assert_eq!(ours.finish(), oracle.finish());
        }
    }

    proptest! {
        /// The `RateLimit` field rendered on the stack is the list a `String` holds, or
        /// marked overflowed (never cut) when it does not fit; `write_headers` then sends
        /// the `String`'s.
        #[test]
        fn stack_list_is_the_string_list(
            members in proptest::collection::vec(
                (prop_oneof![sf_name(), "[a-z\\\\\"]{60,130}"], sf_number(), sf_number()),
                0..5,
            ),
            names in proptest::collection::vec("[A-Za-z0-9_.-]{1,128}", 1..5),
            remaining in any::<u64>(),
        ) {
            let mut heap = SfList::new(members.len());
            let mut stack = SfList { out: StackText::new() };
            for (name, a, b) in &members {
                heap.member(name, [("r", *a), ("t", *b)]);
                stack.member(name, [("r", *a), ("t", *b)]);
            }
            let heap = heap.finish();
            match stack.out.text() {
                Some(b"") => prop_assert_eq!(heap, None),
                Some(text) => prop_assert_eq!(heap.as_deref().map(str::as_bytes), Some(text)),
                None => prop_assert!(heap.is_some_and(|h| h.len() > STACK_TEXT)),
            }
            // Through the renderer, long (five names of up to 128 bytes overflow the
            // stack) or short: the list a `String` holds.
            let entries: Vec<_> = names
                .iter()
                .map(|name| {
                    let p = policy(name, 5, Duration::from_secs(1), Mode::Reject);
                    (p, Decision::allow(u64::MAX, remaining, 1), 1)
                })
                .collect();
            let verdict = Verdict::combine(entries);
            let mut oracle = SfList::new(verdict.decisions.len());
            rate_limit_members(&verdict, &mut oracle);
            let sent = get(&render(&[HeaderSet::Ietf], &verdict), Header::RateLimit);
            prop_assert_eq!(sent, oracle.finish());
        }
    }

    #[test]
    fn a_header_set_twice_replaces_in_place() {
        let p = policy("p", 5, Duration::from_secs(1), Mode::Reject);
        let verdict = Verdict::combine(vec![(p, Decision::allow(5, 4, 1), 1)]);
        let h = render(&[HeaderSet::Draft6, HeaderSet::Draft6], &verdict);
        assert_eq!(h.len(), 3);
    }
}
