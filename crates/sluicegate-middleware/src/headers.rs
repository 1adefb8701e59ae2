//! The rate-limit headers of admitted and rejected responses, and the 429 response.
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

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use sfv::{Integer, KeyRef, ListSerializer, StringRef};
use sluicegate_core::{Clock, Micros, Outcome, Policy, PolicyDecision, SystemClock, Verdict};

/// A set of rate-limit headers. Configured as `"draft-6"`, `"ietf"` or `"legacy"`.
///
/// ```
/// use sluicegate_middleware::HeaderSet;
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

const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

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
/// assert_eq!(sluicegate_middleware::headers::retry_after_secs(&verdict), Some(1));
/// ```
pub fn retry_after_secs(verdict: &Verdict) -> Option<u64> {
    if verdict.allowed {
        return None;
    }
    Some(ceil_secs(verdict.retry_after().unwrap_or(1_000_000)).max(1))
}

/// The policies whose numbers are shown: enforcing, decided by the store.
fn shown(verdict: &Verdict) -> impl Iterator<Item = &PolicyDecision> {
    verdict
        .decisions
        .iter()
        .filter(|d| d.policy.is_enforcing() && d.outcome != Outcome::StoreError)
}

/// The one policy `draft-6` and `legacy` describe.
fn headline(verdict: &Verdict) -> Option<&PolicyDecision> {
    sluicegate_core::verdict::deciding(shown(verdict), verdict.allowed)
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
    if let Some(secs) = retry_after_secs(verdict) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    for set in sets {
        match set {
            HeaderSet::Draft6 => {
                if let Some(d) = headline(verdict) {
                    let d = &d.decision;
                    headers.insert(RATELIMIT_LIMIT, HeaderValue::from(d.limit));
                    headers.insert(RATELIMIT_REMAINING, HeaderValue::from(d.remaining));
                    headers.insert(RATELIMIT_RESET, HeaderValue::from(ceil_secs(d.reset_after)));
                }
            }
            HeaderSet::Legacy => {
                if let Some(d) = headline(verdict) {
                    let d = &d.decision;
                    let now = SystemClock.now();
                    let reset = ceil_secs(now.saturating_add(d.reset_after));
                    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(d.limit));
                    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(d.remaining));
                    headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
                }
            }
            HeaderSet::Ietf => write_ietf(verdict, policy_field, headers),
        }
    }
}

fn sf_int(value: u64) -> Integer {
    i64::try_from(value)
        .ok()
        .and_then(|v| Integer::try_from(v).ok())
        .unwrap_or(Integer::MAX)
}

const KEY_Q: &KeyRef = KeyRef::constant("q");
const KEY_W: &KeyRef = KeyRef::constant("w");
const KEY_R: &KeyRef = KeyRef::constant("r");
const KEY_T: &KeyRef = KeyRef::constant("t");

/// The `RateLimit-Policy` field for these policies (shadow ones left out): `None` when
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
    let limits: Vec<(&Policy, u64)> = policies.iter().map(|p| (&**p, p.limit())).collect();
    policy_field_with(&limits)
}

/// [`policy_field`] with each policy's limit as decided (a key's override may give it
/// another than the policy's).
fn policy_field_with(policies: &[(&Policy, u64)]) -> Option<HeaderValue> {
    let now = SystemClock.now();
    let mut list = ListSerializer::new();
    for (policy, limit) in policies.iter().filter(|(p, _)| p.is_enforcing()) {
        let Ok(name) = StringRef::from_str(policy.name()) else {
            continue;
        };
        // A calendar window's real length: 23 hours on the day DST starts, 29 days in a
        // leap February.
        let window = ceil_secs(policy.window_at(now)).max(1);
        list.bare_item(name)
            .parameter(KEY_Q, sf_int(*limit))
            .parameter(KEY_W, sf_int(window));
    }
    // `finish` is `None` for an empty list, which is not a valid field value.
    list.finish().and_then(|v| HeaderValue::try_from(v).ok())
}

fn write_ietf(verdict: &Verdict, cached_policy: Option<&HeaderValue>, headers: &mut HeaderMap) {
    let mut state = ListSerializer::new();
    let mut shown_policies: Vec<(&Policy, u64)> = Vec::new();
    // The route's precomputed field holds the policies' own limits: not when an override
    // gave this key another.
    let cached_policy =
        cached_policy.filter(|_| shown(verdict).all(|d| d.decision.limit == d.policy.limit()));
    for d in shown(verdict) {
        let Ok(name) = StringRef::from_str(d.policy.name()) else {
            continue;
        };
        let reset = ceil_secs(d.decision.reset_after).max(1);
        state
            .bare_item(name)
            .parameter(KEY_R, sf_int(d.decision.remaining))
            .parameter(KEY_T, sf_int(reset));
        if cached_policy.is_none() {
            shown_policies.push((&d.policy, d.decision.limit));
        }
    }
    let Some(value) = state.finish().and_then(|v| HeaderValue::try_from(v).ok()) else {
        return;
    };
    headers.insert(RATELIMIT, value);
    let policy = match cached_policy {
        Some(cached) => Some(cached.clone()),
        None => policy_field_with(&shown_policies),
    };
    if let Some(policy) = policy {
        headers.insert(RATELIMIT_POLICY, policy);
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
    pub fn new(verdict: &Verdict) -> RejectionBody {
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
        RejectionBody {
            error: "rate_limit_exceeded".to_owned(),
            message,
            retry_after_seconds: retry,
            policy,
        }
    }
}

/// The rejection of `verdict`: `status` (429 unless a forward-auth peer needs 401/403),
/// `Content-Type: application/json`, `Cache-Control: no-store` (RFC 6585: a 429 must not be
/// cached), `Retry-After`, the header sets, and the [`RejectionBody`].
pub fn rejection_response(
    sets: &[HeaderSet],
    verdict: &Verdict,
    status: StatusCode,
) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(&RejectionBody::new(verdict)).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    write_headers(sets, verdict, headers);
    response
}

/// The answer to a client on a deny list: `403`, JSON `{"error": "forbidden", "message": …}`,
/// not cacheable (the lists change with the configuration).
pub fn forbidden_response() -> Response<Full<Bytes>> {
    const BODY: &str =
        r#"{"error":"forbidden","message":"this client is not allowed to use this service"}"#;
    let mut response = Response::new(Full::new(Bytes::from_static(BODY.as_bytes())));
    *response.status_mut() = StatusCode::FORBIDDEN;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate_core::{AlgorithmKind, Decision, Mode, Policy};
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
        let mut h = HeaderMap::new();
        write_headers(&[HeaderSet::Ietf, HeaderSet::Draft6], &verdict, &mut h);
        assert_eq!(
            h["ratelimit-policy"],
            r#""burst";q=5;w=1, "day";q=1000;w=86400"#
        );
        assert_eq!(h["ratelimit"], r#""burst";r=4;t=1, "day";r=999;t=86400"#);
        assert_eq!(h["ratelimit-remaining"], "4");
        assert!(!h.contains_key(header::RETRY_AFTER));
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
        let body = RejectionBody::new(&verdict);
        assert_eq!(body.policy, "b");
        assert_eq!(body.retry_after_seconds, 13);
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
        let mut h = HeaderMap::new();
        write_headers(
            &[HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy],
            &verdict,
            &mut h,
        );
        assert!(h.is_empty());
    }
}
