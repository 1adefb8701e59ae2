//! Combining the decisions of several policies into one [`Verdict`], with the
//! all-or-nothing rule every store follows:
//!
//! - the request goes ahead iff every *enforcing* policy (reject or delay mode) admits it;
//! - if it goes ahead, every enforcing policy consumes, and so does every shadow policy that
//!   would have admitted it (a shadow policy that would deny consumes nothing, exactly as if
//!   it were enforcing, so its reports describe what enforcement would do);
//! - if it does not, nothing is consumed anywhere.

use std::sync::Arc;

use crate::clock::Micros;
use crate::decision::Decision;
use crate::policy::Policy;
use crate::store::StoreError;

/// How one policy judged a request, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Admitted at once.
    Allowed,
    /// Rejected.
    Denied,
    /// Admitted after a wait (delay mode).
    Delayed,
    /// Admitted only because the policy is in shadow mode.
    ShadowDenied,
    /// The store failed; `on_store_error` decided.
    StoreError,
}

impl Outcome {
    /// How `decision` by `policy` is counted: the one place the outcome of a decided
    /// policy is named (stores, the simulator and the Envoy service all call it).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluicegate_core::{AlgorithmKind, Decision, Mode, Outcome, Policy};
    /// let shadow = Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(1))
    ///     .mode(Mode::Shadow).build().unwrap();
    /// assert_eq!(Outcome::of(&shadow, &Decision::deny(1, 0, 1, 1)), Outcome::ShadowDenied);
    /// assert_eq!(Outcome::of(&shadow, &Decision::allow(1, 0, 1)), Outcome::Allowed);
    /// ```
    pub fn of(policy: &Policy, decision: &Decision) -> Outcome {
        match (decision.allowed, policy.is_enforcing()) {
            (true, _) if decision.delay > 0 => Outcome::Delayed,
            (true, _) => Outcome::Allowed,
            (false, true) => Outcome::Denied,
            (false, false) => Outcome::ShadowDenied,
        }
    }

    /// The metric label: `allowed`, `denied`, `delayed`, `shadow_denied`, `store_error`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Delayed => "delayed",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::StoreError => "store_error",
        }
    }
}

/// One policy's part of a [`Verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDecision {
    /// The policy.
    pub policy: Arc<Policy>,
    /// What its algorithm decided (for a shadow policy: what it would have decided).
    pub decision: Decision,
    /// How it is counted.
    pub outcome: Outcome,
}

/// The answer for one request under one or more policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request goes ahead (after `delay`).
    pub allowed: bool,
    /// How long the request must wait for its reserved turn (delay mode), µs.
    pub delay: Micros,
    /// One entry per policy, in request order.
    pub decisions: Decisions,
    /// When the store decided, by the store's clock (µs since the epoch; the Redis
    /// server's `TIME` on Redis). 0 when no store decided (a store failure). A reservation
    /// records it, so a later settle finds the window the request was admitted in.
    pub at: Micros,
}

/// The decisions of a [`Verdict`], one per policy in request order: a list (it derefs to
/// a slice) that keeps one decision inline, so that the common request, under one policy,
/// is decided without an allocation, and more on the heap.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::verdict::Decisions;
/// use sluicegate_core::{AlgorithmKind, Decision, Outcome, Policy, PolicyDecision};
/// let p = Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(1)).build().unwrap());
/// let d = PolicyDecision { policy: p, decision: Decision::allow(1, 0, 1), outcome: Outcome::Allowed };
/// let one: Decisions = std::iter::once(d.clone()).collect();
/// assert_eq!(one, Decisions::from(vec![d.clone()]));
/// assert_eq!((one.len(), one[0].outcome), (1, Outcome::Allowed));
/// assert!(Decisions::default().is_empty());
/// ```
#[derive(Clone)]
pub struct Decisions(Held);

#[derive(Clone)]
enum Held {
    One(PolicyDecision),
    Many(Vec<PolicyDecision>),
}

impl Decisions {
    /// A list of one decision (no allocation).
    pub fn one(decision: PolicyDecision) -> Self {
        Decisions(Held::One(decision))
    }

    /// The decisions as a `Vec`.
    pub fn into_vec(self) -> Vec<PolicyDecision> {
        match self.0 {
            Held::One(d) => vec![d],
            Held::Many(v) => v,
        }
    }
}

impl Default for Decisions {
    fn default() -> Self {
        Decisions(Held::Many(Vec::new()))
    }
}

impl std::ops::Deref for Decisions {
    type Target = [PolicyDecision];
    fn deref(&self) -> &[PolicyDecision] {
        match &self.0 {
            Held::One(d) => std::slice::from_ref(d),
            Held::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for Decisions {
    fn deref_mut(&mut self) -> &mut [PolicyDecision] {
        match &mut self.0 {
            Held::One(d) => std::slice::from_mut(d),
            Held::Many(v) => v,
        }
    }
}

/// Equal when they hold the same decisions, however they hold them.
impl PartialEq for Decisions {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Decisions {}

impl std::fmt::Debug for Decisions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<Vec<PolicyDecision>> for Decisions {
    fn from(v: Vec<PolicyDecision>) -> Self {
        Decisions(Held::Many(v))
    }
}

impl FromIterator<PolicyDecision> for Decisions {
    fn from_iter<I: IntoIterator<Item = PolicyDecision>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let Some(first) = iter.next() else {
            return Decisions::default();
        };
        match iter.next() {
            None => Decisions::one(first),
            Some(second) => {
                let mut v = Vec::with_capacity(2 + iter.size_hint().0);
                v.push(first);
                v.push(second);
                v.extend(iter);
                Decisions(Held::Many(v))
            }
        }
    }
}

impl IntoIterator for Decisions {
    type Item = PolicyDecision;
    type IntoIter = std::vec::IntoIter<PolicyDecision>;
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a mut Decisions {
    type Item = &'a mut PolicyDecision;
    type IntoIter = std::slice::IterMut<'a, PolicyDecision>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<'a> IntoIterator for &'a Decisions {
    type Item = &'a PolicyDecision;
    type IntoIter = std::slice::Iter<'a, PolicyDecision>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PolicyDecision {
    /// Whether an enforcing policy refused the request (a shadow denial refuses nothing).
    pub fn is_enforced_denial(&self) -> bool {
        !self.decision.allowed && self.policy.is_enforcing()
    }
}

/// The decision whose numbers describe a set of decisions: when `allowed`, the one with the
/// fewest `remaining`; otherwise the enforcing denial with the longest `retry_after`.
/// [`Verdict::deciding`] applies it to a whole verdict; the Envoy service to each descriptor.
pub fn deciding<'a>(
    decisions: impl IntoIterator<Item = &'a PolicyDecision>,
    allowed: bool,
) -> Option<&'a PolicyDecision> {
    let decisions = decisions.into_iter();
    if allowed {
        decisions.min_by_key(|d| d.decision.remaining)
    } else {
        decisions
            .filter(|d| d.is_enforced_denial())
            .max_by_key(|d| d.decision.retry_after)
    }
}

impl Verdict {
    /// Combines per-policy decisions `(policy, decision, cost)` (in request order) by the
    /// all-or-nothing rule. Which policies the store must consume from is
    /// [`Verdict::consumes`].
    ///
    /// An admitting decision reports `remaining` as if its cost were taken; when the request
    /// is denied nothing is taken, so those policies get their `cost` back in `remaining`.
    pub fn combine(decided: Vec<(Arc<Policy>, Decision, u64)>) -> Verdict {
        let allowed = decided
            .iter()
            .all(|(p, d, _)| d.allowed || !p.is_enforcing());
        let delay = if allowed {
            decided.iter().map(|(_, d, _)| d.delay).max().unwrap_or(0)
        } else {
            0
        };
        // Collected into a `Vec` first: it reuses `decided`'s allocation.
        let decisions: Vec<PolicyDecision> = decided
            .into_iter()
            .map(|(policy, mut decision, cost)| {
                if !allowed && decision.allowed {
                    decision.remaining = decision
                        .remaining
                        .saturating_add(cost)
                        .min(policy.capacity());
                    // Nothing is consumed, so no lease is taken.
                    decision.lease = 0;
                }
                PolicyDecision {
                    outcome: Outcome::of(&policy, &decision),
                    policy,
                    decision,
                }
            })
            .collect();
        Verdict {
            allowed,
            delay,
            decisions: decisions.into(),
            at: 0,
        }
    }

    /// [`Verdict::combine`] for one policy, without an allocation.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use sluicegate_core::{AlgorithmKind, Decision, Mode, Policy, Verdict};
    /// let p = Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(1))
    ///     .mode(Mode::Shadow).build().unwrap());
    /// let denied = Decision::deny(1, 0, 10, 10);
    /// let verdict = Verdict::combine_one(Arc::clone(&p), denied);
    /// assert!(verdict.allowed && !verdict.consumes(0)); // shadow: goes ahead, consumes nothing
    /// assert_eq!(verdict, Verdict::combine(vec![(p, denied, 1)]));
    /// ```
    pub fn combine_one(policy: Arc<Policy>, decision: Decision) -> Verdict {
        let allowed = decision.allowed || !policy.is_enforcing();
        Verdict {
            allowed,
            delay: if allowed { decision.delay } else { 0 },
            decisions: Decisions::one(PolicyDecision {
                outcome: Outcome::of(&policy, &decision),
                policy,
                decision,
            }),
            at: 0,
        }
    }

    /// Whether the store must consume from the policy at `index`: the request goes ahead
    /// and that policy admitted it (a shadow policy that would deny takes nothing).
    pub fn consumes(&self, index: usize) -> bool {
        self.allowed
            && self
                .decisions
                .get(index)
                .is_some_and(|d| d.decision.allowed)
    }

    /// The verdict when the store failed: every policy answers by its `on_store_error`.
    pub fn store_failed(policies: &[Arc<Policy>]) -> Verdict {
        Verdict::store_failed_each(policies.iter())
    }

    /// [`Verdict::store_failed`] over any list of policies (one per keyed item).
    pub fn store_failed_each<'a>(policies: impl Iterator<Item = &'a Arc<Policy>>) -> Verdict {
        use crate::policy::OnStoreError;
        Self::failed(policies, |p| p.on_store_error() == OnStoreError::Allow)
    }

    /// The verdict for a request the store could not decide because of `error`: an outage
    /// ([`StoreError::is_outage`]) follows each policy's `on_store_error`
    /// ([`Verdict::store_failed`]); any other error (of the configuration, of the code, or
    /// a request the store refused) fails closed, whatever `on_store_error` says, so a bug
    /// can never open the gate. Shadow policies still never reject.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use sluicegate_core::{AlgorithmKind, Policy, StoreError, Verdict};
    /// let open = [Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 5, Duration::from_secs(1)).build().unwrap())];
    /// assert!(Verdict::store_error(&open, &StoreError::Timeout).allowed);
    /// assert!(!Verdict::store_error(&open, &StoreError::Internal("bad reply".into())).allowed);
    /// ```
    pub fn store_error(policies: &[Arc<Policy>], error: &StoreError) -> Verdict {
        Verdict::store_error_each(policies.iter(), error)
    }

    /// [`Verdict::store_error`] over any list of policies (one per keyed item).
    pub fn store_error_each<'a>(
        policies: impl Iterator<Item = &'a Arc<Policy>>,
        error: &StoreError,
    ) -> Verdict {
        if error.is_outage() {
            Verdict::store_failed_each(policies)
        } else {
            Verdict::failed(policies, |_| false)
        }
    }

    /// Every policy answers `admits(policy)`, counted as a store error.
    fn failed<'a>(
        policies: impl Iterator<Item = &'a Arc<Policy>>,
        admits: impl Fn(&Policy) -> bool,
    ) -> Verdict {
        let decisions: Decisions = policies
            .map(|policy| {
                let allow = admits(policy);
                PolicyDecision {
                    decision: Decision {
                        allowed: allow,
                        limit: policy.limit(),
                        remaining: 0,
                        reset_after: 0,
                        retry_after: (!allow).then_some(1_000_000),
                        delay: 0,
                        lease: 0,
                    },
                    policy: Arc::clone(policy),
                    outcome: Outcome::StoreError,
                }
            })
            .collect();
        Verdict {
            allowed: decisions.iter().all(|d| !d.is_enforced_denial()),
            delay: 0,
            decisions,
            at: 0,
        }
    }

    /// The policy whose numbers describe the verdict (see [`deciding`]).
    pub fn deciding(&self) -> Option<&PolicyDecision> {
        deciding(&self.decisions, self.allowed)
    }

    /// The leases this admitted verdict took on concurrency policies, for a request of
    /// `cost` under one client `key` ([`CheckRequest`](crate::CheckRequest)); free them with
    /// [`Store::release`](crate::Store::release) when the request ends. Empty when denied.
    pub fn leases(&self, key: &str, cost: u64) -> Vec<crate::store::Lease> {
        self.decisions
            .iter()
            .filter(|d| d.decision.lease != 0 && self.allowed)
            .map(|d| crate::store::Lease {
                policy: Arc::clone(&d.policy),
                key: key.to_owned(),
                expires_at: d.decision.lease,
                cost,
            })
            .collect()
    }

    /// The longest `retry_after` among the enforcing policies that deny, µs.
    pub fn retry_after(&self) -> Option<Micros> {
        self.deciding()
            .filter(|_| !self.allowed)
            .and_then(|d| d.decision.retry_after)
    }
}

/// Something that wants to see every verdict: metrics, the dashboard's top keys, logs.
/// Every way in (middleware, decision API, Envoy service) calls the observer it was given
/// once per decided request, so counting happens in one place per sink.
pub trait VerdictObserver: Send + Sync + 'static {
    /// Called once per decided request with its client key.
    fn observe(&self, key: &str, verdict: &Verdict);
}

/// Observes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl VerdictObserver for NoObserver {
    fn observe(&self, _key: &str, _verdict: &Verdict) {}
}

/// Fans one verdict out to several observers.
impl VerdictObserver for Vec<Arc<dyn VerdictObserver>> {
    fn observe(&self, key: &str, verdict: &Verdict) {
        for observer in self {
            observer.observe(key, verdict);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::AlgorithmKind;
    use std::time::Duration;

    fn policy(name: &str) -> Arc<Policy> {
        Arc::new(
            Policy::builder(
                name,
                AlgorithmKind::FixedWindow,
                10,
                Duration::from_secs(60),
            )
            .build()
            .unwrap(),
        )
    }

    #[test]
    fn a_denial_gives_the_admitting_policies_their_cost_back() {
        let verdict = Verdict::combine(vec![
            (policy("a"), Decision::allow(10, 6, 1), 3),
            (policy("b"), Decision::deny(10, 0, 1, 1), 3),
        ]);
        assert!(!verdict.allowed);
        assert!(!verdict.consumes(0) && !verdict.consumes(1));
        assert_eq!(verdict.decisions[0].decision.remaining, 9);
    }

    #[test]
    fn an_admission_keeps_remaining_as_evaluated() {
        let verdict = Verdict::combine(vec![
            (policy("a"), Decision::allow(10, 6, 1), 3),
            (policy("b"), Decision::allow(10, 2, 1), 3),
        ]);
        assert!(verdict.allowed);
        assert!(verdict.consumes(0) && verdict.consumes(1));
        assert_eq!(verdict.deciding().unwrap().decision.remaining, 2);
    }
}
