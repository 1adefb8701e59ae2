//! The contract's rate-limit headers for a verdict, as Envoy `HeaderValue`s.
//!
//! TEMPORARY ADAPTER: the middleware crate owns the header sets (`HeaderSet` and the
//! writer for a `Verdict`); once it is on main this module only converts its `HeaderMap`
//! into Envoy entries. Until then it writes the same three sets here.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use serde::{Deserialize, Serialize};
use sluicegate_core::Verdict;

/// Which rate-limit header set to send (`server.headers` in the TOML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HeaderSet {
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (seconds).
    #[serde(rename = "draft-6")]
    Draft6,
    /// `RateLimit-Policy` and `RateLimit` as Structured Field lists, one member per policy.
    #[serde(rename = "ietf")]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds).
    #[serde(rename = "legacy")]
    Legacy,
}

fn ceil_secs(micros: u64) -> u64 {
    micros.div_ceil(1_000_000)
}

/// The headers for `verdict` under `sets`; `now_unix` in seconds is for the legacy reset.
/// A denial also carries `Retry-After` (whole seconds, at least 1).
pub fn rate_limit_headers(
    verdict: &Verdict,
    sets: &[HeaderSet],
    now_unix: u64,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(deciding) = verdict.deciding().or(verdict.decisions.first()) else {
        return out;
    };
    for set in sets {
        match set {
            HeaderSet::Draft6 => {
                let d = &deciding.decision;
                out.push(("ratelimit-limit".into(), d.limit.to_string()));
                out.push(("ratelimit-remaining".into(), d.remaining.to_string()));
                out.push((
                    "ratelimit-reset".into(),
                    ceil_secs(d.reset_after).to_string(),
                ));
            }
            HeaderSet::Ietf => {
                let mut policy = Vec::new();
                let mut state = Vec::new();
                for pd in &verdict.decisions {
                    let name = sf_string(pd.policy.name());
                    let window = ceil_secs(pd.policy.period()).max(1);
                    policy.push(format!("{name};q={};w={window}", pd.policy.limit()));
                    let reset = ceil_secs(pd.decision.reset_after).max(1);
                    state.push(format!("{name};r={};t={reset}", pd.decision.remaining));
                }
                out.push(("ratelimit-policy".into(), policy.join(", ")));
                out.push(("ratelimit".into(), state.join(", ")));
            }
            HeaderSet::Legacy => {
                let d = &deciding.decision;
                out.push(("x-ratelimit-limit".into(), d.limit.to_string()));
                out.push(("x-ratelimit-remaining".into(), d.remaining.to_string()));
                let reset = now_unix.saturating_add(ceil_secs(d.reset_after));
                out.push(("x-ratelimit-reset".into(), reset.to_string()));
            }
        }
    }
    if let Some(retry) = verdict.retry_after() {
        out.push(("retry-after".into(), ceil_secs(retry).max(1).to_string()));
    }
    out
}

/// A Structured Field string: quoted, with `"` and `\` escaped (policy names are ASCII).
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Envoy header entries for `headers`.
pub fn to_envoy(headers: Vec<(String, String)>) -> Vec<HeaderValue> {
    headers
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key,
            value,
            ..Default::default()
        })
        .collect()
}
