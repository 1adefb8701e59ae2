//! Shared helpers of the property tests: arrival sequences with times as plain µs, and a
//! runner that applies the two-phase protocol the stores use.

pub mod ratio;

use proptest::prelude::*;
use sluicegate_core::Decision;
use sluicegate_core::algorithm::Algorithm;
use sluicegate_core::clock::Micros;

/// A realistic epoch time (late 2023), so window alignment is exercised on large numbers.
pub const T0: Micros = 1_700_000_000_000_000;

/// One arrival.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    /// When it arrives (µs).
    pub at: Micros,
    /// What it costs.
    pub cost: u64,
}

/// A week in µs: the longest period the property tests try.
pub const WEEK: Micros = 7 * 86_400 * 1_000_000;

/// `(limit, period µs, burst)`: mostly small numbers, so that windows, refills and rounding
/// all matter; one case in four large (limits and bursts up to 10^6, periods from a
/// millisecond to a week), where products of limit, burst and period reach 10^18 and any
/// overflow or precision loss in the fixed-point arithmetic would show.
pub fn quota() -> impl Strategy<Value = (u64, u64, u64)> {
    prop_oneof![
        3 => (1u64..=12, 1u64..=3_000, 1u64..=12),
        1 => (1u64..=1_000_000, 1_000u64..=WEEK, 1u64..=1_000_000),
    ]
}

/// A generated wait (drawn up to ~6 000 µs, about two of the small periods) scaled so that
/// it stays a comparable share of a large period: `max(delay, delay × period / 3 000)`.
pub fn scale_delay(delay: Micros, period: Micros) -> Micros {
    let scaled = u128::from(delay) * u128::from(period) / 3_000;
    delay.max(u64::try_from(scaled).unwrap_or(u64::MAX))
}

/// Arrivals starting somewhere in a period after `T0`, with gaps from none (same instant)
/// to two periods, costs mostly 1 and sometimes up to `capacity`.
pub fn arrivals(period: u64, capacity: u64, max_len: usize) -> impl Strategy<Value = Vec<Event>> {
    let gap = prop_oneof![
        2 => Just(0u64),
        3 => 0..=period / 8 + 1,
        2 => 0..=period * 2,
    ];
    let cost = prop_oneof![4 => Just(1u64), 1 => 1..=capacity];
    (0..period, prop::collection::vec((gap, cost), 1..max_len)).prop_map(|(offset, steps)| {
        let mut at = T0 + offset;
        steps
            .into_iter()
            .map(|(gap, cost)| {
                at += gap;
                Event { at, cost }
            })
            .collect()
    })
}

/// Decides each event in order, consuming when admitted (what a store does for one policy).
pub fn run<A: Algorithm>(
    alg: &A,
    events: &[Event],
    max_delay: Option<Micros>,
) -> (Vec<Decision>, A::State) {
    let mut state = A::State::default();
    let decisions = events
        .iter()
        .map(|e| {
            let d = alg.evaluate(&state, e.at, e.cost, max_delay);
            if d.allowed {
                alg.consume(&mut state, e.at, e.cost);
            }
            d
        })
        .collect();
    (decisions, state)
}

/// The admitted events of a run.
pub fn admitted(events: &[Event], decisions: &[Decision]) -> Vec<Event> {
    events
        .iter()
        .zip(decisions)
        .filter(|(_, d)| d.allowed)
        .map(|(e, _)| *e)
        .collect()
}

/// A random policy and arrivals for it: `(limit, period, burst, events)`. Costs go up to
/// `burst` when `buckets`, else up to `limit` (each algorithm's capacity).
pub fn scenario(
    buckets: bool,
    max_len: usize,
) -> impl Strategy<Value = (u64, u64, u64, Vec<Event>)> {
    quota().prop_flat_map(move |(limit, period, burst)| {
        let capacity = if buckets { burst } else { limit };
        (
            Just(limit),
            Just(period),
            Just(burst),
            arrivals(period, capacity, max_len),
        )
    })
}
