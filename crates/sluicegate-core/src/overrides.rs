//! Per-key overrides: a key's own `limit` (and optionally `burst`, `period`) under a policy,
//! a customer's contract. Set in the config (`[[overrides]]`) or at run time
//! (`PUT /v1/overrides/{policy}/{key}`), kept in the store so every instance sharing it
//! sees the same numbers. A key's state is kept under the numbers that apply to it, and a
//! change of them keeps what the key has used ([`Algorithm::rescale`](crate::algorithm::Algorithm::rescale)).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::{Micros, micros};
use crate::policy::{Policy, PolicyError};
use crate::spec::parse_duration;

/// An override as written (config or API body): `{"limit": 10000, "burst": 10000, "period": "1m"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSpec {
    /// The key's limit.
    pub limit: u64,
    /// The key's burst (bucket algorithms); when absent, the policy's burst, or the new
    /// limit where the policy's burst is its limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// The key's period, e.g. `"1h"`; when absent, the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
}

/// A parsed override (see [`OverrideSpec`]); apply it with [`Policy::with_override`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Override {
    /// The key's limit.
    pub limit: u64,
    /// The key's burst, if set.
    pub burst: Option<u64>,
    /// The key's period in µs, if set.
    pub period: Option<Micros>,
}

impl OverrideSpec {
    /// Parses the period and checks the override against `policy` (the numbers it gives
    /// must make a valid policy).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluicegate_core::{AlgorithmKind, Policy, overrides::OverrideSpec};
    /// let api = Policy::builder("api", AlgorithmKind::FixedWindow, 100, Duration::from_secs(86_400)).build().unwrap();
    /// let spec = OverrideSpec { limit: 1000, burst: None, period: None };
    /// let o = spec.parse(&api).unwrap();
    /// assert_eq!(api.with_override(&o).unwrap().limit(), 1000);
    /// assert!(OverrideSpec { limit: 0, burst: None, period: None }.parse(&api).is_err());
    /// ```
    pub fn parse(&self, policy: &Policy) -> Result<Override, PolicyError> {
        let period = match &self.period {
            Some(text) => Some(micros(parse_duration(text)?)),
            None => None,
        };
        let parsed = Override {
            limit: self.limit,
            burst: self.burst,
            period,
        };
        policy.with_override(&parsed)?;
        Ok(parsed)
    }

    /// The spec of a parsed override (for `GET /v1/overrides`).
    pub fn from_override(o: &Override) -> Self {
        OverrideSpec {
            limit: o.limit,
            burst: o.burst,
            period: o
                .period
                .map(|p| humantime::format_duration(Duration::from_micros(p)).to_string()),
        }
    }
}

impl Policy {
    /// This policy with a key's own numbers: everything else (algorithm, mode, max_delay,
    /// on_store_error, penalty, calendar, lease) stays the policy's.
    pub fn with_override(&self, o: &Override) -> Result<Policy, PolicyError> {
        if o.period.is_some() && self.calendar().is_some() {
            return Err(PolicyError::InvalidCalendar(
                "an override of a calendar policy cannot set period: the calendar gives it".into(),
            ));
        }
        if o.period.is_some() && self.algorithm().is_concurrency() {
            return Err(PolicyError::ConcurrencyField(
                "an override of a concurrency policy sets its limit only",
            ));
        }
        let period = Duration::from_micros(o.period.unwrap_or(self.period()));
        let mut builder = Policy::builder(self.name(), self.algorithm(), o.limit, period)
            .mode(self.mode())
            .max_delay(Duration::from_micros(self.max_delay()))
            .on_store_error(self.on_store_error())
            .penalty(Duration::from_micros(self.penalty()));
        if let Some(calendar) = self.calendar() {
            builder = builder.calendar(calendar.clone());
        }
        if let Some(lease) = self.lease() {
            builder = builder.lease(Duration::from_micros(lease));
        } else {
            // A burst that followed the limit follows the override's limit.
            let burst = o.burst.unwrap_or(if self.burst() == self.limit() {
                o.limit
            } else {
                self.burst()
            });
            builder = builder.burst(burst);
        }
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AlgorithmKind;

    #[test]
    fn an_override_keeps_everything_but_the_numbers() {
        let base = Policy::builder("p", AlgorithmKind::TokenBucket, 10, Duration::from_secs(60))
            .mode(crate::Mode::Delay)
            .max_delay(Duration::from_secs(5))
            .build()
            .unwrap();
        let o = Override {
            limit: 100,
            burst: None,
            period: Some(3_600_000_000),
        };
        let p = base.with_override(&o).unwrap();
        assert_eq!(
            (p.limit(), p.burst(), p.period()),
            (100, 100, 3_600_000_000)
        );
        assert_eq!((p.mode(), p.max_delay()), (base.mode(), base.max_delay()));
        let c = Policy::builder("c", AlgorithmKind::Concurrency, 2, Duration::from_secs(30))
            .lease(Duration::from_secs(30))
            .build()
            .unwrap();
        let more = c
            .with_override(&Override {
                limit: 5,
                burst: None,
                period: None,
            })
            .unwrap();
        assert_eq!((more.limit(), more.lease()), (5, c.lease()));
        assert!(c.with_override(&o).is_err());
    }
}
