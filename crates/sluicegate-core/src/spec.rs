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
    /// Requests per period.
    pub limit: u64,
    /// The period, e.g. `"1m"`; empty (absent) with `calendar`.
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

    /// The spec of an existing policy (for `GET /v1/policies` and round trips).
    pub fn from_policy(policy: &Policy) -> Self {
        let fmt = |d: Duration| humantime::format_duration(d).to_string();
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
            penalty: (policy.penalty() > 0).then(|| fmt(Duration::from_micros(policy.penalty()))),
            calendar: policy.calendar().map(|c| c.unit().name().to_owned()),
            timezone: policy.calendar().map(|c| c.zone().to_owned()),
        }
    }
}
