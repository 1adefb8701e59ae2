//! The limiting algorithms (six rate algorithms and concurrency) as pure state transitions.
//!
//! Each module holds one algorithm: its per-key state and an [`Algorithm`] implementation.
//! Nothing here does I/O or reads a clock: `now` is an argument, so the same code runs in
//! the in-memory store, the simulator and the tests, and the Redis store's Lua scripts are
//! checked against it.
//!
//! The protocol is two-phase so that several policies can be admitted all-or-nothing:
//! [`Algorithm::evaluate`] decides without changing anything; only if every policy of the
//! request admits does the store call [`Algorithm::consume`] on each.

pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

use crate::clock::Micros;
use crate::decision::Decision;
use crate::policy::Policy;

pub use concurrency::Concurrency;
pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use leaky_bucket::LeakyBucket;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;
pub use token_bucket::TokenBucket;

/// One limiting algorithm, parameterised by a policy's numbers.
///
/// ```
/// use sluicegate_core::algorithm::{Algorithm, Gcra};
/// let gcra = Gcra::new(2, 1_000_000, 2); // 2 per second, burst 2
/// let mut state = Default::default();
/// for expected in [true, true, false] {
///     let decision = gcra.evaluate(&state, 10_000_000, 1, None);
///     assert_eq!(decision.allowed, expected);
///     if decision.allowed {
///         gcra.consume(&mut state, 10_000_000, 1);
///     }
/// }
/// ```
pub trait Algorithm: Send + Sync + 'static {
    /// Per-key state. `Default` is a key never seen (full capacity).
    type State: Default + Clone + Send + 'static;

    /// Decides a request of `cost` at `now` without changing `state`.
    ///
    /// `max_delay` is `Some(budget)` in delay mode: a request over the limit whose turn
    /// comes within `budget` is admitted with [`Decision::delay`] set. `cost` 0 only reads:
    /// it is always admitted, without delay, and reports `remaining` and `reset_after`.
    /// The caller guarantees `cost <= capacity` (see [`Policy::capacity`]).
    fn evaluate(
        &self,
        state: &Self::State,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Decision;

    /// Records an admitted request: must follow an `evaluate` at the same `now` that allowed it.
    /// `cost` 0 changes nothing.
    fn consume(&self, state: &mut Self::State, now: Micros, cost: u64);

    /// Gives back what an admitted request took, when it was cancelled before its turn came.
    /// Never leaves the state fuller than a fresh key.
    fn refund(&self, state: &mut Self::State, now: Micros, cost: u64);

    /// Sets the real cost `real` of a request admitted at `admitted_at` (the store's time)
    /// that took `estimate` (reserve then settle): gives the difference back, or charges
    /// the excess. The rules, the same in every store (the Lua scripts mirror them):
    /// - buckets and GCRA give back as a refund and charge into debt;
    /// - windows change the count of the window the request was admitted in, only while it
    ///   is still the current one (the sliding log: its logged entry, while it is live);
    /// - a charge never takes a key past twice its capacity (`burst`, or `limit` for
    ///   windows): the debt a settle can leave is at most one full capacity, which keeps
    ///   every number in the stores' exact range;
    /// - concurrency has nothing to settle (its lease is released instead).
    ///
    /// Settling never leaves a state more permissive than charging `real` at admission
    /// would have (proven by the `prop_settle` tests). For the buckets and GCRA that bounds
    /// a refund: had the real cost been charged, the bucket could have refilled to full
    /// meanwhile and wasted refill that a refund now would hand out again. So a bucket gives
    /// back at most what it was short of full right after admission (known from `remaining`,
    /// the decision's whole requests left, and from `estimate`) less the refill since: a
    /// key near its limit gets its difference back, a key far from it (that would not have
    /// been limited anyway) gets back what it could not have used.
    fn settle(&self, state: &mut Self::State, now: Micros, admitted: Admitted, real: u64);

    /// The time from which `state` is indistinguishable from a fresh key, and may be dropped.
    fn idle_at(&self, state: &Self::State) -> Micros;

    /// `state`, kept under `from`'s numbers, re-expressed under this algorithm's numbers at
    /// `now`, keeping what the key has used: a limit changed by a reload or a per-key
    /// override (100 a day raised to 1000 after 90 used leaves 910). Windows keep their
    /// counts, the buckets and GCRA the used amount (capacity − remaining, fractions
    /// rounded against the client), the leaky bucket its level, the sliding log and
    /// concurrency their entries. The Redis scripts do the same (`rescale` in each `.lua`).
    fn rescale(&self, from: &Self, state: &Self::State, now: Micros) -> Self::State;

    /// Bytes `state` holds on the heap beyond its own size (the sliding log's entries, the
    /// concurrency leases): what the memory store's `max_memory` counts besides its cells.
    fn heap_bytes(state: &Self::State) -> usize {
        let _ = state;
        0
    }

    /// Frees the lease that expires at `expires_at` and holds `cost`, if the key still holds
    /// it; returns whether it did. Only [`Concurrency`] has leases (an admitted decision
    /// names its lease in [`Decision::lease`]); the rate algorithms have nothing to free.
    fn release(&self, state: &mut Self::State, now: Micros, expires_at: Micros, cost: u64) -> bool {
        let _ = (state, now, expires_at, cost);
        false
    }
}

/// What a reservation knows of its admission, for [`Algorithm::settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// When it was admitted (the store's clock).
    pub at: Micros,
    /// The cost taken.
    pub estimate: u64,
    /// The decision's `remaining` right after.
    pub remaining: u64,
}

impl Admitted {
    /// A lower bound of how far below full (scaled units, `unit` a request) a bucket was
    /// right after this admission, less `refilled` units since: at least the estimate, and
    /// more than `capacity - (remaining + 1) × unit`. Homogeneous in the scale, so the
    /// scripts' reduced units (limit and period divided by their gcd) give the same answer.
    pub fn shortfall_left(&self, capacity: i128, unit: i128, refilled: i128) -> i128 {
        let estimate = i128::from(self.estimate) * unit;
        let short = capacity - (i128::from(self.remaining) + 1) * unit;
        estimate.max(short) - refilled
    }
}

/// Greatest common divisor (0 and 0 give 0).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `scaled × to_period / from_period` for the buckets' fixed point (units of 1/period),
/// rounded up to whole units of the new period reduced by gcd(limit, period): the unit the
/// Redis scripts count in, so that both stores carry a state over to the same number.
pub(crate) fn carry_scaled(
    scaled: u128,
    from_period: Micros,
    to_limit: u64,
    to_period: Micros,
) -> u128 {
    let g = u128::from(gcd(to_limit, to_period).max(1));
    let reduced = u128::from(to_period) / g;
    crate::decision::div_ceil(scaled * reduced, from_period) * g
}

/// Parameters shared by every algorithm, taken from a [`Policy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// Requests per period.
    pub limit: u64,
    /// Period in microseconds.
    pub period: Micros,
    /// Bucket capacity.
    pub burst: u64,
    /// Calendar windows (fixed_window only).
    pub calendar: Option<crate::calendar::Calendar>,
}

impl From<&Policy> for Quota {
    fn from(policy: &Policy) -> Self {
        Quota {
            limit: policy.limit(),
            period: policy.period(),
            burst: policy.burst(),
            calendar: policy.calendar().cloned(),
        }
    }
}

/// Runs `f` with the concrete algorithm of `policy`: the one place that maps
/// [`AlgorithmKind`](crate::AlgorithmKind) to a type, for callers that are generic over [`Algorithm`].
#[macro_export]
macro_rules! with_algorithm {
    ($policy:expr, |$alg:ident| $body:expr) => {{
        let quota = $crate::algorithm::Quota::from($policy);
        match $policy.algorithm() {
            $crate::AlgorithmKind::FixedWindow => {
                let $alg = $crate::algorithm::FixedWindow::from(quota);
                $body
            }
            $crate::AlgorithmKind::SlidingLog => {
                let $alg = $crate::algorithm::SlidingLog::from(quota);
                $body
            }
            $crate::AlgorithmKind::SlidingWindow => {
                let $alg = $crate::algorithm::SlidingWindow::from(quota);
                $body
            }
            $crate::AlgorithmKind::TokenBucket => {
                let $alg = $crate::algorithm::TokenBucket::from(quota);
                $body
            }
            $crate::AlgorithmKind::LeakyBucket => {
                let $alg = $crate::algorithm::LeakyBucket::from(quota);
                $body
            }
            $crate::AlgorithmKind::Gcra => {
                let $alg = $crate::algorithm::Gcra::from(quota);
                $body
            }
            $crate::AlgorithmKind::Concurrency => {
                let $alg = $crate::algorithm::Concurrency::from(quota);
                $body
            }
        }
    }};
}
