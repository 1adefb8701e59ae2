//! The numbers of every decision, for every algorithm, after a random history:
//! - `retry_after` is exact: the same request at `now + retry_after` is admitted, and at
//!   `now + retry_after − 1 µs` it is not (nothing else arriving);
//! - `remaining` cost-1 requests at the same instant are admitted, and the next is not;
//! - at `now + reset_after` the key is back to full, and 1 µs earlier it is not; after an
//!   admitted request that is exactly the state's `idle_at`;
//! - cost 0 is admitted, without delay, and changes no state.

use proptest::prelude::*;
use sluicegate_core::Decision;
use sluicegate_core::algorithm::{
    Algorithm, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket,
};
use sluicegate_core::clock::Micros;
use sluicegate_testkit::prop::{Event, run, scale_delay, scenario};

/// What the last request of a scenario checks, for one algorithm.
struct Case<'a, A: Algorithm> {
    alg: &'a A,
    capacity: u64,
    max_delay: Option<Micros>,
    /// Whether `remaining` counts exactly (all do; kept to say so per algorithm).
    exact_remaining: bool,
}

impl<A: Algorithm> Case<'_, A>
where
    A::State: PartialEq + std::fmt::Debug,
{
    fn decide(&self, state: &A::State, at: Micros, cost: u64) -> Decision {
        self.alg.evaluate(state, at, cost, self.max_delay)
    }

    fn check(&self, history: &[Event], last: Event) -> Result<(), TestCaseError> {
        let (_, mut state) = run(self.alg, history, self.max_delay);
        let before = state.clone();

        // Cost 0: a read.
        let read = self.decide(&state, last.at, 0);
        prop_assert!(read.allowed && read.delay == 0 && read.retry_after.is_none());
        self.alg.consume(&mut state, last.at, 0);
        prop_assert_eq!(&state, &before);

        let d = self.decide(&state, last.at, last.cost);
        prop_assert_eq!(d.allowed, d.retry_after.is_none());
        if let Some(retry) = d.retry_after {
            prop_assert!(retry >= 1);
            let at = self.decide(&state, last.at + retry, last.cost);
            prop_assert!(at.allowed, "denied at now + retry_after ({retry}): {at:?}");
            let before = self.decide(&state, last.at + retry - 1, last.cost);
            prop_assert!(
                !before.allowed,
                "admitted at now + retry_after - 1 ({retry})"
            );
            prop_assert_eq!(d.remaining, read.remaining);
            prop_assert_eq!(d.reset_after, read.reset_after);
        } else {
            self.alg.consume(&mut state, last.at, last.cost);
            if let Some(budget) = self.max_delay {
                prop_assert!(d.delay <= budget);
            }
        }

        // `remaining` requests of cost 1 now, then a denial (reject mode only).
        if self.max_delay.is_none() && self.exact_remaining {
            let mut probe = state.clone();
            for i in 0..d.remaining {
                let next = self.decide(&probe, last.at, 1);
                prop_assert!(
                    next.allowed,
                    "request {} of {} remaining denied",
                    i + 1,
                    d.remaining
                );
                self.alg.consume(&mut probe, last.at, 1);
            }
            prop_assert!(
                !self.decide(&probe, last.at, 1).allowed,
                "more than {} remaining",
                d.remaining
            );
        }

        // Back to full at now + reset_after, not before; the state may then be dropped.
        let full = self.decide(&state, last.at + d.reset_after, 0);
        prop_assert_eq!(
            full.remaining,
            self.capacity,
            "not full at now + reset_after"
        );
        if d.allowed {
            // The stores rely on this to keep their expiry bound without recomputing it.
            prop_assert_eq!(self.alg.idle_at(&state), last.at + d.reset_after);
        } else {
            prop_assert!(self.alg.idle_at(&state) <= last.at + d.reset_after);
        }
        if d.reset_after > 0 {
            let almost = self.decide(&state, last.at + d.reset_after - 1, 0);
            prop_assert!(
                almost.remaining < self.capacity,
                "full before now + reset_after"
            );
        }
        Ok(())
    }
}

fn split(events: &[Event]) -> (&[Event], Event) {
    let (last, history) = events.split_last().unwrap();
    (history, *last)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fixed_window((limit, period, _, events) in scenario(false, 40)) {
        let (history, last) = split(&events);
        let alg = FixedWindow::new(limit, period);
        Case { alg: &alg, capacity: limit, max_delay: None, exact_remaining: true }.check(history, last)?;
    }

    #[test]
    fn sliding_log((limit, period, _, events) in scenario(false, 40)) {
        let (history, last) = split(&events);
        let alg = SlidingLog::new(limit, period);
        Case { alg: &alg, capacity: limit, max_delay: None, exact_remaining: true }.check(history, last)?;
    }

    #[test]
    fn sliding_window((limit, period, _, events) in scenario(false, 40)) {
        let (history, last) = split(&events);
        let alg = SlidingWindow::new(limit, period);
        Case { alg: &alg, capacity: limit, max_delay: None, exact_remaining: true }.check(history, last)?;
    }

    #[test]
    fn token_bucket((limit, period, burst, events) in scenario(true, 40), delay in prop::option::of(0u64..5_000)) {
        let delay = delay.map(|d| scale_delay(d, period));
        let (history, last) = split(&events);
        let alg = TokenBucket::new(limit, period, burst);
        Case { alg: &alg, capacity: burst, max_delay: delay, exact_remaining: true }.check(history, last)?;
    }

    #[test]
    fn leaky_bucket((limit, period, burst, events) in scenario(true, 40), delay in prop::option::of(0u64..5_000)) {
        let delay = delay.map(|d| scale_delay(d, period));
        let (history, last) = split(&events);
        let alg = LeakyBucket::new(limit, period, burst);
        Case { alg: &alg, capacity: burst, max_delay: delay, exact_remaining: true }.check(history, last)?;
    }

    #[test]
    fn gcra((limit, period, burst, events) in scenario(true, 40), delay in prop::option::of(0u64..5_000)) {
        let delay = delay.map(|d| scale_delay(d, period));
        let (history, last) = split(&events);
        let alg = Gcra::new(limit, period, burst);
        Case { alg: &alg, capacity: burst, max_delay: delay, exact_remaining: true }.check(history, last)?;
    }
}
