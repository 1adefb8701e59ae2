//! Token bucket and GCRA in reject mode: never more than `burst + rate × t` in any interval
//! of length `t`, and never a denial that an exact reference bucket (rational arithmetic,
//! written independently here) would admit.
//!
//! GCRA's emission interval is `period / limit` rounded up to the µs: where that is a whole
//! number it is the exact bucket; otherwise its rate is a little lower, so it is never more
//! permissive than the exact bucket given the same history (see docs/algorithms.md).

use proptest::prelude::*;
use sluicegate_core::Decision;
use sluicegate_core::algorithm::{Gcra, TokenBucket};
use sluicegate_core::clock::Micros;
use sluicegate_testkit::prop::ratio::Ratio;
use sluicegate_testkit::prop::{Event, admitted, run, scenario};

/// The exact token bucket: `tokens` is a rational, refilled at `limit / period` a µs.
struct Reference {
    rate: Ratio,
    burst: Ratio,
    tokens: Ratio,
    last: Option<Micros>,
}

impl Reference {
    fn new(limit: u64, period: u64, burst: u64) -> Self {
        Reference {
            rate: Ratio::new(limit.into(), period.into()),
            burst: Ratio::int(burst.into()),
            tokens: Ratio::int(burst.into()),
            last: None,
        }
    }
    fn tokens_at(&self, at: Micros) -> Ratio {
        match self.last {
            None => self.burst,
            Some(last) => {
                let refill = self.rate.mul_int(i128::from(at.saturating_sub(last)));
                (self.tokens + refill).min(self.burst)
            }
        }
    }
    fn admits(&self, e: &Event) -> bool {
        self.tokens_at(e.at) >= Ratio::int(e.cost.into())
    }
    fn take(&mut self, e: &Event) {
        self.tokens = self.tokens_at(e.at) - Ratio::int(e.cost.into());
        self.last = Some(e.at);
    }
}

/// `burst + rate × (t_j − t_i)` bounds the admitted cost between any two admitted requests.
fn assert_rate_bound(
    limit: u64,
    period: u64,
    burst: u64,
    admitted: &[Event],
) -> Result<(), TestCaseError> {
    for i in 0..admitted.len() {
        let mut sum = 0u128;
        for j in i..admitted.len() {
            sum += u128::from(admitted[j].cost);
            let span = u128::from(admitted[j].at - admitted[i].at);
            prop_assert!(
                sum * u128::from(period)
                    <= u128::from(burst) * u128::from(period) + span * u128::from(limit),
                "{} admitted within {} µs",
                sum,
                span
            );
        }
    }
    Ok(())
}

fn allowed(decisions: &[Decision]) -> Vec<bool> {
    decisions.iter().map(|d| d.allowed).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn token_bucket_is_the_exact_bucket((limit, period, burst, events) in scenario(true, 60)) {
        let (decisions, _) = run(&TokenBucket::new(limit, period, burst), &events, None);
        assert_rate_bound(limit, period, burst, &admitted(&events, &decisions))?;
        let mut reference = Reference::new(limit, period, burst);
        for (e, d) in events.iter().zip(&decisions) {
            prop_assert_eq!(d.allowed, reference.admits(e), "at {} cost {}", e.at, e.cost);
            if d.allowed {
                reference.take(e);
            }
        }
    }

    #[test]
    fn gcra_respects_the_rate_and_is_never_more_permissive(
        (limit, period, burst, events) in scenario(true, 60)
    ) {
        let (decisions, _) = run(&Gcra::new(limit, period, burst), &events, None);
        assert_rate_bound(limit, period, burst, &admitted(&events, &decisions))?;
        // Fed GCRA's own history, the exact bucket admits everything GCRA admitted.
        let mut reference = Reference::new(limit, period, burst);
        for (e, d) in events.iter().zip(&decisions) {
            if d.allowed {
                prop_assert!(reference.admits(e), "GCRA admitted at {} what the exact bucket denies", e.at);
                reference.take(e);
            }
        }
    }

    #[test]
    fn gcra_with_whole_emission_interval_is_the_exact_bucket(
        (limit, interval, burst, seed_events) in scenario(true, 60)
    ) {
        // Re-scale the period so that period / limit = interval µs exactly.
        let period = limit * interval;
        let events = seed_events;
        let (decisions, _) = run(&Gcra::new(limit, period, burst), &events, None);
        let mut reference = Reference::new(limit, period, burst);
        let mut expected = Vec::new();
        for e in &events {
            let admits = reference.admits(e);
            if admits {
                reference.take(e);
            }
            expected.push(admits);
        }
        prop_assert_eq!(allowed(&decisions), expected);
    }

    #[test]
    fn burst_is_exact_at_one_instant((limit, period, burst) in sluicegate_testkit::prop::quota()) {
        for at_once in [
            run(&Gcra::new(limit, period, burst), &[Event { at: sluicegate_testkit::prop::T0, cost: 1 }; 40], None).0,
            run(&TokenBucket::new(limit, period, burst), &[Event { at: sluicegate_testkit::prop::T0, cost: 1 }; 40], None).0,
        ] {
            let admitted = at_once.iter().filter(|d| d.allowed).count() as u64;
            prop_assert_eq!(admitted, burst.min(40));
        }
    }
}
