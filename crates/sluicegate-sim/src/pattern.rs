//! Synthetic traffic: the [`Pattern`]s of `--pattern`, each a deterministic function of its
//! [`PatternParams`] (Poisson arrivals come from a seeded RNG, so runs repeat exactly).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::Micros;

use crate::error::SimError;
use crate::trace;
use crate::traffic::{Arrival, MAX_REQUESTS, Traffic};

/// A traffic pattern.
///
/// ```
/// use sluicegate_sim::Pattern;
/// assert_eq!("boundary".parse::<Pattern>().unwrap(), Pattern::Boundary);
/// assert!(matches!("trace:requests.csv".parse::<Pattern>().unwrap(), Pattern::Trace(_)));
/// assert!("zigzag".parse::<Pattern>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// One request every `1 / rate` seconds.
    Steady,
    /// Clumps of `size` requests (1 ms apart), one clump every `size / rate` seconds.
    Burst,
    /// `size` requests straddling a window boundary: half in the last twentieth of a period,
    /// half in the first twentieth of the next; repeated every three periods.
    Boundary,
    /// Poisson arrivals at a mean of `rate` per second, from a seeded RNG.
    Poisson,
    /// The rate rises linearly from 0 to `rate` over the duration.
    Ramp,
    /// Requests read from a CSV file of `timestamp_ms[,key[,cost]]` lines.
    Trace(PathBuf),
}

impl FromStr for Pattern {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "steady" => Ok(Pattern::Steady),
            "burst" | "bursts" => Ok(Pattern::Burst),
            "boundary" => Ok(Pattern::Boundary),
            "poisson" => Ok(Pattern::Poisson),
            "ramp" => Ok(Pattern::Ramp),
            _ => match s.strip_prefix("trace:") {
                Some(path) if !path.is_empty() => Ok(Pattern::Trace(PathBuf::from(path))),
                _ => Err(SimError::UnknownPattern(s.to_owned())),
            },
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Steady => f.write_str("steady"),
            Pattern::Burst => f.write_str("burst"),
            Pattern::Boundary => f.write_str("boundary"),
            Pattern::Poisson => f.write_str("poisson"),
            Pattern::Ramp => f.write_str("ramp"),
            Pattern::Trace(path) => write!(f, "trace:{}", path.display()),
        }
    }
}

/// The numbers a pattern is generated from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PatternParams {
    /// Mean offered requests per second (steady, burst, poisson; the final rate of ramp).
    pub rate: f64,
    /// Simulated span, µs.
    pub duration: Micros,
    /// The period of the (first) policy, µs: boundary bursts straddle its multiples.
    pub period: Micros,
    /// Requests per clump (burst) or per straddle (boundary).
    pub size: u64,
    /// Seed of the Poisson RNG.
    pub seed: u64,
}

const SECOND: f64 = 1_000_000.0;

impl Pattern {
    /// Generates the traffic, one client key (`client`, cost 1) for the synthetic patterns.
    pub fn generate(&self, params: &PatternParams) -> Result<Traffic, SimError> {
        if let Pattern::Trace(path) = self {
            return trace::read(path);
        }
        if !(params.rate.is_finite() && params.rate > 0.0) {
            return Err(SimError::Usage(format!(
                "--rate must be a positive number of requests per second, got {}",
                params.rate
            )));
        }
        if params.duration == 0 {
            return Err(SimError::Usage("--duration must be positive".to_owned()));
        }
        let expected = match self {
            Pattern::Boundary => params
                .size
                .saturating_mul(params.duration / params.period.max(1) / 3 + 1),
            Pattern::Ramp => (params.rate * params.duration as f64 / SECOND / 2.0) as u64,
            _ => (params.rate * params.duration as f64 / SECOND) as u64,
        };
        if expected > MAX_REQUESTS {
            return Err(SimError::TooManyRequests(expected));
        }
        let times = match self {
            Pattern::Steady => steady(params),
            Pattern::Burst => {
                let times = bursts(params);
                if times.len() as u64 > MAX_REQUESTS {
                    return Err(SimError::TooManyRequests(times.len() as u64));
                }
                times
            }
            Pattern::Boundary => boundary(params),
            Pattern::Poisson => poisson(params),
            Pattern::Ramp => ramp(params),
            Pattern::Trace(_) => Vec::new(),
        };
        let arrivals = times.into_iter().map(|at| Arrival::new(at, 0, 1)).collect();
        Ok(Traffic::new(
            arrivals,
            vec!["client".to_owned()],
            params.duration,
        ))
    }
}

fn steady(p: &PatternParams) -> Vec<Micros> {
    let interval = SECOND / p.rate;
    (0u64..)
        .map(|i| (i as f64 * interval) as Micros)
        .take_while(|t| *t < p.duration)
        .collect()
}

fn bursts(p: &PatternParams) -> Vec<Micros> {
    let size = p.size.max(1);
    let every = size as f64 * SECOND / p.rate;
    // A clump is 1 ms apart, squeezed if the clumps would overlap.
    let spacing = (every / size as f64).min(1_000.0);
    let mut out = Vec::new();
    for clump in 0u64.. {
        let start = clump as f64 * every;
        // A clump larger than the traffic bound would be all the memory on its own.
        if start >= p.duration as f64 || out.len() as u64 > MAX_REQUESTS {
            break;
        }
        let room = (MAX_REQUESTS + 1).saturating_sub(out.len() as u64);
        out.extend(
            (0..size.min(room))
                .map(|i| (start + i as f64 * spacing) as Micros)
                .take_while(|t| *t < p.duration),
        );
    }
    out
}

fn boundary(p: &PatternParams) -> Vec<Micros> {
    let size = p.size.max(1);
    let before = size / 2;
    let after = size - before;
    let spread = (p.period / 20).max(1) as f64;
    let mut out = Vec::new();
    let mut edge = p.period;
    loop {
        let edge_f = edge as f64;
        out.extend(
            (0..before).map(|i| (edge_f - spread + i as f64 * spread / before as f64) as Micros),
        );
        out.extend((0..after).map(|i| (edge_f + i as f64 * spread / after as f64) as Micros));
        edge = edge.saturating_add(p.period.saturating_mul(3));
        if edge >= p.duration || edge == Micros::MAX {
            break;
        }
    }
    out.retain(|t| *t < p.duration);
    out
}

fn poisson(p: &PatternParams) -> Vec<Micros> {
    let mut rng = StdRng::seed_from_u64(p.seed);
    let mut out = Vec::new();
    let mut t = 0.0;
    loop {
        // Inverse transform: 1 - U is in (0, 1], so ln never sees 0.
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / p.rate * SECOND;
        if t >= p.duration as f64 {
            return out;
        }
        out.push(t as Micros);
    }
}

fn ramp(p: &PatternParams) -> Vec<Micros> {
    // Rate r(t) = rate * t / D, so N(t) = rate * t² / (2D); the k-th arrival is at
    // t = sqrt(2 D k / rate).
    let d = p.duration as f64 / SECOND;
    (1u64..)
        .map(|k| ((2.0 * d * k as f64 / p.rate).sqrt() * SECOND) as Micros)
        .take_while(|t| *t < p.duration)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> PatternParams {
        PatternParams {
            rate: 10.0,
            duration: 10 * 1_000_000,
            period: 1_000_000,
            size: 20,
            seed: 7,
        }
    }

    #[test]
    fn steady_is_evenly_spaced() {
        let t = Pattern::Steady.generate(&params()).unwrap();
        assert_eq!(t.arrivals().len(), 100);
        assert_eq!(t.arrivals()[1].at - t.arrivals()[0].at, 100_000);
    }

    #[test]
    fn bursts_keep_the_mean_rate() {
        let t = Pattern::Burst.generate(&params()).unwrap();
        // Clumps of 20 every 2 s over 10 s.
        assert_eq!(t.arrivals().len(), 100);
        assert_eq!(t.arrivals()[20].at, 2_000_000);
    }

    #[test]
    fn boundary_straddles_each_third_edge() {
        let t = Pattern::Boundary.generate(&params()).unwrap();
        // Edges at 1 s, 4 s, 7 s: 10 requests before and 10 after each.
        assert_eq!(t.arrivals().len(), 60);
        let near_first = t.arrivals()[..20]
            .iter()
            .all(|a| a.at.abs_diff(1_000_000) <= 50_000);
        assert!(near_first);
        assert_eq!(t.arrivals().iter().filter(|a| a.at < 1_000_000).count(), 10);
    }

    #[test]
    fn poisson_is_seeded_and_near_its_mean() {
        let mut p = params();
        p.duration = 1_000 * 1_000_000;
        let a = Pattern::Poisson.generate(&p).unwrap();
        let b = Pattern::Poisson.generate(&p).unwrap();
        assert_eq!(a, b);
        let n = a.arrivals().len() as f64;
        assert!((n - 10_000.0).abs() < 500.0, "{n}");
    }

    #[test]
    fn ramp_rises() {
        let t = Pattern::Ramp.generate(&params()).unwrap();
        assert_eq!(t.arrivals().len(), 49);
        let first_half = t.arrivals().iter().filter(|a| a.at < 5_000_000).count();
        assert!(first_half < 15, "{first_half}");
    }

    #[test]
    fn bad_numbers_are_errors() {
        let mut p = params();
        p.rate = 0.0;
        assert!(matches!(
            Pattern::Steady.generate(&p),
            Err(SimError::Usage(_))
        ));
        p.rate = 1e9;
        p.duration = 3_600 * 1_000_000;
        assert!(matches!(
            Pattern::Steady.generate(&p),
            Err(SimError::TooManyRequests(_))
        ));
    }
}
