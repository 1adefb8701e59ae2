//! The simulation itself: every offered request goes through the policy's real algorithm
//! (from `sluicegate-core`, via [`with_algorithm!`](sluicegate_core::with_algorithm)) at its
//! virtual time, and the per-policy outcome comes from [`Verdict::combine`], the rule every
//! store follows. Nothing here decides anything the core does not.

use std::collections::VecDeque;
use std::sync::Arc;

use sluicegate_core::algorithm::Algorithm;
use sluicegate_core::{Micros, Outcome, Policy, Verdict};

use crate::error::SimError;
use crate::memory::StateBytes;
use crate::traffic::Traffic;

/// 2026-01-01T00:00:00Z in µs: virtual time starts at the first window boundary from here.
const EPOCH_BASE: Micros = 1_767_225_600 * 1_000_000;

/// The virtual time at which a simulation under a policy of `period` µs starts: a multiple
/// of `period`, so fixed and sliding windows begin exactly at the start.
///
/// ```
/// let start = sluicegate_sim::engine::start_time(60_000_000);
/// assert_eq!(start % 60_000_000, 0);
/// ```
pub fn start_time(period: Micros) -> Micros {
    EPOCH_BASE.div_ceil(period.max(1)) * period.max(1)
}

/// Offered requests over time, in buckets of equal width: what the chart draws.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    /// Bucket width, µs.
    pub bucket: Micros,
    /// Requests arriving in each bucket.
    pub offered: Vec<u64>,
    /// Requests going through in each bucket (a delayed request counts when its wait ends).
    pub admitted: Vec<u64>,
    /// Requests that arrived in each bucket and had to wait (delay mode).
    pub delayed: Vec<u64>,
    /// Requests that arrived in each bucket and were rejected.
    pub rejected: Vec<u64>,
    /// For the busiest key: the most cost admitted in the last period, reached in each bucket.
    pub in_period: Vec<u64>,
}

impl Series {
    fn new(bucket: Micros, span: Micros) -> Self {
        let n = usize::try_from(span.div_ceil(bucket.max(1)))
            .unwrap_or(1)
            .max(1);
        Series {
            bucket: bucket.max(1),
            offered: vec![0; n],
            admitted: vec![0; n],
            delayed: vec![0; n],
            rejected: vec![0; n],
            in_period: vec![0; n],
        }
    }

    fn index_of(&mut self, at: Micros) -> usize {
        let i = usize::try_from(at / self.bucket).unwrap_or(usize::MAX);
        if i >= self.offered.len() {
            // Only a delayed release lands past the end. A huge max_delay must not grow the
            // chart without bound: past MAX_BUCKETS, releases count in the last bucket.
            if self.offered.len() >= MAX_BUCKETS {
                return self.offered.len() - 1;
            }
            let n = (i + 1).min(MAX_BUCKETS);
            self.offered.resize(n, 0);
            self.admitted.resize(n, 0);
            self.delayed.resize(n, 0);
            self.rejected.resize(n, 0);
            self.in_period.resize(n, 0);
        }
        i.min(self.offered.len() - 1)
    }
}

/// The most chart buckets kept: the traffic's span takes about 240, delayed releases may
/// extend it up to this.
pub const MAX_BUCKETS: usize = 1_000;

/// What one policy did with the traffic.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    /// The policy simulated.
    pub policy: Arc<Policy>,
    /// Requests offered.
    pub offered: u64,
    /// Requests that went through, at once or after a wait (shadow mode: all of them).
    pub admitted: u64,
    /// Requests rejected.
    pub rejected: u64,
    /// Requests admitted after a wait (delay mode); included in `admitted`.
    pub delayed: u64,
    /// Requests a shadow policy would have rejected; included in `admitted`.
    pub shadow_denied: u64,
    /// The longest wait of a delayed request, µs.
    pub max_delay: Micros,
    /// The most cost admitted for one key in any interval of one period, `(t - period, t]`.
    pub peak_in_period: u64,
    /// The most bytes one key's algorithm state held at any time.
    pub state_bytes: usize,
    /// Counts over time.
    pub series: Series,
}

/// Runs `traffic` through `policy`'s algorithm, with chart buckets of `bucket` µs.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, Policy};
/// use sluicegate_sim::{Traffic, engine::run};
///
/// let policy = Arc::new(Policy::builder("p", AlgorithmKind::SlidingLog, 2, Duration::from_secs(1)).build()?);
/// let traffic = Traffic::single_key(vec![0, 100_000, 200_000, 1_000_000]);
/// let result = run(&policy, &traffic, 100_000)?;
/// assert_eq!((result.admitted, result.rejected), (3, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run(policy: &Arc<Policy>, traffic: &Traffic, bucket: Micros) -> Result<PolicyRun, SimError> {
    let max_cost = traffic.max_cost();
    if max_cost > policy.capacity() {
        return Err(SimError::CostOverCapacity {
            policy: policy.name().to_owned(),
            cost: max_cost,
            capacity: policy.capacity(),
        });
    }
    Ok(sluicegate_core::with_algorithm!(policy.as_ref(), |alg| {
        simulate(alg, policy, traffic, bucket)
    }))
}

/// Admitted cost of one key in the last period, oldest first.
#[derive(Default)]
struct Recent {
    entries: VecDeque<(Micros, u64)>,
    total: u64,
}

impl Recent {
    /// Adds an admission at `at` and returns the cost admitted in `(at - period, at]`.
    fn admit(&mut self, at: Micros, cost: u64, period: Micros) -> u64 {
        // Releases of one key come in time order (each waits behind the ones before it);
        // clamping guards the window arithmetic should that ever not hold.
        let at = self.entries.back().map_or(at, |(last, _)| at.max(*last));
        self.level_at(at, period);
        self.entries.push_back((at, cost));
        self.total += cost;
        self.total
    }

    /// The cost admitted in `(at - period, at]`, forgetting what is older.
    fn level_at(&mut self, at: Micros, period: Micros) -> u64 {
        while let Some(&(t, c)) = self.entries.front() {
            if t + period > at {
                break;
            }
            self.entries.pop_front();
            self.total -= c;
        }
        self.total
    }
}

fn simulate<A>(alg: A, policy: &Arc<Policy>, traffic: &Traffic, bucket: Micros) -> PolicyRun
where
    A: Algorithm,
    A::State: StateBytes,
{
    let period = policy.period();
    let start = start_time(period);
    let budget = policy.delay_budget();
    let mut states: Vec<A::State> = vec![A::State::default(); traffic.keys().len()];
    let mut recent: Vec<Recent> = Vec::new();
    recent.resize_with(traffic.keys().len(), Recent::default);
    let focus = busiest_key(traffic);
    let mut focus_admitted: Vec<(Micros, u64)> = Vec::new();
    let mut series = Series::new(bucket, traffic.duration());
    let mut run = PolicyRun {
        policy: Arc::clone(policy),
        offered: 0,
        admitted: 0,
        rejected: 0,
        delayed: 0,
        shadow_denied: 0,
        max_delay: 0,
        peak_in_period: 0,
        state_bytes: A::State::default().state_bytes(),
        series: Series::default(),
    };
    for arrival in traffic.arrivals() {
        let now = start + arrival.at;
        let key = arrival.key as usize;
        let state = &mut states[key];
        let decision = alg.evaluate(state, now, arrival.cost, budget);
        let verdict = Verdict::combine_one(Arc::clone(policy), decision);
        if verdict.consumes(0) {
            alg.consume(state, now, arrival.cost);
            run.state_bytes = run.state_bytes.max(state.state_bytes());
        }
        let outcome = verdict
            .decisions
            .first()
            .map_or(Outcome::Denied, |d| d.outcome);
        run.offered += 1;
        let bucket = series.index_of(arrival.at);
        series.offered[bucket] += 1;
        match outcome {
            Outcome::Denied | Outcome::StoreError => {
                run.rejected += 1;
                series.rejected[bucket] += 1;
                continue;
            }
            Outcome::Delayed => {
                run.delayed += 1;
                series.delayed[bucket] += 1;
                run.max_delay = run.max_delay.max(verdict.delay);
            }
            Outcome::ShadowDenied => run.shadow_denied += 1,
            Outcome::Allowed => {}
        }
        run.admitted += 1;
        let released = arrival.at + verdict.delay;
        let in_period = recent[key].admit(released, arrival.cost, period);
        run.peak_in_period = run.peak_in_period.max(in_period);
        let out = series.index_of(released);
        series.admitted[out] += 1;
        if key == focus {
            focus_admitted.push((released, arrival.cost));
        }
    }
    fill_in_period(&mut series, &mut focus_admitted, period);
    run.series = series;
    run
}

/// The key with the most requests (the first such): the one whose in-period line is drawn.
fn busiest_key(traffic: &Traffic) -> usize {
    let mut counts = vec![0u64; traffic.keys().len()];
    for a in traffic.arrivals() {
        counts[a.key as usize] += 1;
    }
    counts
        .iter()
        .enumerate()
        .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))
        .map_or(0, |(i, _)| i)
}

/// The focus key's admitted cost in the last period: its highest value within each bucket
/// (reached at an admission, or at the bucket's start before anything expires in it).
fn fill_in_period(series: &mut Series, admitted: &mut [(Micros, u64)], period: Micros) {
    admitted.sort_by_key(|(at, _)| *at);
    let width = series.bucket;
    let mut window = Recent::default();
    let mut next = 0usize;
    for (i, level) in series.in_period.iter_mut().enumerate() {
        let begin = i as u64 * width;
        let end = begin + width;
        let mut best = window.level_at(begin, period);
        while let Some(&(at, cost)) = admitted.get(next).filter(|(at, _)| *at < end) {
            best = best.max(window.admit(at, cost, period));
            next += 1;
        }
        *level = best;
    }
}
