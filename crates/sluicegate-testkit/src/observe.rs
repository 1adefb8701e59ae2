//! A verdict observer that counts, for tests that check what was decided.

use std::collections::HashMap;
use std::sync::Mutex;

use sluicegate_core::{Outcome, VerdictObserver};

/// Counts `(policy, outcome)` and records the key of every verdict it observes.
#[derive(Default)]
pub struct Counting {
    /// How many decisions each `(policy, outcome)` had.
    pub outcomes: Mutex<HashMap<(String, Outcome), u64>>,
    /// The key of every verdict, in order.
    pub keys: Mutex<Vec<String>>,
}

impl Counting {
    /// How many decisions `policy` had with `outcome`.
    pub fn count(&self, policy: &str, outcome: Outcome) -> u64 {
        let map = self.outcomes.lock().unwrap();
        map.get(&(policy.to_owned(), outcome)).copied().unwrap_or(0)
    }
}

impl VerdictObserver for Counting {
    fn observe(&self, key: &str, verdict: &sluicegate_core::VerdictOf<'_>) {
        self.keys.lock().unwrap().push(key.to_owned());
        let mut map = self.outcomes.lock().unwrap();
        for d in &verdict.decisions {
            *map.entry((d.policy.name().to_owned(), d.outcome))
                .or_default() += 1;
        }
    }
}
