//! The JSON shapes of the decision API (also the OpenAPI schemas).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use sluicegate_core::{PolicyDecision, Verdict};
use utoipa::ToSchema;

/// `POST /v1/check` body: one decision. Its strings are borrowed from the request's bytes
/// where JSON allows (no escapes in them): the common request is parsed without allocating.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckBody<'a> {
    /// A policy name, or a list of names that must all admit (all-or-nothing).
    #[serde(borrow)]
    pub policy: PolicyNames<'a>,
    /// The client key, 1 to 1024 bytes (e.g. a user id or an IP address).
    #[serde(borrow)]
    #[schema(value_type = String)]
    pub key: Cow<'a, str>,
    /// The request's weight; 0 reads without consuming. Default 1.
    #[serde(default = "one", deserialize_with = "whole_number")]
    #[schema(default = 1, minimum = 0)]
    pub cost: u64,
    /// When admitted, answer a `reservation` to settle the real cost later
    /// (`POST /v1/settle`). Needs a cost of at least 1.
    #[serde(default)]
    pub reserve: bool,
}

/// `POST /v1/settle` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    /// The `reservation` of an admitted `/v1/check`.
    pub reservation: String,
    /// The request's real cost.
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub cost: u64,
}

/// `POST /v1/release` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// The `lease` of an admitted `/v1/check` on a concurrency policy.
    pub lease: String,
}

fn one() -> u64 {
    1
}

/// A non-negative whole number, also when written `12.0`: JSON Schema's `integer` is any
/// number without a fractional part, and a request valid by the spec is not refused.
/// `1.5`, `-1` and numbers beyond 2^53 written as floats are errors.
pub(crate) fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_any(Whole { max: u64::MAX })
}

/// The largest whole number JSON carries exactly (2^53): the bound of an override's numbers,
/// which every JSON client (and Redis's doubles) can hold.
pub(crate) const EXACT_MAX: u64 = 9_007_199_254_740_992;

/// [`whole_number`] at most [`EXACT_MAX`].
pub(crate) fn exact_whole_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<u64, D::Error> {
    deserializer.deserialize_any(Whole { max: EXACT_MAX })
}

/// [`exact_whole_number`] for an optional field.
pub(crate) fn optional_exact_whole_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    /// `null` stays "not given"; a number goes through [`exact_whole_number`].
    #[derive(Deserialize)]
    struct Exact(#[serde(deserialize_with = "exact_whole_number")] u64);
    Ok(Option::<Exact>::deserialize(deserializer)?.map(|Exact(n)| n))
}

struct Whole {
    max: u64,
}

impl Visitor<'_> for Whole {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a whole number from 0 to {}", self.max)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        if v <= self.max {
            Ok(v)
        } else {
            Err(E::custom(format_args!("{v} is above {}", self.max)))
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        let v = u64::try_from(v).map_err(|_| E::custom("must not be negative"))?;
        self.visit_u64(v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
        if v.fract() == 0.0 && (0.0..=EXACT).contains(&v) {
            self.visit_u64(v as u64)
        } else {
            Err(E::custom("must be a non-negative whole number"))
        }
    }
}

/// `POST /v1/check` batch body: independent decisions, answered in order.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// Up to 1000 requests.
    pub requests: Vec<serde_json::Value>,
}

/// `"auth"` or `["auth", "daily"]`; one name is borrowed from the request where it can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyNames<'a> {
    /// A single policy.
    One(Cow<'a, str>),
    /// Several policies, all-or-nothing.
    Many(Vec<String>),
}

impl PolicyNames<'_> {
    /// The names, in request order.
    pub fn names(&self) -> Vec<&str> {
        match self {
            PolicyNames::One(name) => vec![name.as_ref()],
            PolicyNames::Many(names) => names.iter().map(String::as_str).collect(),
        }
    }

    /// Whether a list was given (the answer then carries `policies`).
    pub fn is_list(&self) -> bool {
        matches!(self, PolicyNames::Many(_))
    }
}

impl utoipa::PartialSchema for PolicyNames<'_> {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
        let name = || ObjectBuilder::new().schema_type(Type::String);
        OneOfBuilder::new()
            .item(name().description(Some("one policy")))
            .item(
                ArrayBuilder::new()
                    .items(name())
                    // What the server accepts: at least one name, at most 64.
                    .min_items(Some(1))
                    .max_items(Some(64))
                    .description(Some("several policies, all-or-nothing")),
            )
            .into()
    }
}

impl ToSchema for PolicyNames<'_> {}

impl<'de: 'a, 'a> Deserialize<'de> for PolicyNames<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NamesVisitor<'a>(PhantomData<&'a str>);
        impl<'de: 'a, 'a> Visitor<'de> for NamesVisitor<'a> {
            type Value = PolicyNames<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a policy name or a list of policy names")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(PolicyNames::One(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(PolicyNames::One(Cow::Owned(v.to_owned())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    if names.len() >= 64 {
                        return Err(de::Error::custom("at most 64 policies in one request"));
                    }
                    names.push(name);
                }
                Ok(PolicyNames::Many(names))
            }
        }
        deserializer.deserialize_any(NamesVisitor(PhantomData))
    }
}

/// One policy's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct PolicyResult {
    /// Whether this policy admits the request.
    pub allowed: bool,
    /// The policy's name.
    pub policy: String,
    /// Requests per period.
    pub limit: u64,
    /// Whole requests admissible now.
    pub remaining: u64,
    /// Milliseconds until the key is back to full (rounded up).
    pub reset_after_ms: u64,
    /// When denied: milliseconds until this request's cost would be admitted; else null.
    pub retry_after_ms: Option<u64>,
    /// Delay mode only: milliseconds the caller must wait before going ahead (its turn is
    /// reserved). Absent when there is nothing to wait for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

/// The answer to one decision. The top-level fields describe the deciding policy (on a
/// denial the denying one with the longest retry, else the one with the fewest remaining);
/// `allowed` is the verdict over all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CheckResponse {
    /// Whether the request goes ahead.
    pub allowed: bool,
    /// The deciding policy.
    pub policy: String,
    /// Its limit.
    pub limit: u64,
    /// Its remaining requests.
    pub remaining: u64,
    /// Its reset time, ms.
    pub reset_after_ms: u64,
    /// When denied: the longest wait among the denying policies, ms; else null.
    pub retry_after_ms: Option<u64>,
    /// Delay mode only: how long to wait before going ahead, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Present when `policy` was a list: one object per policy, in request order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<PolicyResult>>,
    /// An admitted decision on a concurrency policy: the lease to free with
    /// `POST /v1/release` when the request ends (else it is freed when `lease` passes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// An admitted decision asked with `"reserve": true`: settle its real cost with
    /// `POST /v1/settle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
}

/// Microseconds to whole milliseconds, rounded up.
pub fn ms(micros: u64) -> u64 {
    micros.div_ceil(1000)
}

impl PolicyResult {
    /// The answer of one policy.
    pub fn from_decision(d: &PolicyDecision) -> Self {
        PolicyResult {
            allowed: d.decision.allowed,
            policy: d.policy.name().to_owned(),
            limit: d.decision.limit,
            remaining: d.decision.remaining,
            reset_after_ms: ms(d.decision.reset_after),
            retry_after_ms: d.decision.retry_after.map(ms),
            delay_ms: (d.decision.delay > 0).then(|| ms(d.decision.delay)),
        }
    }
}

impl CheckResponse {
    /// The answer to a verdict; `list` adds the per-policy array.
    pub fn from_verdict(verdict: &Verdict, list: bool) -> Option<Self> {
        let mut response = super::answer::Answer::from_verdict(verdict)?.response();
        response.policies = list.then(|| {
            verdict
                .decisions
                .iter()
                .map(PolicyResult::from_decision)
                .collect()
        });
        Some(response)
    }
}

/// The answer to a batch: one entry per request, in order; each is a [`CheckResponse`] or
/// an error object `{"error", "message"}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchResponse {
    /// The results.
    pub results: Vec<BatchEntry>,
}

/// One batch result: an answer or an error.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum BatchEntry {
    /// The request was decided.
    Decided(CheckResponse),
    /// The request was invalid (`invalid_request`, `unknown_policy`) or the store failed it.
    Failed(super::ErrorBody),
}

/// A loaded policy, as `GET /v1/policies` lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PolicyInfo {
    /// Name.
    pub name: String,
    /// fixed_window | sliding_log | sliding_window | token_bucket | leaky_bucket | gcra.
    pub algorithm: String,
    /// Requests per period.
    pub limit: u64,
    /// The period, e.g. `1m`.
    pub period: String,
    /// The period in milliseconds.
    pub period_ms: u64,
    /// Bucket capacity (equals limit for window algorithms, which do not use it).
    pub burst: u64,
    /// reject | delay | shadow.
    pub mode: String,
    /// Delay mode's longest wait, ms (null in other modes).
    pub max_delay_ms: Option<u64>,
    /// allow | deny.
    pub on_store_error: String,
    /// How long a denied key stays denied, ms (null: no penalty).
    pub penalty_ms: Option<u64>,
    /// Calendar windows (`day`, `week`, `month`, `year`) of a fixed_window policy; null
    /// for periods. `period` then names the unit and `period_ms` is its longest window.
    pub calendar: Option<String>,
    /// The calendar's IANA time zone.
    pub timezone: Option<String>,
}

/// `GET /v1/policies`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PoliciesResponse {
    /// Every loaded policy, in configuration order.
    pub policies: Vec<PolicyInfo>,
}

/// `/healthz` and `/readyz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    /// `ok` or `ready`.
    pub status: &'static str,
    /// The store backend (readyz).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<&'static str>,
}
