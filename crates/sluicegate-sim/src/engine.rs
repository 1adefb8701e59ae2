//! The simulation itself: every offered request goes through the policy's real algorithm
//! (from `sluicegate-core`, via [`with_algorithm!`](sluicegate_core::with_algorithm)) at its
//! virtual time, and the per-policy outcome comes from [`Verdict::combine`], the rule every
//! store follows. Nothing here decides anything the core does not.
//!
//! With a request model (see [`crate::model`]) each admitted request also ends: at its end a
//! concurrency lease is released ([`Algorithm::release`]) and a reservation settled with
//! the real cost ([`Algorithm::settle`]), in time order with the arrivals, so leases are
//! held and freed, and expire after `lease`, on the virtual clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use sluicegate_core::algorithm::{Admitted, Algorithm};
use sluicegate_core::{AlgorithmKind, Decision, Micros, Outcome, Policy, Verdict};

use crate::error::SimError;
use crate::memory::StateBytes;
use crate::traffic::{Arrival, Traffic};

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
    /// For the busiest key, with a request-duration model: the most cost of its requests
    /// running at once in each bucket (empty without a model).
    pub in_flight: Vec<u64>,
    /// For the busiest key of a concurrency policy: the most slots its leases held in each
    /// bucket (empty for the rate algorithms).
    pub held: Vec<u64>,
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
            in_flight: Vec::new(),
            held: Vec::new(),
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
            for gauge in [&mut self.in_flight, &mut self.held] {
                if !gauge.is_empty() {
                    gauge.resize(n, 0);
                }
            }
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
    /// The most cost admitted for one key in any interval of one period, `(t - period, t]`
    /// (the real cost where the traffic has one); for concurrency, the most slots one key
    /// held at once.
    pub peak_in_period: u64,
    /// The most bytes one key's algorithm state held at any time.
    pub state_bytes: usize,
    /// Concurrency policies: their leases.
    pub leases: Option<LeaseStats>,
    /// Traffic with real costs: what was estimated, what was real, what settling did.
    pub settle: Option<SettleStats>,
    /// Counts over time.
    pub series: Series,
}

/// Leases of a concurrency policy over the run (with a request-duration model, each is
/// released when its request ends; without one, it is held until `lease` passes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// The most slots one key held at once (after an admission).
    pub peak_held: u64,
    /// The most slots of one key's requests running at once (what the upstream saw): above
    /// `peak_held` only when requests outlive their `lease`.
    pub peak_running: u64,
    /// Leases released when their request ended.
    pub released: u64,
    /// Leases that expired before their request ended (the request outlived `lease`).
    pub expired: u64,
}

/// Reserve then settle over the run: the estimate charged on arrival, the real cost known at
/// each request's end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettleStats {
    /// Whether the real cost was settled (`false`: the estimate stayed charged).
    pub settled: bool,
    /// Estimates charged for admitted requests.
    pub estimated: u64,
    /// Real cost of admitted requests.
    pub real: u64,
    /// Settles that gave cost back (real under the estimate).
    pub refunded: u64,
    /// Settles that charged more (real over the estimate).
    pub charged: u64,
}

/// Runs `traffic` through `policy`'s algorithm, with chart buckets of `bucket` µs; real
/// costs (if the traffic has them) are settled.
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
    run_with(policy, traffic, bucket, true)
}

/// [`run`], choosing whether real costs are settled (`false`: the estimate stays charged,
/// the real cost is only counted).
pub fn run_with(
    policy: &Arc<Policy>,
    traffic: &Traffic,
    bucket: Micros,
    settle: bool,
) -> Result<PolicyRun, SimError> {
    let max_cost = traffic.max_cost();
    if max_cost > policy.capacity() {
        return Err(SimError::CostOverCapacity {
            policy: policy.name().to_owned(),
            cost: max_cost,
            capacity: policy.capacity(),
        });
    }
    Ok(sluicegate_core::with_algorithm!(policy.as_ref(), |alg| {
        Sim::new(alg, policy, traffic, bucket, settle).simulate(traffic)
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

/// Something that happens to an admitted request after its decision, at `at` (µs since the
/// start); ordered by time, then by when it was scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: Micros,
    seq: u64,
    key: usize,
    kind: EventKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// The request reaches the upstream (after its wait, in delay mode).
    Start { cost: u64 },
    /// It ends: release the lease `(expires_at, cost)` if any (0: none), settle `real` if
    /// set, against the admission `(at, estimate, remaining)`.
    End {
        cost: u64,
        lease: Micros,
        settle: Option<(Micros, u64, u64, u64)>,
    },
}

/// One simulation in progress: the keys' states and what has been counted.
struct Sim<'a, A: Algorithm> {
    alg: A,
    policy: &'a Arc<Policy>,
    start: Micros,
    settle: bool,
    concurrency: bool,
    states: Vec<A::State>,
    running: Vec<u64>,
    recent: Vec<Recent>,
    focus: usize,
    focus_admitted: Vec<(Micros, u64)>,
    events: BinaryHeap<Reverse<Event>>,
    seq: u64,
    /// The first chart bucket whose opening level is not recorded yet.
    filled: usize,
    run: PolicyRun,
}

impl<'a, A> Sim<'a, A>
where
    A: Algorithm,
    A::State: StateBytes,
{
    fn new(
        alg: A,
        policy: &'a Arc<Policy>,
        traffic: &Traffic,
        bucket: Micros,
        settle: bool,
    ) -> Self {
        let keys = traffic.keys().len();
        let concurrency = policy.algorithm() == AlgorithmKind::Concurrency;
        let mut series = Series::new(bucket, traffic.duration());
        if traffic.arrivals().iter().any(|a| a.duration.is_some()) {
            series.in_flight = vec![0; series.offered.len()];
        }
        if concurrency {
            series.held = vec![0; series.offered.len()];
        }
        let has_real = traffic.arrivals().iter().any(|a| a.real.is_some());
        let mut recent = Vec::new();
        recent.resize_with(keys, Recent::default);
        Sim {
            start: start_time(policy.period()),
            settle,
            concurrency,
            states: vec![A::State::default(); keys],
            running: vec![0; keys],
            recent,
            focus: busiest_key(traffic),
            focus_admitted: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            filled: 0,
            run: PolicyRun {
                policy: Arc::clone(policy),
                offered: 0,
                admitted: 0,
                rejected: 0,
                delayed: 0,
                shadow_denied: 0,
                max_delay: 0,
                peak_in_period: 0,
                state_bytes: A::State::default().state_bytes(),
                leases: concurrency.then(LeaseStats::default),
                settle: has_real.then(|| SettleStats {
                    settled: settle,
                    ..SettleStats::default()
                }),
                series,
            },
            alg,
            policy,
        }
    }

    fn simulate(mut self, traffic: &Traffic) -> PolicyRun {
        for arrival in traffic.arrivals() {
            self.events_until(arrival.at);
            self.arrive(arrival);
        }
        self.events_until(Micros::MAX);
        self.gauge_fill(Micros::MAX);
        let period = self.policy.period();
        let mut admitted = std::mem::take(&mut self.focus_admitted);
        fill_in_period(&mut self.run.series, &mut admitted, period);
        if self.concurrency {
            // The busiest key's in-period line is its leases held.
            self.run.series.in_period = self.run.series.held.clone();
        }
        self.run
    }

    /// Decides one arrival and schedules what follows from it.
    fn arrive(&mut self, arrival: &Arrival) {
        let now = self.start + arrival.at;
        let key = arrival.key as usize;
        let budget = self.policy.delay_budget();
        let decision = self
            .alg
            .evaluate(&self.states[key], now, arrival.cost, budget);
        let verdict = Verdict::combine_one(Arc::clone(self.policy), decision);
        let consumed = verdict.consumes(0);
        if consumed {
            self.gauge_fill(arrival.at);
            self.alg.consume(&mut self.states[key], now, arrival.cost);
            let bytes = self.states[key].state_bytes();
            self.run.state_bytes = self.run.state_bytes.max(bytes);
            self.gauge_record(key, arrival.at);
        }
        let outcome = verdict
            .decisions
            .first()
            .map_or(Outcome::Denied, |d| d.outcome);
        if !self.count(arrival, outcome, verdict.delay) {
            return;
        }
        let released = arrival.at + verdict.delay;
        let used = arrival.real.unwrap_or(arrival.cost);
        if self.concurrency && consumed {
            let held = self.policy.limit() - decision.remaining.min(self.policy.limit());
            self.run.peak_in_period = self.run.peak_in_period.max(held);
            if let Some(l) = &mut self.run.leases {
                l.peak_held = l.peak_held.max(held);
            }
        } else if !self.concurrency {
            let in_period = self.recent[key].admit(released, used, self.policy.period());
            self.run.peak_in_period = self.run.peak_in_period.max(in_period);
        }
        if key == self.focus {
            self.focus_admitted.push((released, used));
        }
        self.schedule(arrival, now, released, consumed.then_some(&decision));
    }

    /// Counts an outcome; whether the request went through.
    fn count(&mut self, arrival: &Arrival, outcome: Outcome, delay: Micros) -> bool {
        let run = &mut self.run;
        run.offered += 1;
        let bucket = run.series.index_of(arrival.at);
        run.series.offered[bucket] += 1;
        match outcome {
            Outcome::Denied | Outcome::StoreError => {
                run.rejected += 1;
                run.series.rejected[bucket] += 1;
                return false;
            }
            Outcome::Delayed => {
                run.delayed += 1;
                run.series.delayed[bucket] += 1;
                run.max_delay = run.max_delay.max(delay);
            }
            Outcome::ShadowDenied => run.shadow_denied += 1,
            Outcome::Allowed => {}
        }
        run.admitted += 1;
        let out = run.series.index_of(arrival.at + delay);
        run.series.admitted[out] += 1;
        true
    }

    /// The start and the end of an admitted request; `consumed`: the decision that took
    /// from the key (none for a shadow policy's over-limit request).
    fn schedule(
        &mut self,
        a: &Arrival,
        now: Micros,
        released: Micros,
        consumed: Option<&Decision>,
    ) {
        if let Some(s) = &mut self.run.settle {
            s.estimated += a.cost;
            s.real += a.real.unwrap_or(a.cost);
        }
        if a.duration.is_none() && a.real.is_none() {
            return;
        }
        let key = a.key as usize;
        let settle = match (consumed, a.real) {
            (Some(d), Some(real)) if self.settle => Some((now, a.cost, d.remaining, real)),
            _ => None,
        };
        let lease = consumed.map_or(0, |d| d.lease);
        if let Some(duration) = a.duration {
            self.push(released, key, EventKind::Start { cost: a.cost });
            let kind = EventKind::End {
                cost: a.cost,
                lease,
                settle,
            };
            self.push(released.saturating_add(duration), key, kind);
        } else if settle.is_some() {
            // No duration: settled as soon as it went through; the lease (if any) is kept.
            let kind = EventKind::End {
                cost: 0,
                lease: 0,
                settle,
            };
            self.push(released, key, kind);
        }
    }

    fn push(&mut self, at: Micros, key: usize, kind: EventKind) {
        self.seq += 1;
        let seq = self.seq;
        self.events.push(Reverse(Event { at, seq, key, kind }));
    }

    /// Applies every scheduled event up to and including `t`, in time order.
    fn events_until(&mut self, t: Micros) {
        while let Some(Reverse(event)) = self.events.peek().copied() {
            if event.at > t {
                break;
            }
            self.events.pop();
            self.gauge_fill(event.at);
            self.apply(event);
            self.gauge_record(event.key, event.at);
        }
    }

    fn apply(&mut self, event: Event) {
        let now = self.start.saturating_add(event.at);
        let state = &mut self.states[event.key];
        match event.kind {
            EventKind::Start { cost } => {
                self.running[event.key] += cost;
                if let Some(l) = &mut self.run.leases {
                    l.peak_running = l.peak_running.max(self.running[event.key]);
                }
            }
            EventKind::End {
                cost,
                lease,
                settle,
            } => {
                self.running[event.key] -= cost;
                if let (Some(l), true) = (&mut self.run.leases, lease != 0) {
                    match self.alg.release(state, now, lease, cost) {
                        true => l.released += 1,
                        false => l.expired += 1,
                    }
                }
                if let Some((at, estimate, remaining, real)) = settle {
                    let admitted = Admitted {
                        at,
                        estimate,
                        remaining,
                    };
                    self.alg.settle(state, now, admitted, real);
                    if let Some(s) = &mut self.run.settle {
                        s.refunded += u64::from(real < estimate);
                        s.charged += u64::from(real > estimate);
                    }
                }
            }
        }
    }

    /// Records the busiest key's levels at the opening of every bucket up to the one holding
    /// `t` (µs since the start): nothing changed since the last event, so its state now is
    /// its state then (leases that expired meanwhile no longer count).
    fn gauge_fill(&mut self, t: Micros) {
        let series = &mut self.run.series;
        if series.in_flight.is_empty() && series.held.is_empty() {
            return;
        }
        let last = if t == Micros::MAX {
            series.offered.len()
        } else {
            series.index_of(t) + 1
        };
        let last = last.min(series.offered.len());
        let width = series.bucket;
        while self.filled < last {
            let b = self.filled;
            let opening = b as Micros * width;
            let held = self.held_at(opening);
            let series = &mut self.run.series;
            if let Some(v) = series.in_flight.get_mut(b) {
                *v = (*v).max(self.running[self.focus]);
            }
            if let Some(v) = series.held.get_mut(b) {
                *v = (*v).max(held);
            }
            self.filled += 1;
        }
    }

    /// Records the levels of `key` (if it is the busiest) right after a change at `t`.
    fn gauge_record(&mut self, key: usize, t: Micros) {
        if key != self.focus {
            return;
        }
        let held = self.held_at(t);
        let series = &mut self.run.series;
        let b = series.index_of(t);
        if let Some(v) = series.in_flight.get_mut(b) {
            *v = (*v).max(self.running[key]);
        }
        if let Some(v) = series.held.get_mut(b) {
            *v = (*v).max(held);
        }
    }

    /// Slots the busiest key's leases hold at `t` (µs since the start), by the algorithm's
    /// own reading (a cost-0 evaluation); 0 for the rate algorithms.
    fn held_at(&self, t: Micros) -> u64 {
        if !self.concurrency {
            return 0;
        }
        let d = self
            .alg
            .evaluate(&self.states[self.focus], self.start + t, 0, None);
        d.limit.saturating_sub(d.remaining)
    }
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
