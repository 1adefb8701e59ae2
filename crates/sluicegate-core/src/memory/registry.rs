//! Which policies a store knows: each gets a small index (its table's place in every shard)
//! and an id that is never reused, so that a table left by a dropped policy is never
//! mistaken for the state of a newer one that reuses its index.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::policy::Policy;

/// A policy's place in the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyRef {
    /// Index of its table in every shard.
    pub(crate) index: usize,
    /// Unique over the store's life.
    pub(crate) id: u64,
}

#[derive(Debug, Default)]
struct Inner {
    by_policy: HashMap<Policy, PolicyRef>,
    free: Vec<usize>,
    next_index: usize,
    next_id: u64,
}

/// The policies of a store. A policy is identified by its whole definition: a policy whose
/// numbers change is a new policy with fresh state; an unchanged one keeps its state.
#[derive(Debug, Default)]
pub(crate) struct Registry(RwLock<Inner>);

impl Registry {
    /// The place of `policy`, registering it on first use.
    pub(crate) fn get_or_add(&self, policy: &Policy) -> PolicyRef {
        if let Some(r) = self.0.read().by_policy.get(policy) {
            return *r;
        }
        let mut inner = self.0.write();
        if let Some(r) = inner.by_policy.get(policy) {
            return *r;
        }
        let index = match inner.free.pop() {
            Some(index) => index,
            None => {
                inner.next_index += 1;
                inner.next_index - 1
            }
        };
        inner.next_id += 1;
        let r = PolicyRef {
            index,
            id: inner.next_id,
        };
        inner.by_policy.insert(policy.clone(), r);
        r
    }

    /// The place of `policy` if it is registered.
    pub(crate) fn get(&self, policy: &Policy) -> Option<PolicyRef> {
        self.0.read().by_policy.get(policy).copied()
    }

    /// Unregisters every policy not in `keep`; returns their places, whose tables the caller
    /// drops before calling [`Registry::release`].
    pub(crate) fn retain(&self, keep: &[Arc<Policy>]) -> Vec<PolicyRef> {
        let mut inner = self.0.write();
        let mut dropped = Vec::new();
        inner.by_policy.retain(|policy, r| {
            let kept = keep.iter().any(|k| **k == *policy);
            if !kept {
                dropped.push(*r);
            }
            kept
        });
        dropped
    }

    /// Makes the indices of dropped policies available again.
    pub(crate) fn release(&self, dropped: &[PolicyRef]) {
        self.0.write().free.extend(dropped.iter().map(|r| r.index));
    }
}
