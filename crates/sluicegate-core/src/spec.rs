//! [`PolicySpec`]: a policy as written in configuration (`[[policies]]` in TOML), before
//! validation. The server, the middleware builder and the simulator all read this shape.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::calendar::{Calendar, CalendarUnit};
use crate::policy::{AlgorithmKind, Mode, OnStoreError, Policy, PolicyError};

/// A policy as configured. Durations are strings such as `"250ms"`, `"1s"`, `"1m"`, `"1h"`, `"1d"`.
///
/// ```
/// use sluicegate_core::PolicySpec;
/// let spec: PolicySpec = serde_json::from_str(
///     r#"{"name": "auth", "algorithm": "token_bucket", "limit": 10, "period": "1m"}"#,
/// ).unwrap();
/// assert_eq!(spec.build().unwrap().burst(), 10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// Unique name, `[A-Za-z0-9_.-]+`.
    pub name: String,
    /// The algorithm.
    pub algorithm: AlgorithmKind,
    /// Requests per period (concurrency: requests in flight).
    pub limit: u64,
    /// The period, e.g. `"1m"`; empty (absent) with `calendar`, and for concurrency (which has `lease`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub period: String,
    /// Bucket capacity; defaults to `limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// reject | delay | shadow.
    #[serde(default)]
    pub mode: Mode,
    /// Longest wait in delay mode; defaults to one period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<String>,
    /// allow | deny.
    #[serde(default)]
    pub on_store_error: OnStoreError,
    /// Concurrency only: how long a lease lasts if its holder never releases it; defaults
    /// to [`DEFAULT_LEASE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// Once denied, the key stays denied this long, e.g. `"10m"`; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub penalty: Option<String>,
    /// `fixed_window` only, instead of `period`: `day`, `week`, `month` or `year`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<String>,
    /// The IANA zone of the calendar's midnights; default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// The calendar of `calendar` and `timezone` as configured: `Ok(None)` without a calendar;
/// a `timezone` without `calendar` is an error (it would silently do nothing).
pub fn parse_calendar(
    calendar: Option<&str>,
    timezone: Option<&str>,
) -> Result<Option<Calendar>, PolicyError> {
    match (calendar, timezone) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(PolicyError::InvalidCalendar(
            "timezone needs calendar = \"day\", \"week\", \"month\" or \"year\"".into(),
        )),
        (Some(unit), zone) => {
            let unit: CalendarUnit = unit.parse().map_err(PolicyError::InvalidCalendar)?;
            Calendar::new(unit, zone.unwrap_or("UTC"))
                .map(Some)
                .map_err(PolicyError::InvalidCalendar)
        }
    }
}

/// The lease of a concurrency policy that does not set one: long enough for most slow
/// requests (a request that outlives its lease no longer holds its slot), short enough
/// that a crashed holder's slot comes back within a minute.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// Parses `"250ms"`, `"1s"`, `"1m"`, `"1h"`, `"1d"` and combinations such as `"1m 30s"`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(sluicegate_core::spec::parse_duration("1m").unwrap(), Duration::from_secs(60));
/// assert!(sluicegate_core::spec::parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, PolicyError> {
    humantime::parse_duration(text.trim())
        .map_err(|e| PolicyError::InvalidDuration(text.to_owned(), e.to_string()))
}

impl PolicySpec {
    /// Validates into a [`Policy`].
    pub fn build(&self) -> Result<Policy, PolicyError> {
        if self.algorithm.is_concurrency() {
            return self.build_concurrency();
        }
        if self.lease.is_some() {
            return Err(PolicyError::ConcurrencyField(
                "lease is for algorithm \"concurrency\" only",
            ));
        }
        let calendar = parse_calendar(self.calendar.as_deref(), self.timezone.as_deref())?;
        let period = match &calendar {
            Some(_) if !self.period.trim().is_empty() => {
                return Err(PolicyError::InvalidCalendar(
                    "calendar replaces period: give one of them".into(),
                ));
            }
            Some(c) => Duration::from_micros(c.unit().longest()),
            None => parse_duration(&self.period)?,
        };
        let mut builder = Policy::builder(&self.name, self.algorithm, self.limit, period)
            .mode(self.mode)
            .on_store_error(self.on_store_error);
        if let Some(calendar) = calendar {
            builder = builder.calendar(calendar);
        }
        if let Some(burst) = self.burst {
            builder = builder.burst(burst);
        }
        let max_delay = match &self.max_delay {
            Some(text) => parse_duration(text)?,
            None => period,
        };
        if let Some(text) = &self.penalty {
            builder = builder.penalty(parse_duration(text)?);
        }
        builder.max_delay(max_delay).build()
    }

    fn build_concurrency(&self) -> Result<Policy, PolicyError> {
        if !self.period.is_empty() {
            return Err(PolicyError::ConcurrencyField(
                "concurrency has no period: set lease (how long an unreleased request holds its slot)",
            ));
        }
        if self.max_delay.is_some() {
            return Err(PolicyError::ConcurrencyField(
                "max_delay is not used by concurrency",
            ));
        }
        if self.penalty.is_some() || self.calendar.is_some() || self.timezone.is_some() {
            return Err(PolicyError::ConcurrencyField(
                "penalty, calendar and timezone are not used by concurrency",
            ));
        }
        let lease = match &self.lease {
            Some(text) => parse_duration(text)?,
            None => DEFAULT_LEASE,
        };
        let mut builder = Policy::builder(&self.name, self.algorithm, self.limit, lease)
            .lease(lease)
            .mode(self.mode)
            .on_store_error(self.on_store_error);
        if let Some(burst) = self.burst {
            builder = builder.burst(burst);
        }
        builder.build()
    }

    /// The spec of an existing policy (for `GET /v1/policies` and round trips).
    pub fn from_policy(policy: &Policy) -> Self {
        let fmt = |d: Duration| humantime::format_duration(d).to_string();
        if let Some(lease) = policy.lease() {
            return PolicySpec {
                name: policy.name().to_owned(),
                algorithm: policy.algorithm(),
                limit: policy.limit(),
                period: String::new(),
                burst: None,
                mode: policy.mode(),
                max_delay: None,
                on_store_error: policy.on_store_error(),
                lease: Some(fmt(Duration::from_micros(lease))),
                penalty: None,
                calendar: None,
                timezone: None,
            };
        }
        PolicySpec {
            name: policy.name().to_owned(),
            algorithm: policy.algorithm(),
            limit: policy.limit(),
            period: match policy.calendar() {
                Some(_) => String::new(),
                None => fmt(policy.period_duration()),
            },
            burst: Some(policy.burst()),
            mode: policy.mode(),
            max_delay: Some(fmt(Duration::from_micros(policy.max_delay()))),
            on_store_error: policy.on_store_error(),
            lease: None,
            penalty: (policy.penalty() > 0).then(|| fmt(Duration::from_micros(policy.penalty()))),
            calendar: policy.calendar().map(|c| c.unit().name().to_owned()),
            timezone: policy.calendar().map(|c| c.zone().to_owned()),
        }
    }
}
