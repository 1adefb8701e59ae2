//! `sluicegate simulate`'s command line, as a clap [`Args`](clap::Args) struct the binary
//! mounts, and [`SimulateArgs::run`], which does the whole job.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::clock::micros;
use sluicegate_core::spec::parse_duration;
use sluicegate_core::{AlgorithmKind, Micros, Mode, Policy, PolicySpec};

use crate::engine::{self, PolicyRun};
use crate::error::SimError;
use crate::model::{Dist, RequestModel, SettleMode};
use crate::pattern::{Pattern, PatternParams};
use crate::traffic::Traffic;
use crate::{chart, report};

/// `sluicegate simulate`: runs a traffic pattern through one or more policies on a virtual
/// clock, prints a summary table and writes an SVG chart.
///
/// ```
/// use clap::Parser;
/// use sluicegate_sim::SimulateArgs;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     simulate: SimulateArgs,
/// }
///
/// let cli = Cli::parse_from([
///     "simulate", "--algorithm", "fixed_window", "--limit", "10", "--period", "1m",
///     "--pattern", "boundary", "--duration", "2m",
/// ]);
/// let table = cli.simulate.run()?;
/// assert!(table.contains("20 (2.00×)"));
/// # Ok::<(), sluicegate_sim::SimError>(())
/// ```
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The algorithm, several separated by commas, or `all` to compare the six rate
    /// algorithms on the same traffic (`concurrency` is named on its own).
    #[arg(long, value_name = "NAME[,NAME…]|all")]
    pub algorithm: Option<String>,
    /// Requests per period (concurrency: requests in flight).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// The period, e.g. 1s, 1m, 1h (not for concurrency).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub period: Option<Duration>,
    /// Concurrency: how long an unreleased lease lasts; default 1m.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub lease: Option<Duration>,
    /// How long each admitted request runs: `2s`, `exp:2s` (exponential, that mean) or
    /// `uniform:1s..3s`. Concurrency leases are released when it ends.
    #[arg(long, value_name = "DIST", value_parser = Dist::duration)]
    pub request_duration: Option<Dist>,
    /// The cost charged when a request arrives (reserve), replacing the pattern's 1.
    #[arg(long, value_name = "N")]
    pub cost_estimate: Option<u64>,
    /// The real cost, known when the request ends: `800`, `exp:800`, `uniform:100..1500`.
    #[arg(long, value_name = "DIST", value_parser = Dist::cost)]
    pub cost_real: Option<Dist>,
    /// With real costs: `on` settles each request with its real cost when it ends, `off`
    /// keeps the estimate charged, `both` simulates each policy both ways.
    #[arg(long, value_name = "on|off|both", default_value = "on")]
    pub settle: SettleMode,
    /// Bucket capacity (token_bucket, leaky_bucket, gcra); default: the limit.
    #[arg(long, value_name = "N")]
    pub burst: Option<u64>,
    /// The traffic: steady, burst, boundary, poisson, ramp or trace:FILE.csv.
    #[arg(long, value_name = "PATTERN")]
    pub pattern: Pattern,
    /// Mean offered requests per second (the final rate of ramp); default: twice the limit.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Simulated time; default: ten periods (a trace: up to its last request).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Where to write the SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    pub out: Option<PathBuf>,
    /// reject, delay or shadow. When comparing several algorithms in delay mode, the window
    /// algorithms, which cannot delay, reject.
    #[arg(long, value_name = "MODE", value_parser = str::parse::<Mode>)]
    pub mode: Option<Mode>,
    /// Delay mode: the longest wait; default: one period.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub max_delay: Option<Duration>,
    /// Requests per clump (burst) or per straddle (boundary); default: twice the limit.
    #[arg(long, value_name = "N")]
    pub size: Option<u64>,
    /// Seed of the Poisson pattern's and the request model's random numbers.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Read policies from this config file's [[policies]]; the flags above override them.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// With --config: simulate only this policy (repeatable); default: every policy.
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
    /// How `--config` is read: the server's configuration reader, so a mistake in the file
    /// gets the same message, line and column as in `sluicegate validate` (set by the binary).
    #[arg(skip)]
    pub policy_reader: Option<PolicyReader>,
}

/// Reads a configuration file's `[[policies]]` as written, validated; the error is every
/// mistake, one per line, with its place in the file.
pub type PolicyReader = fn(&Path) -> Result<Vec<PolicySpec>, String>;

/// The outcome of [`SimulateArgs::simulate`]: the traffic and what each policy did with it.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// One line describing the pattern.
    pub description: String,
    /// The offered traffic.
    pub traffic: Traffic,
    /// One run per policy, in order.
    pub runs: Vec<PolicyRun>,
}

impl Simulation {
    /// The plain-text summary table.
    pub fn table(&self) -> String {
        report::table(&self.description, &self.traffic, &self.runs)
    }

    /// The SVG chart.
    pub fn svg(&self) -> Result<String, SimError> {
        chart::render(&self.description, &self.runs)
    }
}

impl SimulateArgs {
    /// Runs the simulation, writes the chart if `--out` was given, and returns the text to
    /// print: the summary table (and where the chart went).
    pub fn run(&self) -> Result<String, SimError> {
        let simulation = self.simulate()?;
        let mut text = simulation.table();
        if let Some(path) = &self.out {
            let svg = simulation.svg()?;
            std::fs::write(path, svg).map_err(|source| SimError::Io {
                path: path.clone(),
                source,
            })?;
            text.push_str(&format!("\nwrote {}\n", path.display()));
        }
        Ok(text)
    }

    /// Builds the policies and the traffic and runs every policy over it.
    pub fn simulate(&self) -> Result<Simulation, SimError> {
        let policies = self.policies()?;
        let first = policies
            .first()
            .ok_or_else(|| SimError::Usage("no policy to simulate".to_owned()))?;
        let period = first.period();
        let limit = first.limit();
        // A concurrency limit is reached at `limit` requests in flight: by default, twice
        // as many arrive per mean request duration.
        let per = match (first.algorithm(), self.request_duration) {
            (AlgorithmKind::Concurrency, Some(d)) => d.mean().max(1.0),
            _ => period as f64,
        };
        let rate = self.rate.unwrap_or(2.0 * limit as f64 * 1e6 / per);
        let duration = match self.duration {
            Some(d) => micros(d),
            None => period.saturating_mul(10),
        };
        let params = PatternParams {
            rate,
            duration,
            period,
            size: self.size.unwrap_or(limit.saturating_mul(2)),
            seed: self.seed,
        };
        let mut traffic = self.pattern.generate(&params)?;
        if let (Pattern::Trace(_), Some(d)) = (&self.pattern, self.duration) {
            traffic = clip(traffic, micros(d));
        }
        traffic = self.model().apply(traffic)?;
        let bucket = bucket_width(traffic.duration());
        let ways: &[bool] = match self.settle {
            SettleMode::On => &[true],
            SettleMode::Off => &[false],
            SettleMode::Both => &[true, false],
        };
        let mut runs = Vec::new();
        for p in &policies {
            for &settle in ways {
                runs.push(engine::run_with(p, &traffic, bucket, settle)?);
            }
        }
        let description = match &self.pattern {
            Pattern::Trace(_) => format!("pattern {}", self.pattern),
            Pattern::Boundary => format!(
                "pattern boundary ({} requests around every third window boundary)",
                params.size
            ),
            Pattern::Burst => format!(
                "pattern burst (clumps of {}, {} per second on average)",
                params.size,
                trim_float(rate)
            ),
            _ => format!("pattern {} ({} per second)", self.pattern, trim_float(rate)),
        } + &self.model_description();
        Ok(Simulation {
            description,
            traffic,
            runs,
        })
    }

    /// The request model of the flags.
    pub fn model(&self) -> RequestModel {
        RequestModel {
            duration: self.request_duration,
            estimate: self.cost_estimate,
            real: self.cost_real,
            seed: self.seed,
        }
    }

    /// The request model's part of the title: `; requests last exp:2s`, costs.
    fn model_description(&self) -> String {
        let mut text = String::new();
        if let Some(d) = self.request_duration {
            text.push_str(&format!("; requests last {}", duration_text(d)));
        }
        if let Some(e) = self.cost_estimate {
            text.push_str(&format!("; {e} charged on arrival"));
        }
        if let Some(r) = self.cost_real {
            text.push_str(&format!("; real cost {r}"));
        }
        text
    }

    /// The policies to simulate: from the config file with the flags laid over, or from
    /// the flags alone.
    pub fn policies(&self) -> Result<Vec<Arc<Policy>>, SimError> {
        // `None`: each spec's own algorithm; `Some(list)`: these, for every spec.
        let chosen: Option<Vec<AlgorithmKind>> = match self.algorithm.as_deref() {
            None => None,
            Some("all") => Some(AlgorithmKind::ALL.to_vec()),
            Some(list) => Some(
                list.split(',')
                    .map(|name| {
                        name.trim()
                            .parse::<AlgorithmKind>()
                            .map_err(|source| SimError::Policy {
                                name: name.trim().to_owned(),
                                source,
                            })
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        let several = chosen.as_ref().is_some_and(|kinds| kinds.len() > 1);
        let specs = match &self.config {
            Some(path) => self.config_specs(path)?,
            None => {
                // Concurrency alone has no period (its duration is --lease).
                let leases_only = chosen
                    .as_ref()
                    .is_some_and(|k| k.iter().all(|k| *k == AlgorithmKind::Concurrency));
                let missing: Vec<&str> = [
                    (self.algorithm.is_none(), "--algorithm"),
                    (self.limit.is_none(), "--limit"),
                    (self.period.is_none() && !leases_only, "--period"),
                ]
                .into_iter()
                .filter_map(|(m, flag)| m.then_some(flag))
                .collect();
                if !missing.is_empty() {
                    return Err(SimError::Usage(format!(
                        "missing {} (or give --config FILE)",
                        missing.join(", ")
                    )));
                }
                vec![PolicySpec {
                    name: String::new(),
                    algorithm: AlgorithmKind::FixedWindow,
                    limit: 0,
                    period: String::new(),
                    burst: None,
                    mode: Mode::Reject,
                    max_delay: None,
                    on_store_error: Default::default(),
                    lease: None,
                    penalty: None,
                    calendar: None,
                    timezone: None,
                }]
            }
        };
        let mut out = Vec::new();
        for spec in specs {
            let kinds = chosen.clone().unwrap_or_else(|| vec![spec.algorithm]);
            for kind in kinds {
                let name = match (self.config.is_some(), several) {
                    (false, _) => kind.name().to_owned(),
                    (true, false) => spec.name.clone(),
                    (true, true) => format!("{}.{}", spec.name, kind.name()),
                };
                out.push(Arc::new(self.build(&spec, kind, &name, several)?));
            }
        }
        Ok(out)
    }

    /// `spec` with the flags laid over it, as algorithm `kind` named `name`, validated by
    /// the same rules as a configuration file ([`PolicySpec::validate`]).
    fn build(
        &self,
        spec: &PolicySpec,
        kind: AlgorithmKind,
        name: &str,
        several: bool,
    ) -> Result<Policy, SimError> {
        let text = |d: Duration| humantime::format_duration(d).to_string();
        let mut spec = spec.clone();
        spec.name = name.to_owned();
        spec.algorithm = kind;
        if let Some(period) = self.period {
            spec.period = text(period);
            (spec.calendar, spec.timezone) = (None, None);
        }
        if kind == AlgorithmKind::Concurrency {
            // A lease instead of a period; none of the rate fields.
            spec.period = String::new();
            spec.lease = self.lease.map(text).or(spec.lease);
            (spec.calendar, spec.timezone, spec.penalty) = (None, None, None);
        } else {
            spec.lease = None;
        }
        spec.limit = self.limit.unwrap_or(spec.limit);
        spec.burst = self.burst.or(spec.burst);
        spec.mode = self.mode.unwrap_or(spec.mode);
        // Comparing algorithms in delay mode: the windows cannot delay, so they reject.
        if several && spec.mode == Mode::Delay && !kind.supports_delay() {
            spec.mode = Mode::Reject;
        }
        if let Some(max_delay) = self.max_delay {
            spec.max_delay = Some(text(max_delay));
        }
        if kind == AlgorithmKind::Concurrency {
            spec.burst = None;
            if several {
                (spec.max_delay, spec.mode) = (None, Mode::Reject);
            }
        }
        spec.validate().map_err(|errors| SimError::Invalid {
            name: name.to_owned(),
            errors: errors
                .iter()
                .map(|e| format!("{}: {e}", e.field))
                .collect::<Vec<_>>()
                .join("; "),
        })
    }

    fn config_specs(&self, path: &Path) -> Result<Vec<PolicySpec>, SimError> {
        let config_err = |reason: String| SimError::Config {
            path: path.to_owned(),
            reason,
        };
        let read = self.policy_reader.ok_or_else(|| {
            SimError::Usage(
                "--config needs a configuration reader (the sluicegate binary has it)".to_owned(),
            )
        })?;
        let specs = read(path).map_err(SimError::Read)?;
        if specs.is_empty() {
            return Err(config_err("the file has no [[policies]]".to_owned()));
        }
        if self.policies.is_empty() {
            return Ok(specs);
        }
        self.policies
            .iter()
            .map(|wanted| {
                specs
                    .iter()
                    .find(|p| &p.name == wanted)
                    .cloned()
                    .ok_or_else(|| config_err(format!("no policy named {wanted:?}")))
            })
            .collect()
    }
}

/// Drops trace requests at or after `duration`.
fn clip(traffic: Traffic, duration: Micros) -> Traffic {
    let arrivals = traffic
        .arrivals()
        .iter()
        .copied()
        .filter(|a| a.at < duration)
        .collect();
    Traffic::new(arrivals, traffic.keys().to_vec(), duration)
}

/// A round chart bucket (1, 2 or 5 × 10ⁿ µs) giving at most about 240 buckets.
fn bucket_width(duration: Micros) -> Micros {
    let target = duration.div_ceil(240).max(1);
    let mut unit: Micros = 1;
    loop {
        for step in [1, 2, 5] {
            let width = unit.saturating_mul(step);
            if width >= target {
                return width;
            }
        }
        unit = unit.saturating_mul(10);
    }
}

/// A duration distribution as written: `2s`, `exp:2s`, `uniform:1s..3s`.
fn duration_text(d: Dist) -> String {
    let t = |us: f64| report::human(us.round() as Micros);
    match d {
        Dist::Fixed(v) => t(v),
        Dist::Exp(v) => format!("exp:{}", t(v)),
        Dist::Uniform(lo, hi) => format!("uniform:{}..{}", t(lo), t(hi)),
    }
}

fn trim_float(x: f64) -> String {
    let text = format!("{x:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_round() {
        assert_eq!(bucket_width(60_000_000), 500_000);
        assert_eq!(bucket_width(3_600_000_000), 20_000_000);
        assert_eq!(bucket_width(1), 1);
    }

    #[test]
    fn floats_are_trimmed() {
        assert_eq!(trim_float(0.3333333), "0.333");
        assert_eq!(trim_float(20.0), "20");
    }
}
