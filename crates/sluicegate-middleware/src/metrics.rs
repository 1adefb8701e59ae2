//! [`MetricsObserver`]: counts decisions through the `metrics` facade, for whatever
//! recorder the application installed (the server's Prometheus exporter).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use metrics::{Counter, Recorder};
use sluicegate_core::{Outcome, VerdictObserver, VerdictOf};

/// The counter's name.
pub const DECISIONS_TOTAL: &str = "sluicegate_decisions_total";

/// Records `sluicegate_decisions_total{policy, outcome}`, one increment per policy of
/// every decided request; `outcome` is `allowed`, `denied`, `delayed`, `shadow_denied` or
/// `store_error`.
///
/// Each (policy, outcome) counter is looked up in the recorder once, the first time it
/// counts, and its handle kept: a decision then costs one increment per policy, not a
/// label lookup (with two allocations) in the recorder's registry. The handles belong to
/// the recorder they were made with; another recorder (installed later, or a local one in
/// a test) gets its own.
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_core::{MemoryStore, VerdictObserver};
/// use sluicegate_middleware::{MetricsObserver, RateLimiter};
///
/// let observer: Arc<dyn VerdictObserver> = Arc::new(MetricsObserver);
/// let builder = RateLimiter::builder(Arc::new(MemoryStore::new(1000))).observer(observer);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsObserver;

impl VerdictObserver for MetricsObserver {
    fn observe(&self, _key: &str, verdict: &VerdictOf<'_>) {
        let recorder = recorder_id();
        let handles = HANDLES.load();
        for d in &verdict.decisions {
            let known = handles
                .as_ref()
                .filter(|h| h.recorder == recorder)
                .and_then(|h| h.by_policy.get(d.policy.name()));
            match known {
                Some(counters) => counters.get(d.policy.name(), d.outcome).increment(1),
                None => resolve(recorder, d.policy.name(), d.outcome).increment(1),
            }
        }
    }
}

/// The counters of one policy, made on first use, one per [`Outcome`].
#[derive(Default, Clone)]
struct PolicyCounters([OnceLock<Counter>; OUTCOMES]);

const OUTCOMES: usize = 5;

impl PolicyCounters {
    fn get(&self, policy: &str, outcome: Outcome) -> &Counter {
        self.0[index(outcome)].get_or_init(|| {
            metrics::counter!(
                DECISIONS_TOTAL,
                "policy" => policy.to_owned(),
                "outcome" => outcome.label(),
            )
        })
    }
}

fn index(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Allowed => 0,
        Outcome::Denied => 1,
        Outcome::Delayed => 2,
        Outcome::ShadowDenied => 3,
        Outcome::StoreError => 4,
    }
}

/// The handles made so far, for one recorder. Replaced whole when a policy is added
/// (rarely: once per policy name), read without a lock on every decision.
struct Handles {
    recorder: usize,
    by_policy: HashMap<Box<str>, PolicyCounters, foldhash::fast::RandomState>,
}

static HANDLES: ArcSwapOption<Handles> = ArcSwapOption::const_empty();

/// Policy names are configuration, but a process may see many across reloads: past this
/// many, further names are counted without keeping their handles.
const MAX_POLICIES: usize = 4096;

/// Which recorder the `metrics` macros would use now (the address of the recorder).
fn recorder_id() -> usize {
    metrics::with_recorder(|r: &dyn Recorder| (r as *const dyn Recorder).cast::<()>() as usize)
}

/// The counter of a policy not seen yet with this recorder: made, and kept for next time.
fn resolve(recorder: usize, policy: &str, outcome: Outcome) -> Counter {
    let counters = PolicyCounters::default();
    let counter = counters.get(policy, outcome).clone();
    HANDLES.rcu(|current| {
        let mut by_policy = match current.as_deref() {
            Some(h) if h.recorder == recorder => h.by_policy.clone(),
            _ => HashMap::default(),
        };
        if by_policy.len() < MAX_POLICIES {
            by_policy
                .entry(policy.into())
                .or_insert_with(|| counters.clone());
        }
        Some(Arc::new(Handles {
            recorder,
            by_policy,
        }))
    });
    counter
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;
    use sluicegate_core::{AlgorithmKind, Decision, Mode, Policy, Verdict};
    use std::time::Duration;

    fn verdict(name: &str, allowed: bool) -> Verdict {
        let policy = Policy::builder(name, AlgorithmKind::TokenBucket, 5, Duration::from_secs(1))
            .mode(Mode::Reject)
            .build()
            .unwrap();
        let decision = if allowed {
            Decision::allow(5, 4, 1)
        } else {
            Decision::deny(5, 0, 1, 1)
        };
        Verdict::combine(vec![(Arc::new(policy), decision, 1)])
    }

    fn lines(text: &str) -> Vec<&str> {
        let mut lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(DECISIONS_TOTAL))
            .collect();
        lines.sort_unstable();
        lines
    }

    #[test]
    fn each_recorder_counts_with_its_own_handles() {
        let first = PrometheusBuilder::new().build_recorder();
        let second = PrometheusBuilder::new().build_recorder();
        metrics::with_local_recorder(&first, || {
            for _ in 0..3 {
                MetricsObserver.observe("k", &verdict("kept", true));
            }
            MetricsObserver.observe("k", &verdict("other", false));
        });
        // Handles made with the first recorder must not count into the second one.
        metrics::with_local_recorder(&second, || {
            MetricsObserver.observe("k", &verdict("kept", false));
        });
        metrics::with_local_recorder(&first, || {
            MetricsObserver.observe("k", &verdict("kept", true));
        });
        assert_eq!(
            lines(&first.handle().render()),
            [
                r#"sluicegate_decisions_total{policy="kept",outcome="allowed"} 4"#,
                r#"sluicegate_decisions_total{policy="other",outcome="denied"} 1"#,
            ]
        );
        assert_eq!(
            lines(&second.handle().render()),
            [r#"sluicegate_decisions_total{policy="kept",outcome="denied"} 1"#]
        );
    }
}
