//! Reserve then settle: settling a reservation never leaves a policy more permissive than
//! charging the real cost at admission would have. Two worlds see the same history; one
//! charges the estimate and settles later, the other charges the real cost upfront; after
//! the settle, every request the first admits the second admits too, with at least as many
//! remaining. Every rate algorithm, reject mode.

use std::time::Duration;

use proptest::prelude::*;
use sluicegate_core::algorithm::{Admitted, Algorithm};
use sluicegate_core::clock::Micros;
use sluicegate_core::{AlgorithmKind, Policy};

const T0: Micros = 1_700_000_000_000_000;

#[derive(Debug, Clone)]
struct Case {
    kind: AlgorithmKind,
    limit: u64,
    period: Micros,
    burst: u64,
    before: Vec<(Micros, u64)>,
    estimate: u64,
    real: u64,
    between: Vec<(Micros, u64)>,
    settle_after: Micros,
    probes: Vec<Micros>,
}

fn kinds() -> impl Strategy<Value = AlgorithmKind> {
    prop::sample::select(vec![
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::Gcra,
    ])
}

fn cases() -> impl Strategy<Value = Case> {
    (kinds(), 1u64..12, 1u64..5_000, 0u64..6)
        .prop_flat_map(|(kind, limit, period_ms, extra_burst)| {
            let period = period_ms * 1_000;
            let burst = limit + extra_burst;
            let cap = if matches!(
                kind,
                AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra
            ) {
                burst
            } else {
                limit
            };
            let event = (0..period, 0..=cap);
            (
                Just((kind, limit, period, burst)),
                prop::collection::vec(event.clone(), 0..8),
                1..=cap,
                0..=cap,
                prop::collection::vec(event, 0..8),
                0..2 * period,
                prop::collection::vec(0..3 * period, 1..6),
            )
        })
        .prop_map(
            |(
                (kind, limit, period, burst),
                before,
                estimate,
                real,
                between,
                settle_after,
                probes,
            )| {
                Case {
                    kind,
                    limit,
                    period,
                    burst,
                    before,
                    estimate,
                    real,
                    between,
                    settle_after,
                    probes,
                }
            },
        )
}

fn take<A: Algorithm>(alg: &A, state: &mut A::State, now: Micros, cost: u64) -> bool {
    let ok = alg.evaluate(state, now, cost, None).allowed;
    if ok {
        alg.consume(state, now, cost);
    }
    ok
}

fn check<A: Algorithm>(alg: A, case: &Case) -> Result<(), TestCaseError> {
    let (mut settled, mut upfront) = (A::State::default(), A::State::default());
    let mut now = T0;
    for &(dt, cost) in &case.before {
        now += dt;
        if take(&alg, &mut settled, now, cost) {
            alg.consume(&mut upfront, now, cost);
        }
    }
    // Both worlds must admit their charge at admission (else there is nothing to compare).
    let decision = alg.evaluate(&settled, now, case.estimate, None);
    if !decision.allowed || !alg.evaluate(&upfront, now, case.real, None).allowed {
        return Ok(());
    }
    let admitted = Admitted {
        at: now,
        estimate: case.estimate,
        remaining: decision.remaining,
    };
    alg.consume(&mut settled, now, case.estimate);
    alg.consume(&mut upfront, now, case.real);
    for &(dt, cost) in &case.between {
        now += dt;
        if take(&alg, &mut settled, now, cost) {
            alg.consume(&mut upfront, now, cost);
        }
    }
    now += case.settle_after;
    alg.settle(&mut settled, now, admitted, case.real);
    let cap = case.burst.max(case.limit);
    for &dt in &case.probes {
        let at = now + dt;
        for cost in 0..=cap {
            let s = alg.evaluate(&settled, at, cost, None);
            let u = alg.evaluate(&upfront, at, cost, None);
            prop_assert!(
                !s.allowed || u.allowed,
                "settled admits cost {cost} at +{}µs where upfront denies: {s:?} vs {u:?}",
                at - now
            );
            // `remaining` of a read (cost 0) is what the key has left.
            prop_assert!(
                cost > 0 || s.remaining <= u.remaining,
                "settled has more remaining at +{}µs: {s:?} vs {u:?}",
                at - now
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn settle_is_never_more_permissive_than_charging_upfront(case in cases()) {
        let policy = Policy::builder("p", case.kind, case.limit, Duration::from_micros(case.period))
            .burst(case.burst)
            .build()
            .unwrap();
        sluicegate_core::with_algorithm!(&policy, |alg| check(alg, &case))?;
    }
}

/// A settle gives back exactly the difference where nothing else happened, and charges the
/// excess, in every rate algorithm: after it, the state equals the one charged upfront.
#[test]
fn settle_equals_upfront_when_nothing_else_happened() {
    for kind in [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::Gcra,
    ] {
        let policy = Policy::builder("p", kind, 10, Duration::from_secs(100))
            .build()
            .unwrap();
        for (estimate, real) in [(8, 3), (3, 8), (5, 5), (10, 0)] {
            let remaining = sluicegate_core::with_algorithm!(&policy, |alg| {
                let (mut s, mut u) = Default::default();
                let remaining = alg.evaluate(&s, T0, estimate, None).remaining;
                alg.consume(&mut s, T0, estimate);
                alg.consume(&mut u, T0, real);
                let admitted = Admitted {
                    at: T0,
                    estimate,
                    remaining,
                };
                alg.settle(&mut s, T0 + 1, admitted, real);
                (
                    alg.evaluate(&s, T0 + 1, 0, None).remaining,
                    alg.evaluate(&u, T0 + 1, 0, None).remaining,
                )
            });
            assert_eq!(remaining.0, remaining.1, "{kind:?} {estimate}->{real}");
        }
    }
}
