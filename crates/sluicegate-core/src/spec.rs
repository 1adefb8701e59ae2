//! [`PolicySpec`]: a policy as written in configuration (`[[policies]]` in TOML), before
//! validation. The server, the middleware builder and the simulator all read this shape.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::calendar::{Calendar, CalendarUnit};
use crate::clock::micros;
use crate::policy::{AlgorithmKind, Mode, OnStoreError, Policy, PolicyError, rule};

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

/// One mistake in a [`PolicySpec`]: the field it is in, as configured (`"limit"`,
/// `"period"`, …), and what is wrong. A configuration reader maps the field to its place in
/// the file; the message is the same wherever the spec came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct FieldError {
    /// The field.
    pub field: &'static str,
    /// What is wrong with it.
    pub error: PolicyError,
}

/// Collects every field's mistake.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    /// Records `result`'s error against `field`; the value when there is none.
    fn check<T>(&mut self, field: &'static str, result: Result<T, PolicyError>) -> Option<T> {
        result
            .map_err(|error| self.0.push(FieldError { field, error }))
            .ok()
    }

    fn refuse(&mut self, field: &'static str, error: PolicyError) {
        self.0.push(FieldError { field, error });
    }
}

/// What the fields of a rate policy parse to.
struct Durations {
    period: Option<Duration>,
    calendar: Option<Calendar>,
    max_delay: Option<Duration>,
    penalty: Option<Duration>,
}

impl PolicySpec {
    /// Validates into a [`Policy`]; the first mistake when there are several (see
    /// [`validate`](Self::validate) for all of them).
    pub fn build(&self) -> Result<Policy, PolicyError> {
        self.validate()
            .map_err(|errors| errors.into_iter().next().map(|e| e.error))
            .map_err(|first| first.unwrap_or(PolicyError::ZeroLimit))
    }

    /// Every mistake in the spec, each with its field (empty when it is valid).
    ///
    /// ```
    /// use sluicegate_core::PolicySpec;
    /// let spec: PolicySpec = serde_json::from_str(
    ///     r#"{"name": "a b", "algorithm": "gcra", "limit": 0, "period": "soon"}"#,
    /// ).unwrap();
    /// let fields: Vec<&str> = spec.check().iter().map(|e| e.field).collect();
    /// assert_eq!(fields, ["name", "limit", "period"]);
    /// ```
    pub fn check(&self) -> Vec<FieldError> {
        self.validate().err().unwrap_or_default()
    }

    /// Validates into a [`Policy`], or every mistake, each with its field.
    pub fn validate(&self) -> Result<Policy, Vec<FieldError>> {
        let mut errors = Errors::default();
        errors.check("name", rule::name(&self.name));
        errors.check("limit", rule::limit(self.limit));
        errors.check("mode", rule::mode(self.mode, self.algorithm));
        if self.algorithm.is_concurrency() {
            let lease = self.concurrency_fields(&mut errors);
            return match (errors.0.is_empty(), lease) {
                (true, Some(lease)) => self.build_concurrency(lease),
                _ => Err(errors.0),
            };
        }
        if let Some(burst) = self.burst {
            errors.check("burst", rule::burst(burst));
        }
        let durations = self.rate_fields(&mut errors);
        if !errors.0.is_empty() {
            return Err(errors.0);
        }
        self.build_rate(durations)
    }

    /// The fields of a rate algorithm, each checked on its own.
    fn rate_fields(&self, errors: &mut Errors) -> Durations {
        if self.lease.is_some() {
            errors.refuse(
                "lease",
                PolicyError::ConcurrencyField("lease is for algorithm \"concurrency\" only"),
            );
        }
        let calendar = self.calendar(errors);
        let period = match (&self.calendar, self.period.trim().is_empty()) {
            (Some(unit), false) => {
                errors.refuse("period", PolicyError::PeriodAndCalendar(unit.clone()));
                None
            }
            (Some(_), true) => None,
            (None, true) => {
                errors.refuse("period", PolicyError::MissingPeriod);
                None
            }
            (None, false) => errors
                .check("period", parse_duration(&self.period))
                .filter(|d| errors.check("period", rule::period(micros(*d))).is_some()),
        };
        let max_delay = self.max_delay.as_ref().and_then(|text| {
            let d = errors.check("max_delay", parse_duration(text))?;
            errors.check("max_delay", rule::max_delay(micros(d)))?;
            Some(d)
        });
        let penalty = self.penalty.as_ref().and_then(|text| {
            let d = errors.check("penalty", parse_duration(text))?;
            if d.is_zero() {
                errors.refuse("penalty", PolicyError::ZeroPenalty);
                return None;
            }
            errors.check("penalty", rule::penalty(micros(d)))?;
            Some(d)
        });
        Durations {
            period,
            calendar,
            max_delay,
            penalty,
        }
    }

    /// `calendar` and `timezone`, each reported at its own field; a `timezone` without a
    /// `calendar` is a mistake (it would silently do nothing).
    fn calendar(&self, errors: &mut Errors) -> Option<Calendar> {
        let Some(unit) = &self.calendar else {
            if self.timezone.is_some() {
                errors.refuse(
                    "timezone",
                    PolicyError::InvalidCalendar(
                        "timezone needs calendar = \"day\", \"week\", \"month\" or \"year\"".into(),
                    ),
                );
            }
            return None;
        };
        errors.check("calendar", rule::calendar_algorithm(self.algorithm));
        let unit: CalendarUnit = errors.check(
            "calendar",
            unit.parse().map_err(PolicyError::InvalidCalendar),
        )?;
        let zone = self.timezone.as_deref().unwrap_or("UTC");
        errors.check(
            "timezone",
            Calendar::new(unit, zone).map_err(PolicyError::InvalidCalendar),
        )
    }

    /// The fields of a concurrency policy: a `lease`, and none of the rate fields. The
    /// lease when it is valid.
    fn concurrency_fields(&self, errors: &mut Errors) -> Option<Duration> {
        let unused = [
            (
                "period",
                !self.period.is_empty(),
                "concurrency has no period: set lease (how long an unreleased request holds its slot)",
            ),
            ("burst", self.burst.is_some(), rule::BURST_ON_CONCURRENCY),
            (
                "max_delay",
                self.max_delay.is_some(),
                "max_delay is not used by concurrency",
            ),
            (
                "penalty",
                self.penalty.is_some(),
                "penalty is not used by concurrency",
            ),
            (
                "calendar",
                self.calendar.is_some(),
                "calendar is not used by concurrency",
            ),
            (
                "timezone",
                self.timezone.is_some(),
                "timezone is not used by concurrency",
            ),
        ];
        for (field, given, why) in unused {
            if given {
                errors.refuse(field, PolicyError::ConcurrencyField(why));
            }
        }
        let lease = match &self.lease {
            Some(text) => errors.check("lease", parse_duration(text))?,
            None => DEFAULT_LEASE,
        };
        errors.check("lease", rule::lease(micros(lease)))?;
        Some(lease)
    }

    fn build_rate(&self, d: Durations) -> Result<Policy, Vec<FieldError>> {
        let period = match (&d.calendar, d.period) {
            (Some(c), _) => Duration::from_micros(c.unit().longest()),
            (None, Some(period)) => period,
            // Unreachable: a rate policy without either was refused above.
            (None, None) => return Err(vec![field_error(PolicyError::MissingPeriod)]),
        };
        let mut builder = Policy::builder(&self.name, self.algorithm, self.limit, period)
            .mode(self.mode)
            .on_store_error(self.on_store_error)
            .max_delay(d.max_delay.unwrap_or(period));
        if let Some(calendar) = d.calendar {
            builder = builder.calendar(calendar);
        }
        if let Some(burst) = self.burst {
            builder = builder.burst(burst);
        }
        if let Some(penalty) = d.penalty {
            builder = builder.penalty(penalty);
        }
        builder.build().map_err(|e| vec![field_error(e)])
    }

    fn build_concurrency(&self, lease: Duration) -> Result<Policy, Vec<FieldError>> {
        Policy::builder(&self.name, self.algorithm, self.limit, lease)
            .lease(lease)
            .mode(self.mode)
            .on_store_error(self.on_store_error)
            .build()
            .map_err(|e| vec![field_error(e)])
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

/// The field a [`Policy::builder`] error is about: what is left once every field passed
/// its own rule is the cross-field overflow of the bucket arithmetic.
fn field_error(error: PolicyError) -> FieldError {
    let field = match &error {
        PolicyError::TooLarge("limit × max_delay") | PolicyError::TooLong("max_delay") => {
            "max_delay"
        }
        PolicyError::TooLarge(_) | PolicyError::ZeroBurst => "burst",
        PolicyError::InvalidName(_) => "name",
        PolicyError::ZeroLimit => "limit",
        PolicyError::DelayOnWindow(_) => "mode",
        PolicyError::PenaltyTooLong | PolicyError::ZeroPenalty => "penalty",
        PolicyError::ConcurrencyField(_) => "lease",
        PolicyError::CalendarNeedsFixedWindow(_) | PolicyError::InvalidCalendar(_) => "calendar",
        _ => "period",
    };
    FieldError { field, error }
}
