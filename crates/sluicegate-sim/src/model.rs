//! What a request does after it is admitted: how long it runs (`--request-duration`) and
//! what it really costs (`--cost-estimate`, `--cost-real`). Concurrency leases are held for
//! the duration (released when the request ends, or freed by the algorithm when `lease`
//! passes first); a reservation is settled at the request's end with its real cost.
//!
//! Values are drawn from a [`Dist`] with a seeded RNG, one draw per request in arrival
//! order, so runs repeat exactly.

use std::fmt;
use std::str::FromStr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::clock::micros;
use sluicegate_core::spec::parse_duration;

use crate::error::SimError;
use crate::traffic::Traffic;

/// The largest value a draw gives (durations in µs: about 31 years; costs): keeps every sum
/// far from overflow whatever the distribution's tail.
pub const MAX_DRAW: u64 = 1 << 50;

/// A distribution of durations (µs) or costs: `2s` / `800` (fixed), `exp:2s` / `exp:800`
/// (exponential with that mean), `uniform:1s..3s` / `uniform:100..1500`.
///
/// ```
/// use sluicegate_sim::model::Dist;
/// assert_eq!(Dist::duration("uniform:1s..3s").unwrap(), Dist::Uniform(1_000_000.0, 3_000_000.0));
/// assert_eq!(Dist::cost("exp:800").unwrap().mean(), 800.0);
/// assert!(Dist::duration("uniform:3s..1s").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    /// Always this value.
    Fixed(f64),
    /// Exponential with this mean.
    Exp(f64),
    /// Uniform between the two bounds (inclusive).
    Uniform(f64, f64),
}

impl Dist {
    /// Parses a distribution of durations (`250ms`, `exp:2s`, `uniform:1s..3s`), in µs.
    pub fn duration(text: &str) -> Result<Self, String> {
        Self::parse(text, &|t| {
            parse_duration(t)
                .map(|d| micros(d) as f64)
                .map_err(|e| e.to_string())
        })
    }

    /// Parses a distribution of costs (`800`, `exp:800`, `uniform:100..1500`).
    pub fn cost(text: &str) -> Result<Self, String> {
        Self::parse(text, &|t| {
            t.parse::<u64>()
                .map(|n| n as f64)
                .map_err(|_| format!("{t:?} is not a whole number"))
        })
    }

    fn parse(text: &str, value: &dyn Fn(&str) -> Result<f64, String>) -> Result<Self, String> {
        let text = text.trim();
        let dist = if let Some(mean) = text.strip_prefix("exp:") {
            Dist::Exp(value(mean.trim())?)
        } else if let Some(range) = text.strip_prefix("uniform:") {
            let (lo, hi) = range
                .split_once("..")
                .ok_or_else(|| format!("expected uniform:LOW..HIGH, got {text:?}"))?;
            let (lo, hi) = (value(lo.trim())?, value(hi.trim())?);
            if lo > hi {
                return Err(format!(
                    "uniform:{lo}..{hi}: the low bound is over the high"
                ));
            }
            Dist::Uniform(lo, hi)
        } else {
            Dist::Fixed(value(text)?)
        };
        if dist.mean() > MAX_DRAW as f64 {
            return Err(format!("{text:?} is too large"));
        }
        Ok(dist)
    }

    /// The mean.
    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Fixed(v) | Dist::Exp(v) => v,
            Dist::Uniform(lo, hi) => (lo + hi) / 2.0,
        }
    }

    /// One draw, rounded to a whole number and capped at [`MAX_DRAW`].
    pub fn sample(&self, rng: &mut StdRng) -> u64 {
        let x = match *self {
            Dist::Fixed(v) => v,
            // Inverse transform; `1 - u` is in (0, 1], so the log is finite.
            Dist::Exp(mean) => -mean * (1.0 - rng.random::<f64>()).ln(),
            Dist::Uniform(lo, hi) => lo + (hi - lo) * rng.random::<f64>(),
        };
        (x.round().max(0.0) as u64).min(MAX_DRAW)
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dist::Fixed(v) => write!(f, "{v}"),
            Dist::Exp(v) => write!(f, "exp:{v}"),
            Dist::Uniform(lo, hi) => write!(f, "uniform:{lo}..{hi}"),
        }
    }
}

/// `--settle`: whether reservations are settled with the real cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SettleMode {
    /// Settle each request with its real cost when it ends.
    #[default]
    On,
    /// Keep the estimate charged (the real cost is only reported).
    Off,
    /// Both, side by side: every policy twice.
    Both,
}

impl FromStr for SettleMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" => Ok(SettleMode::On),
            "off" => Ok(SettleMode::Off),
            "both" => Ok(SettleMode::Both),
            _ => Err(format!("expected on, off or both, got {s:?}")),
        }
    }
}

/// What admitted requests do: the flags `--request-duration`, `--cost-estimate`,
/// `--cost-real`, applied to the traffic by [`RequestModel::apply`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestModel {
    /// How long each request runs (a trace's own durations are kept without it).
    pub duration: Option<Dist>,
    /// The cost charged on arrival, replacing the traffic's.
    pub estimate: Option<u64>,
    /// The real cost, known when the request ends (a trace's own are kept without it).
    pub real: Option<Dist>,
    /// The seed of the draws.
    pub seed: u64,
}

impl RequestModel {
    /// `traffic` with each request's duration, estimate and real cost set by the model.
    pub fn apply(&self, traffic: Traffic) -> Result<Traffic, SimError> {
        if self.estimate == Some(0) {
            return Err(SimError::Usage(
                "--cost-estimate must be at least 1".to_owned(),
            ));
        }
        // Separate streams, so adding a cost model does not change the durations drawn.
        let mut durations = StdRng::seed_from_u64(self.seed ^ 0x6475_7261_7469_6f6e);
        let mut costs = StdRng::seed_from_u64(self.seed ^ 0x0072_6561_6c63_6f73);
        let (keys, total) = (traffic.keys().to_vec(), traffic.duration());
        let mut arrivals = traffic.into_arrivals();
        for a in &mut arrivals {
            if let Some(d) = &self.duration {
                a.duration = Some(d.sample(&mut durations));
            }
            if let Some(estimate) = self.estimate {
                a.cost = estimate;
            }
            if let Some(real) = &self.real {
                a.real = Some(real.sample(&mut costs));
            }
        }
        Ok(Traffic::new(arrivals, keys, total))
    }

    /// Whether any part of the model is set.
    pub fn is_set(&self) -> bool {
        self.duration.is_some() || self.estimate.is_some() || self.real.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!(Dist::duration("2s").unwrap(), Dist::Fixed(2e6));
        assert_eq!(Dist::duration("exp:250ms").unwrap(), Dist::Exp(250e3));
        assert_eq!(Dist::cost("uniform:100..1500").unwrap().mean(), 800.0);
        for bad in [
            "",
            "exp:",
            "uniform:1s",
            "uniform:2s..1s",
            "soon",
            "exp:-1s",
        ] {
            assert!(Dist::duration(bad).is_err(), "{bad:?}");
        }
        for bad in ["-5", "1.5", "uniform:a..b", "exp:99999999999999999999"] {
            assert!(Dist::cost(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn draws_have_the_mean_and_stay_in_bounds() {
        let mut rng = StdRng::seed_from_u64(7);
        let n = 20_000;
        let exp = Dist::Exp(1_000.0);
        let mean = (0..n).map(|_| exp.sample(&mut rng)).sum::<u64>() as f64 / n as f64;
        assert!((mean - 1_000.0).abs() < 50.0, "{mean}");
        let uniform = Dist::Uniform(10.0, 20.0);
        assert!((0..n).all(|_| (10..=20).contains(&uniform.sample(&mut rng))));
        assert_eq!(Dist::Fixed(5.4).sample(&mut rng), 5);
    }
}
