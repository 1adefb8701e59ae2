//! Delay mode (token_bucket, leaky_bucket, gcra): a request over the limit reserves its slot
//! at once and waits for it. Waits never exceed `max_delay`; the release times (arrival +
//! delay) keep the rate (buckets: `burst` at once, then spaced; leaky bucket: a FIFO queue
//! spaced by the emission interval from the first request); a refund gives the slot back.

use proptest::prelude::*;
use sluicegate_core::Decision;
use sluicegate_core::algorithm::{Algorithm, Gcra, LeakyBucket, TokenBucket};
use sluicegate_core::clock::Micros;
use sluicegate_testkit::prop::{Event, T0, run, scale_delay, scenario};

/// `(release time, cost)` of every admitted request, in arrival order.
fn releases(events: &[Event], decisions: &[Decision]) -> Vec<(Micros, u64)> {
    events
        .iter()
        .zip(decisions)
        .filter(|(_, d)| d.allowed)
        .map(|(e, d)| (e.at + d.delay, e.cost))
        .collect()
}

fn assert_waits(decisions: &[Decision], max_delay: Micros) -> Result<(), TestCaseError> {
    for d in decisions {
        prop_assert!(
            d.delay <= max_delay,
            "waits {} > max_delay {}",
            d.delay,
            max_delay
        );
    }
    Ok(())
}

/// Releases are in arrival order and never beat `burst + rate × t`. Waits are rounded up to
/// the µs, so the first release of a pair may be up to 1 µs late: the span gets 1 µs slack.
fn assert_bucket_releases(
    limit: u64,
    period: u64,
    burst: u64,
    rel: &[(Micros, u64)],
) -> Result<(), TestCaseError> {
    for i in 0..rel.len() {
        let mut sum = 0u128;
        for j in i..rel.len() {
            prop_assert!(rel[j].0 >= rel[i].0, "released out of order");
            sum += u128::from(rel[j].1);
            let span = u128::from(rel[j].0 - rel[i].0 + 1);
            prop_assert!(
                sum * u128::from(period) <= u128::from(burst * period) + span * u128::from(limit)
            );
        }
    }
    Ok(())
}

/// Refunding a delayed request at once gives its slot back: the same request gets the same answer.
fn assert_refund<A: Algorithm>(
    alg: &A,
    history: &[Event],
    last: Event,
    max_delay: Micros,
) -> Result<(), TestCaseError> {
    let (_, mut state) = run(alg, history, Some(max_delay));
    let first = alg.evaluate(&state, last.at, last.cost, Some(max_delay));
    if first.allowed {
        alg.consume(&mut state, last.at, last.cost);
        alg.refund(&mut state, last.at, last.cost);
        let again = alg.evaluate(&state, last.at, last.cost, Some(max_delay));
        prop_assert_eq!(first, again);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn token_bucket((limit, period, burst, events) in scenario(true, 60), max_delay in 0u64..6_000) {
        let max_delay = scale_delay(max_delay, period);
        let alg = TokenBucket::new(limit, period, burst);
        let (decisions, _) = run(&alg, &events, Some(max_delay));
        assert_waits(&decisions, max_delay)?;
        assert_bucket_releases(limit, period, burst, &releases(&events, &decisions))?;
        let (last, history) = events.split_last().unwrap();
        assert_refund(&alg, history, *last, max_delay)?;
    }

    #[test]
    fn gcra((limit, period, burst, events) in scenario(true, 60), max_delay in 0u64..6_000) {
        let max_delay = scale_delay(max_delay, period);
        let alg = Gcra::new(limit, period, burst);
        let (decisions, _) = run(&alg, &events, Some(max_delay));
        assert_waits(&decisions, max_delay)?;
        assert_bucket_releases(limit, period, burst, &releases(&events, &decisions))?;
        let (last, history) = events.split_last().unwrap();
        assert_refund(&alg, history, *last, max_delay)?;
    }

    #[test]
    fn leaky_bucket_is_a_fifo_queue((limit, period, burst, events) in scenario(true, 60), max_delay in 0u64..6_000) {
        let max_delay = scale_delay(max_delay, period);
        let alg = LeakyBucket::new(limit, period, burst);
        let (decisions, _) = run(&alg, &events, Some(max_delay));
        assert_waits(&decisions, max_delay)?;
        let rel = releases(&events, &decisions);
        // Each release waits for the one before it to drain: cost × period / limit, to the µs.
        for pair in rel.windows(2) {
            let ((r0, c0), (r1, _)) = (pair[0], pair[1]);
            prop_assert!(r1 >= r0);
            prop_assert!(u128::from(r1 - r0 + 1) * u128::from(limit) >= u128::from(c0 * period),
                "released {} µs apart after cost {}", r1 - r0, c0);
        }
        let (last, history) = events.split_last().unwrap();
        assert_refund(&alg, history, *last, max_delay)?;
    }
}

/// The two shapes, side by side: 4 requests at once, 10 a second, burst 2, max_delay 1 s.
#[test]
fn burst_then_spaced_versus_queue() {
    let (limit, period, burst, max_delay) = (10, 1_000_000, 2, 1_000_000);
    let delays = |alg: &dyn Fn(&[Event]) -> Vec<Decision>| -> Vec<Option<Micros>> {
        let events = [Event { at: T0, cost: 1 }; 4];
        alg(&events)
            .iter()
            .map(|d| d.allowed.then_some(d.delay))
            .collect()
    };
    let token = delays(&|e| run(&TokenBucket::new(limit, period, burst), e, Some(max_delay)).0);
    let gcra = delays(&|e| run(&Gcra::new(limit, period, burst), e, Some(max_delay)).0);
    let leaky = delays(&|e| run(&LeakyBucket::new(limit, period, burst), e, Some(max_delay)).0);
    // Buckets: the burst at once, then one every 100 ms (the bucket may go into debt).
    assert_eq!(token, [Some(0), Some(0), Some(100_000), Some(200_000)]);
    assert_eq!(gcra, token);
    // Queue: one at once, the next 100 ms later; the bucket (size 2) is then full.
    assert_eq!(leaky, [Some(0), Some(100_000), None, None]);
}
