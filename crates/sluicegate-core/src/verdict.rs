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

/// The policy of a [`PolicyDecision`]: borrowed from the request, or owned. It derefs to
/// the `Arc<Policy>`, so `d.policy.name()` and `Arc::clone(&d.policy)` read as before.
///
/// Why borrowed: the in-memory store's synchronous check ([`MemoryStore::check_now`]) is
/// decided while the caller holds its policies, so its verdict refers to them instead of
/// cloning the `Arc` (an atomic increment, and an atomic decrement when the verdict is
/// dropped: two locked instructions a decision, which cost as much as the rest of a
/// one-policy check on a virtual machine). [`VerdictOf::into_owned`] makes a verdict that
/// outlives the request's policies.
///
/// [`MemoryStore::check_now`]: crate::MemoryStore::check_now
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, Policy, PolicyArc};
/// let p = Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(1)).build().unwrap());
/// let borrowed = PolicyArc::from(&p);
/// assert_eq!(Arc::strong_count(&p), 1);
/// let owned = borrowed.clone().into_owned();
/// assert_eq!((Arc::strong_count(&p), owned.name()), (2, "p"));
/// assert_eq!(borrowed, owned);
/// ```
#[derive(Clone)]
pub enum PolicyArc<'p> {
    /// The caller's policy, held for as long as the verdict lives; in an owned verdict
    /// ([`MemoryStore::check_now`]'s), the process's immortal copy of the policy, equal to
    /// the caller's (no reference count to keep).
    Borrowed(&'p Arc<Policy>),
    /// A policy of the verdict's own.
    Owned(Arc<Policy>),
}

impl PolicyArc<'_> {
    /// The same policy, owned (an `Arc` clone when it was borrowed).
    pub fn into_owned(self) -> PolicyArc<'static> {
        match self {
            PolicyArc::Borrowed(p) => PolicyArc::Owned(Arc::clone(p)),
            PolicyArc::Owned(p) => PolicyArc::Owned(p),
        }
    }
}

impl std::ops::Deref for PolicyArc<'_> {
    type Target = Arc<Policy>;
    #[inline]
    fn deref(&self) -> &Arc<Policy> {
        match self {
            PolicyArc::Borrowed(p) => p,
            PolicyArc::Owned(p) => p,
        }
    }
}

impl From<Arc<Policy>> for PolicyArc<'_> {
    fn from(policy: Arc<Policy>) -> Self {
        PolicyArc::Owned(policy)
    }
}

impl<'p> From<&'p Arc<Policy>> for PolicyArc<'p> {
    fn from(policy: &'p Arc<Policy>) -> Self {
        PolicyArc::Borrowed(policy)
    }
}

/// Equal when the policies are, borrowed or owned.
impl PartialEq for PolicyArc<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for PolicyArc<'_> {}

impl std::fmt::Debug for PolicyArc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// One policy's part of a [`Verdict`] (of a [`VerdictOf`] borrowing its policies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDecisionOf<'p> {
    /// The policy.
    pub policy: PolicyArc<'p>,
    /// What its algorithm decided (for a shadow policy: what it would have decided).
    pub decision: Decision,
    /// How it is counted.
    pub outcome: Outcome,
}

/// One policy's part of an owned [`Verdict`].
pub type PolicyDecision = PolicyDecisionOf<'static>;

/// The answer for one request under one or more policies; `'p` is how long it may refer
/// to the request's policies ([`PolicyArc`]). [`Verdict`] is the one that owns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerdictOf<'p> {
    /// Whether the request goes ahead (after `delay`).
    pub allowed: bool,
    /// How long the request must wait for its reserved turn (delay mode), µs.
    pub delay: Micros,
    /// One entry per policy, in request order.
    pub decisions: DecisionsOf<'p>,
    /// When the store decided, by the store's clock (µs since the epoch; the Redis
    /// server's `TIME` on Redis). 0 when no store decided (a store failure). A reservation
    /// records it, so a later settle finds the window the request was admitted in.
    pub at: Micros,
}

/// A verdict that owns its policies: what stores answer through [`Store`](crate::Store).
pub type Verdict = VerdictOf<'static>;

/// The decisions of a [`Verdict`], one per policy in request order: a list (it derefs to
/// a slice) that keeps one decision inline, so that the common request, under one policy,
/// is decided without an allocation, and more on the heap.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::verdict::Decisions;
/// use sluicegate_core::{AlgorithmKind, Decision, Outcome, Policy, PolicyDecision};
/// let p = Arc::new(Policy::builder("p", AlgorithmKind::Gcra, 1, Duration::from_secs(1)).build().unwrap());
/// let d = PolicyDecision { policy: p.into(), decision: Decision::allow(1, 0, 1), outcome: Outcome::Allowed };
/// let one: Decisions = std::iter::once(d.clone()).collect();
/// assert_eq!(one, Decisions::from(vec![d.clone()]));
/// assert_eq!((one.len(), one[0].outcome), (1, Outcome::Allowed));
/// assert!(Decisions::default().is_empty());
/// ```
#[derive(Clone)]
pub struct DecisionsOf<'p>(Held<'p>);

/// The decisions of an owned [`Verdict`].
pub type Decisions = DecisionsOf<'static>;

#[derive(Clone)]
enum Held<'p> {
    One(PolicyDecisionOf<'p>),
    Many(Vec<PolicyDecisionOf<'p>>),
}

impl<'p> DecisionsOf<'p> {
    /// A list of one decision (no allocation).
    pub fn one(decision: PolicyDecisionOf<'p>) -> Self {
        DecisionsOf(Held::One(decision))
    }

    /// The decisions as a `Vec`.
    pub fn into_vec(self) -> Vec<PolicyDecisionOf<'p>> {
        match self.0 {
            Held::One(d) => vec![d],
            Held::Many(v) => v,
        }
    }

    /// The same decisions, owning their policies.
    pub fn into_owned(self) -> Decisions {
        let owned = |d: PolicyDecisionOf<'p>| PolicyDecision {
            policy: d.policy.into_owned(),
            decision: d.decision,
            outcome: d.outcome,
        };
        match self.0 {
            Held::One(d) => DecisionsOf(Held::One(owned(d))),
            Held::Many(v) => DecisionsOf(Held::Many(v.into_iter().map(owned).collect())),
        }
    }
}

impl Default for DecisionsOf<'_> {
    fn default() -> Self {
        DecisionsOf(Held::Many(Vec::new()))
    }
}

impl<'p> std::ops::Deref for DecisionsOf<'p> {
    type Target = [PolicyDecisionOf<'p>];
    fn deref(&self) -> &[PolicyDecisionOf<'p>] {
        match &self.0 {
            Held::One(d) => std::slice::from_ref(d),
            Held::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for DecisionsOf<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.0 {
            Held::One(d) => std::slice::from_mut(d),
            Held::Many(v) => v,
        }
    }
}

/// Equal when they hold the same decisions, however they hold them.
impl PartialEq for DecisionsOf<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for DecisionsOf<'_> {}

impl std::fmt::Debug for DecisionsOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'p> From<Vec<PolicyDecisionOf<'p>>> for DecisionsOf<'p> {
    fn from(v: Vec<PolicyDecisionOf<'p>>) -> Self {
        DecisionsOf(Held::Many(v))
    }
}

impl<'p> FromIterator<PolicyDecisionOf<'p>> for DecisionsOf<'p> {
    fn from_iter<I: IntoIterator<Item = PolicyDecisionOf<'p>>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let Some(first) = iter.next() else {
            return DecisionsOf::default();
        };
        match iter.next() {
            None => DecisionsOf::one(first),
            Some(second) => {
                let mut v = Vec::with_capacity(2 + iter.size_hint().0);
                v.push(first);
                v.push(second);
                v.extend(iter);
                DecisionsOf(Held::Many(v))
            }
        }
    }
}

impl<'p> IntoIterator for DecisionsOf<'p> {
    type Item = PolicyDecisionOf<'p>;
    type IntoIter = std::vec::IntoIter<PolicyDecisionOf<'p>>;
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl<'a, 'p> IntoIterator for &'a mut DecisionsOf<'p> {
    type Item = &'a mut PolicyDecisionOf<'p>;
    type IntoIter = std::slice::IterMut<'a, PolicyDecisionOf<'p>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<'a, 'p> IntoIterator for &'a DecisionsOf<'p> {
    type Item = &'a PolicyDecisionOf<'p>;
    type IntoIter = std::slice::Iter<'a, PolicyDecisionOf<'p>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PolicyDecisionOf<'_> {
    /// Whether an enforcing policy refused the request (a shadow denial refuses nothing).
    pub fn is_enforced_denial(&self) -> bool {
        !self.decision.allowed && self.policy.is_enforcing()
    }
}

/// The decision whose numbers describe a set of decisions: when `allowed`, the one with the
/// fewest `remaining`; otherwise the enforcing denial with the longest `retry_after`.
/// [`Verdict::deciding`] applies it to a whole verdict; the Envoy service to each descriptor.
pub fn deciding<'a, 'p: 'a>(
    decisions: impl IntoIterator<Item = &'a PolicyDecisionOf<'p>>,
    allowed: bool,
) -> Option<&'a PolicyDecisionOf<'p>> {
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
        VerdictOf::combine_of(
            decided
                .into_iter()
                .map(|(policy, decision, cost)| (policy.into(), decision, cost))
                .collect(),
        )
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
        VerdictOf::one(policy.into(), decision, 0)
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
                    policy: Arc::clone(policy).into(),
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
}

impl<'p> VerdictOf<'p> {
    /// [`Verdict::combine`] over policies borrowed or owned ([`PolicyArc`]).
    pub fn combine_of(decided: Vec<(PolicyArc<'p>, Decision, u64)>) -> Self {
        let allowed = decided
            .iter()
            .all(|(p, d, _)| d.allowed || !p.is_enforcing());
        let delay = if allowed {
            decided.iter().map(|(_, d, _)| d.delay).max().unwrap_or(0)
        } else {
            0
        };
        // Collected into a `Vec` first: it reuses `decided`'s allocation (same size).
        let decisions: Vec<PolicyDecisionOf<'p>> = decided
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
                PolicyDecisionOf {
                    outcome: Outcome::of(&policy, &decision),
                    policy,
                    decision,
                }
            })
            .collect();
        VerdictOf {
            allowed,
            delay,
            decisions: decisions.into(),
            at: 0,
        }
    }

    /// The verdict for one policy, borrowed or owned ([`PolicyArc`]): the rule of
    /// [`Verdict::combine_one`], decided at `at`.
    #[inline]
    pub fn one(policy: PolicyArc<'p>, decision: Decision, at: Micros) -> Self {
        let allowed = decision.allowed || !policy.is_enforcing();
        VerdictOf {
            allowed,
            delay: if allowed { decision.delay } else { 0 },
            decisions: DecisionsOf::one(PolicyDecisionOf {
                outcome: Outcome::of(&policy, &decision),
                policy,
                decision,
            }),
            at,
        }
    }

    /// The same verdict, owning its policies (an `Arc` clone for each borrowed one).
    pub fn into_owned(self) -> Verdict {
        VerdictOf {
            allowed: self.allowed,
            delay: self.delay,
            decisions: self.decisions.into_owned(),
            at: self.at,
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

    /// The policy whose numbers describe the verdict (see [`deciding`]).
    pub fn deciding(&self) -> Option<&PolicyDecisionOf<'p>> {
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
    fn observe(&self, key: &str, verdict: &VerdictOf<'_>);
}

/// Observes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl VerdictObserver for NoObserver {
    fn observe(&self, _key: &str, _verdict: &VerdictOf<'_>) {}
}

/// Fans one verdict out to several observers.
impl VerdictObserver for Vec<Arc<dyn VerdictObserver>> {
    fn observe(&self, key: &str, verdict: &VerdictOf<'_>) {
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
