//! The sliding log is exact: never more than `limit` in any interval of one period, and it
//! admits whenever the admitted cost of the last period leaves room.

use proptest::prelude::*;
use sluicegate_core::algorithm::SlidingLog;
use sluicegate_testkit::prop::{Event, run, scenario};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn never_more_than_limit_in_any_period((limit, period, _, events) in scenario(false, 80)) {
        let alg = SlidingLog::new(limit, period);
        let (decisions, _) = run(&alg, &events, None);
        let mut log: Vec<Event> = Vec::new();
        for (e, d) in events.iter().zip(&decisions) {
            // Reference: the admitted cost in (at - period, at], computed from scratch.
            let used: u64 = log.iter().filter(|x| x.at + period > e.at).map(|x| x.cost).sum();
            prop_assert_eq!(d.allowed, used + e.cost <= limit, "at {} cost {}", e.at, e.cost);
            if d.allowed {
                log.push(*e);
                // The interval of one period ending at this admitted request: the worst ones.
                prop_assert!(used + e.cost <= limit);
            }
        }
    }
}
