//! A [`Policy`]: a named limit (`limit` per `period`, `burst` at once), the algorithm that
//! enforces it, and what to do when a request is over it. Policies are validated once, on
//! construction, so every other part of Sluicegate can rely on their numbers.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::calendar::Calendar;
use crate::clock::{Micros, micros};

/// Which limiting algorithm a policy uses. See each module under [`crate::algorithm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmKind {
    /// Counters in windows aligned to the Unix epoch.
    FixedWindow,
    /// An exact log of admitted requests over the last period.
    SlidingLog,
    /// Two fixed windows, the previous one weighted by how much of it still overlaps.
    SlidingWindow,
    /// A bucket of `burst` tokens refilled continuously at `limit / period`.
    TokenBucket,
    /// A bucket of size `burst` leaking at `limit / period`; in delay mode a FIFO queue.
    LeakyBucket,
    /// The generic cell rate algorithm: one theoretical arrival time per key.
    Gcra,
    /// At most `limit` requests in flight; each holds a lease until released or expired.
    Concurrency,
}

impl AlgorithmKind {
    /// The six rate algorithms, in the order the docs present them (not
    /// [`AlgorithmKind::Concurrency`], which limits requests in flight, not a rate).
    pub const ALL: [AlgorithmKind; 6] = [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::Gcra,
    ];

    /// The configuration name, e.g. `"token_bucket"`.
    ///
    /// ```
    /// use sluicegate_core::AlgorithmKind;
    /// assert_eq!(AlgorithmKind::Gcra.name(), "gcra");
    /// assert_eq!("sliding_log".parse::<AlgorithmKind>().unwrap(), AlgorithmKind::SlidingLog);
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingLog => "sliding_log",
            AlgorithmKind::SlidingWindow => "sliding_window",
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::Gcra => "gcra",
            AlgorithmKind::Concurrency => "concurrency",
        }
    }

    /// Whether the policy limits requests in flight (leases) rather than a rate.
    pub fn is_concurrency(self) -> bool {
        self == AlgorithmKind::Concurrency
    }

    /// Whether `delay` mode is meaningful: only the bucket-shaped algorithms can say when a
    /// request's turn comes; a window only knows when it ends.
    pub fn supports_delay(self) -> bool {
        matches!(
            self,
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra
        )
    }

    /// Whether `burst` is used (bucket capacity) rather than `limit` (window size).
    pub fn uses_burst(self) -> bool {
        self.supports_delay()
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AlgorithmKind {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AlgorithmKind::ALL
            .into_iter()
            .chain([AlgorithmKind::Concurrency])
            .find(|kind| kind.name() == s)
            .ok_or_else(|| PolicyError::UnknownAlgorithm(s.to_owned()))
    }
}

/// What happens to a request over the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Reject it (429).
    #[default]
    Reject,
    /// Reserve its turn now and make it wait for it, up to `max_delay`; reject beyond.
    Delay,
    /// Let it through, but report and count that it would have been rejected.
    Shadow,
}

impl Mode {
    /// Whether a denial under this mode refuses the request (reject, delay); a shadow
    /// policy only reports what it would have done.
    pub fn is_enforcing(self) -> bool {
        self != Mode::Shadow
    }

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Reject => "reject",
            Mode::Delay => "delay",
            Mode::Shadow => "shadow",
        }
    }
}

impl FromStr for Mode {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Mode::Reject, Mode::Delay, Mode::Shadow]
            .into_iter()
            .find(|mode| mode.name() == s)
            .ok_or_else(|| PolicyError::UnknownMode(s.to_owned()))
    }
}

/// What a decision is when the store cannot be reached in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// Fail open: admit.
    #[default]
    Allow,
    /// Fail closed: reject.
    Deny,
}

/// Why a policy is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The name is empty or has characters outside `[A-Za-z0-9_.-]`.
    #[error("policy name {0:?} must be 1 to 128 characters of A-Z a-z 0-9 _ . -")]
    InvalidName(String),
    /// `limit = 0`.
    #[error("limit must be at least 1")]
    ZeroLimit,
    /// `period` under one microsecond.
    #[error("period must be at least 1µs")]
    ZeroPeriod,
    /// `burst = 0`.
    #[error("burst must be at least 1")]
    ZeroBurst,
    /// `period` or `max_delay` over [`MAX_PERIOD`].
    #[error("{0} must be at most 3660d (10 years of 366 days)")]
    TooLong(&'static str),
    /// `mode = "delay"` on fixed_window, sliding_log or sliding_window.
    #[error(
        "mode \"delay\" needs token_bucket, leaky_bucket or gcra; {0} can only reject or shadow"
    )]
    DelayOnWindow(AlgorithmKind),
    /// Not one of the seven algorithm names.
    #[error(
        "unknown algorithm {0:?}; expected fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra or concurrency"
    )]
    UnknownAlgorithm(String),
    /// Not one of the three mode names.
    #[error("unknown mode {0:?}; expected reject, delay or shadow")]
    UnknownMode(String),
    /// A duration that does not parse.
    #[error("invalid duration {0:?}: {1} (write e.g. 250ms, 1s, 1m, 1h, 1d)")]
    InvalidDuration(String, String),
    /// `lease` on a rate algorithm, or `period`/`burst` on concurrency.
    #[error("{0}")]
    ConcurrencyField(&'static str),
    /// `calendar` on another algorithm than fixed_window.
    #[error("calendar periods need algorithm \"fixed_window\", not {0}")]
    CalendarNeedsFixedWindow(AlgorithmKind),
    /// `calendar` or `timezone` that does not parse.
    #[error("{0}")]
    InvalidCalendar(String),
    /// `penalty` over [`MAX_PENALTY`].
    #[error("penalty must be at most 100 years")]
    PenaltyTooLong,
    /// `penalty = "0s"`.
    #[error("penalty must be longer than 0 (remove it for no penalty)")]
    ZeroPenalty,
    /// Neither `period` nor `calendar` on a rate algorithm.
    #[error("missing field `period` (or `calendar`)")]
    MissingPeriod,
    /// Both `period` and `calendar`.
    #[error("period and calendar = {0:?} both given; the calendar replaces the period")]
    PeriodAndCalendar(String),
    /// The numbers overflow the 64-bit fixed-point arithmetic of the buckets.
    #[error(
        "{0} is too large: for token_bucket, leaky_bucket and gcra, burst × period (in µs) and, in delay mode, limit × max_delay must stay under 2^62"
    )]
    TooLarge(&'static str),
}

/// A validated rate-limit policy.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_core::{AlgorithmKind, Mode, Policy};
///
/// let policy = Policy::builder("auth", AlgorithmKind::TokenBucket, 10, Duration::from_secs(60))
///     .burst(5)
///     .mode(Mode::Reject)
///     .build()
///     .unwrap();
/// assert_eq!(policy.capacity(), 5);
/// assert!(Policy::builder("x", AlgorithmKind::Gcra, 0, Duration::from_secs(1)).build().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    name: String,
    algorithm: AlgorithmKind,
    limit: u64,
    period: Micros,
    burst: u64,
    mode: Mode,
    max_delay: Micros,
    on_store_error: OnStoreError,
    penalty: Micros,
    calendar: Option<Calendar>,
}

/// The numbers that give a policy's stored state its meaning: its name, algorithm, limit,
/// period and burst. Two policies with the same counting key read each other's state the
/// same way, so a reload that changes only the mode, `max_delay`, `on_store_error` or
/// `penalty` keeps every key's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CountingKey {
    name: String,
    algorithm: AlgorithmKind,
    limit: u64,
    period: Micros,
    burst: u64,
    calendar: Option<Calendar>,
}

impl CountingKey {
    /// A policy with these numbers (reject mode, no penalty): enough to count with, as a
    /// snapshot's tables are restored before the configuration says the rest.
    pub fn policy(&self) -> Result<Policy, PolicyError> {
        let period = Duration::from_micros(self.period);
        let mut builder = Policy::builder(self.name.clone(), self.algorithm, self.limit, period);
        if self.algorithm.is_concurrency() {
            builder = builder.lease(period);
        } else {
            builder = builder.burst(self.burst);
        }
        if let Some(calendar) = &self.calendar {
            builder = builder.calendar(calendar.clone());
        }
        builder.build()
    }

    /// Whether `other` is the same policy with other numbers (same name and algorithm), so
    /// that its state can be carried over ([`crate::algorithm::Algorithm::rescale`]).
    pub fn same_lineage(&self, other: &CountingKey) -> bool {
        self.name == other.name && self.algorithm == other.algorithm
    }
}

/// Longest `penalty`: a hundred years, so that `now + penalty` stays exact everywhere
/// (Redis computes in doubles, exact to 2^53 µs).
pub const MAX_PENALTY: Micros = 100 * 366 * 86_400 * 1_000_000;

/// Builds a [`Policy`]; `build` validates it.
#[derive(Debug, Clone)]
pub struct PolicyBuilder {
    policy: Policy,
    burst_set: bool,
}

/// The longest `period` (and `max_delay`) a policy may have: 10 years of 366 days. Longer
/// limits are not rate limits, and the bound keeps every product of the arithmetic (here
/// and in the Redis scripts) far from overflow.
pub const MAX_PERIOD: Duration = Duration::from_secs(3660 * 86_400);

/// Bound for the products the bucket algorithms keep in an `i64`, leaving headroom.
const FIXED_POINT_BOUND: u128 = 1 << 62;

impl Policy {
    /// Starts a policy of `limit` requests per `period`; `burst` defaults to `limit`.
    pub fn builder(
        name: impl Into<String>,
        algorithm: AlgorithmKind,
        limit: u64,
        period: Duration,
    ) -> PolicyBuilder {
        PolicyBuilder {
            policy: Policy {
                name: name.into(),
                algorithm,
                limit,
                period: micros(period),
                burst: limit,
                mode: Mode::Reject,
                max_delay: 0,
                on_store_error: OnStoreError::Allow,
                penalty: 0,
                calendar: None,
            },
            burst_set: false,
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The algorithm.
    pub fn algorithm(&self) -> AlgorithmKind {
        self.algorithm
    }
    /// Requests per period.
    pub fn limit(&self) -> u64 {
        self.limit
    }
    /// The period in microseconds.
    pub fn period(&self) -> Micros {
        self.period
    }
    /// Concurrency: how long a lease lasts when its holder never releases it, in
    /// microseconds (kept in the period field: it is the one duration such a policy has).
    /// `None` for the rate algorithms.
    pub fn lease(&self) -> Option<Micros> {
        self.algorithm.is_concurrency().then_some(self.period)
    }
    /// The period as a [`Duration`].
    pub fn period_duration(&self) -> Duration {
        Duration::from_micros(self.period)
    }
    /// Bucket capacity (bucket algorithms); equals `limit` unless set.
    pub fn burst(&self) -> u64 {
        self.burst
    }
    /// Over-limit behaviour.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// Whether this policy's denial refuses the request: every mode but shadow. The one
    /// definition every store, the middleware and the Envoy service use.
    pub fn is_enforcing(&self) -> bool {
        self.mode.is_enforcing()
    }
    /// Longest wait in delay mode, in microseconds.
    pub fn max_delay(&self) -> Micros {
        self.max_delay
    }
    /// Fail open or closed.
    pub fn on_store_error(&self) -> OnStoreError {
        self.on_store_error
    }
    /// How long a key this policy denies stays denied, µs (0: no penalty). See
    /// [`crate::penalty`].
    pub fn penalty(&self) -> Micros {
        self.penalty
    }
    /// What identifies this policy's stored state (see [`CountingKey`]).
    pub fn counting_key(&self) -> CountingKey {
        CountingKey {
            name: self.name.clone(),
            algorithm: self.algorithm,
            limit: self.limit,
            period: self.period,
            burst: self.burst,
            calendar: self.calendar.clone(),
        }
    }
    /// The calendar windows of a `fixed_window` policy with `calendar` (its `period` is
    /// then the longest such window).
    pub fn calendar(&self) -> Option<&Calendar> {
        self.calendar.as_ref()
    }
    /// The length of the window holding `now`, µs: the period, or for a calendar policy
    /// the real length of the current day, week, month or year.
    pub fn window_at(&self, now: Micros) -> Micros {
        match self.calendar.as_ref().and_then(|c| c.window(now)) {
            Some((start, end)) => end - start,
            None => self.period,
        }
    }
    /// The largest cost one request can ever have: `burst` for buckets, `limit` for windows.
    pub fn capacity(&self) -> u64 {
        if self.algorithm.uses_burst() {
            self.burst
        } else {
            self.limit
        }
    }
    /// The allowed wait for a request: `Some(max_delay)` in delay mode, else `None`.
    pub fn delay_budget(&self) -> Option<Micros> {
        (self.mode == Mode::Delay).then_some(self.max_delay)
    }
}

impl PolicyBuilder {
    /// Bucket capacity: how many requests may come at once.
    pub fn burst(mut self, burst: u64) -> Self {
        self.policy.burst = burst;
        self.burst_set = true;
        self
    }
    /// Concurrency: how long an unreleased lease lasts (the policy's one duration, so it
    /// replaces the period given to [`Policy::builder`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.policy.period = micros(lease);
        self
    }
    /// Over-limit behaviour.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.policy.mode = mode;
        self
    }
    /// Longest wait in delay mode.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.policy.max_delay = micros(max_delay);
        self
    }
    /// Fail open or closed.
    pub fn on_store_error(mut self, on_store_error: OnStoreError) -> Self {
        self.policy.on_store_error = on_store_error;
        self
    }
    /// Calendar windows instead of `period` (`fixed_window` only); sets the period to the
    /// longest such window.
    pub fn calendar(mut self, calendar: Calendar) -> Self {
        self.policy.period = calendar.unit().longest();
        self.policy.calendar = Some(calendar);
        self
    }
    /// Once this policy denies a key, the key stays denied this long (default: none).
    pub fn penalty(mut self, penalty: Duration) -> Self {
        self.policy.penalty = micros(penalty);
        self
    }

    /// Validates and returns the policy.
    pub fn build(self) -> Result<Policy, PolicyError> {
        let p = self.policy;
        rule::name(&p.name)?;
        rule::limit(p.limit)?;
        if p.algorithm.is_concurrency() {
            rule::lease(p.period)?;
            if self.burst_set {
                return Err(PolicyError::ConcurrencyField(rule::BURST_ON_CONCURRENCY));
            }
        }
        rule::period(p.period)?;
        rule::max_delay(p.max_delay)?;
        if self.burst_set {
            rule::burst(p.burst)?;
        }
        rule::mode(p.mode, p.algorithm)?;
        // Only the buckets keep scaled products in 64 bits; the windows compute in 128 bits.
        let scaled = |a: u64, b: u64| u128::from(a) * u128::from(b) < FIXED_POINT_BOUND;
        if p.algorithm.uses_burst() && !scaled(p.burst, p.period) {
            return Err(PolicyError::TooLarge("burst × period"));
        }
        if p.mode == Mode::Delay && !scaled(p.limit, p.max_delay) {
            return Err(PolicyError::TooLarge("limit × max_delay"));
        }
        if p.calendar.is_some() {
            rule::calendar_algorithm(p.algorithm)?;
        }
        rule::penalty(p.penalty)?;
        Ok(p)
    }
}

/// The rules of one field each, written once: [`PolicyBuilder::build`] applies them in
/// turn, [`PolicySpec::check`](crate::PolicySpec::check) each on its own field so that it
/// can report every mistake.
pub(crate) mod rule {
    use super::*;

    /// Why concurrency has no burst.
    pub const BURST_ON_CONCURRENCY: &str =
        "burst is not used by concurrency: limit is the number in flight";

    /// 1 to 128 characters of `A-Za-z0-9_.-`.
    pub fn name(name: &str) -> Result<(), PolicyError> {
        let ok = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if ok {
            Ok(())
        } else {
            Err(PolicyError::InvalidName(name.to_owned()))
        }
    }

    /// At least 1.
    pub fn limit(limit: u64) -> Result<(), PolicyError> {
        if limit == 0 {
            return Err(PolicyError::ZeroLimit);
        }
        Ok(())
    }

    /// At least 1.
    pub fn burst(burst: u64) -> Result<(), PolicyError> {
        if burst == 0 {
            return Err(PolicyError::ZeroBurst);
        }
        Ok(())
    }

    /// 1µs to [`MAX_PERIOD`].
    pub fn period(period: Micros) -> Result<(), PolicyError> {
        if period == 0 {
            return Err(PolicyError::ZeroPeriod);
        }
        if period > micros(MAX_PERIOD) {
            return Err(PolicyError::TooLong("period"));
        }
        Ok(())
    }

    /// A concurrency lease: at least 1µs.
    pub fn lease(lease: Micros) -> Result<(), PolicyError> {
        if lease == 0 {
            return Err(PolicyError::ConcurrencyField("lease must be at least 1µs"));
        }
        Ok(())
    }

    /// At most [`MAX_PERIOD`].
    pub fn max_delay(max_delay: Micros) -> Result<(), PolicyError> {
        if max_delay > micros(MAX_PERIOD) {
            return Err(PolicyError::TooLong("max_delay"));
        }
        Ok(())
    }

    /// `delay` only where the algorithm can say when a request's turn comes.
    pub fn mode(mode: Mode, algorithm: AlgorithmKind) -> Result<(), PolicyError> {
        if mode == Mode::Delay && !algorithm.supports_delay() {
            return Err(PolicyError::DelayOnWindow(algorithm));
        }
        Ok(())
    }

    /// Calendar windows are fixed windows.
    pub fn calendar_algorithm(algorithm: AlgorithmKind) -> Result<(), PolicyError> {
        if algorithm != AlgorithmKind::FixedWindow {
            return Err(PolicyError::CalendarNeedsFixedWindow(algorithm));
        }
        Ok(())
    }

    /// At most [`MAX_PENALTY`] (0: no penalty).
    pub fn penalty(penalty: Micros) -> Result<(), PolicyError> {
        if penalty > MAX_PENALTY {
            return Err(PolicyError::PenaltyTooLong);
        }
        Ok(())
    }
}
